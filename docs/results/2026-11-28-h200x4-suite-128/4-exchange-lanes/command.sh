# Call 4 (nvidia-h200-x4, binaries of f53e115): in-place alltoall without the copy (exchange
# lanes over LL and Simple): the GPU tests that hold its cases, with the tuner comparison
# beside them; then nccl-tests alltoall 8 B-1 GiB, -g 4 and mpirun -np 4, against NCCL.
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 16 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 16 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)"
  XDG_CACHE_HOME=/tmp/cache-t OUT=$r/tuner timeout 200 bash scripts/gpu-tuner-compare.sh > /dev/null 2>&1; echo "tuner exit $? $((SECONDS-start)) s"; head -30 $r/tuner/compare.txt ) &
( OUT=$r/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::ranks_as_threads p2p::" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="five_ranks processes::ranks_as_processes" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-c XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="across_hosts::ranks_on_separate_hosts_run_kernels one_host::the_executor_over_ll" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
wait
for d in tests-a tests-b tests-c; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result\|mismatch\|wrong" $r/$d/*.log | cut -c1-220 | tail -12; done
echo "tests $((SECONDS-start)) s"
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1, $6, $10}'; }
for round in 1 2; do for lib in oxccl nccl; do
  path=; [[ $lib == oxccl ]] && path=$PWD/gpu-bin/lib
  LD_LIBRARY_PATH="$path${path:+:}$LD_LIBRARY_PATH" timeout 120 $nt/build/alltoall_perf -b 8 -e 1G -f 4 -c 1 -n 20 -w 5 -g 4 > $r/a2a-$lib$round.txt 2>&1
  echo "g4 $lib $round: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/a2a-$lib$round.txt | grep -o '[0-9]*$') $(rows $r/a2a-$lib$round.txt)"
done; done
for lib in oxccl nccl; do
  path=; [[ $lib == oxccl ]] && path=$PWD/gpu-bin/lib
  LD_LIBRARY_PATH="$path${path:+:}$LD_LIBRARY_PATH" timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/alltoall_perf -b 8 -e 1G -f 4 -c 1 -n 20 -w 5 -g 1 > $r/a2a-mpi-$lib.txt 2>&1
  echo "mpi $lib: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/a2a-mpi-$lib.txt | grep -o '[0-9]*$') $(rows $r/a2a-mpi-$lib.txt)"
done
echo "total $((SECONDS-start)) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
