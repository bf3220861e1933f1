# Call 5 (nvidia-h200-x2): HEAD (alltoall of 2 ranks on 128 channels: in place a lane a
# channel, out of place two channels a lane): GPU tests that run alltoall at 8 and 256 MiB
# and with one rank in place; nccl-tests alltoall checked 8 B-1 GiB and timed 16 MiB-1 GiB
# against NCCL (two rounds, and mpirun).
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1/1048576, $6, $10}'; }
wrong() { grep -o 'Out of bounds values : [0-9]*' $1 | grep -o '[0-9]*$'; }
( OUT=$r/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::ranks_as_threads" GPU_TEST_TIMEOUT=200 bash gpu-bin/gpu-run.sh > /dev/null ) &
( OUT=$r/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::alltoall_in_place_on_one_rank_only one_host::large_messages" GPU_TEST_TIMEOUT=200 bash gpu-bin/gpu-run.sh > /dev/null ) &
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 16 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 16 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)" ) &
wait
for d in tests-a tests-b; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result\|^test " $r/$d/*.log | cut -c1-200 | tail -10; done
echo "tests $((SECONDS-start)) s"
LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 100 $nt/build/alltoall_perf -b 8 -e 1G -f 4 -c 1 -n 5 -w 2 -g 2 > $r/chk-alltoall.txt 2>&1; echo "chk-alltoall: exit $? wrong $(wrong $r/chk-alltoall.txt)"
LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 100 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/alltoall_perf -b 8 -e 1G -f 4 -c 1 -n 5 -w 2 -g 1 > $r/chk-mpi-alltoall.txt 2>&1; echo "chk-mpi-alltoall: exit $? wrong $(wrong $r/chk-mpi-alltoall.txt)"
for round in 1 2; do
  LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 100 $nt/build/alltoall_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 2 > $r/alltoall-head-$round.txt 2>&1; echo "alltoall-head-$round: exit $? wrong $(wrong $r/alltoall-head-$round.txt) $(rows $r/alltoall-head-$round.txt)"
  timeout 100 $nt/build/alltoall_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 2 > $r/alltoall-nccl-$round.txt 2>&1; echo "alltoall-nccl-$round: $(rows $r/alltoall-nccl-$round.txt)"
done
LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 100 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/alltoall_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 1 > $r/mpi-alltoall-head.txt 2>&1; echo "mpi-alltoall-head: exit $? wrong $(wrong $r/mpi-alltoall-head.txt) $(rows $r/mpi-alltoall-head.txt)"
echo "total $((SECONDS-start)) s"
tar czf $OUT/x2-5.tgz -C $r .
