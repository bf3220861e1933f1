# Call 4 (nvidia-h200-x4, binaries of the working tree with 64 neighbour channels by
# default on wide GPUs): the GPU tests that hold send/recv groups and the collective matrix,
# nccl-tests' exchange tests checked (-g 4 and mpirun), PyTorch, then sendrecv timed at the
# defaults.
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1, $6, $10}'; }
wrong() { grep -o 'Out of bounds values : [0-9]*' $1 | grep -o '[0-9]*$'; }
( OUT=$r/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p:: one_host::ranks_as_threads" GPU_TEST_TIMEOUT=330 bash gpu-bin/gpu-run.sh > /dev/null ) &
( OUT=$r/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="processes::ranks_as_processes one_host::large_messages" GPU_TEST_TIMEOUT=330 bash gpu-bin/gpu-run.sh > /dev/null ) &
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 16 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 16 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)"
  for t in sendrecv alltoall; do
    LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 150 $nt/build/${t}_perf -b 8 -e 1G -f 4 -c 1 -n 10 -w 3 -g 4 > $r/chk-$t.txt 2>&1
    echo "chk-$t: exit $? wrong $(wrong $r/chk-$t.txt)"
    LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" XDG_CACHE_HOME=/tmp/cache-n timeout 150 mpirun --allow-run-as-root --oversubscribe -np 4 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/${t}_perf -b 8 -e 1G -f 4 -c 1 -n 10 -w 3 -g 1 > $r/chk-mpi-$t.txt 2>&1
    echo "chk-mpi-$t: exit $? wrong $(wrong $r/chk-mpi-$t.txt)"
  done ) &
wait
for d in tests-a tests-b; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|groups ok\|FAILED\|panicked\|test result" $r/$d/*.log | cut -c1-200 | tail -12; done
echo "tests $((SECONDS-start)) s"
LD_PRELOAD=$PWD/gpu-bin/lib/libnccl.so.2 timeout 150 python3 examples/pytorch/check_collectives.py > $r/pytorch-oxccl.txt 2>&1; echo "pytorch exit $? ok lines $(grep -c ': ok' $r/pytorch-oxccl.txt)"; grep -i "fail\|error\|wrong" $r/pytorch-oxccl.txt | head -5
for round in 1 2; do
  LD_LIBRARY_PATH="$PWD/gpu-bin/lib:$LD_LIBRARY_PATH" timeout 100 $nt/build/sendrecv_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 4 > $r/sendrecv-default-$round.txt 2>&1
  echo "sendrecv default $round: exit $? wrong $(wrong $r/sendrecv-default-$round.txt) $(rows $r/sendrecv-default-$round.txt)"
done
echo "total $((SECONDS-start)) s"
tar czf $OUT/x4-2.tgz -C $r .
