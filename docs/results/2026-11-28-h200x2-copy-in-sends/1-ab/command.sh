# Call 1 (nvidia-h200-x2): main at b6084af (gpu-bin-main) against the branch
# alltoall-copy-in-sends rebased on it (gpu-bin). Tests first: main's p2p:: and
# one_host::ranks_as_threads (the review mends and the folded packing never ran on a GPU);
# the branch's one_host:: and every_route_matches. Then, GPU to itself: nccl-tests alltoall
# -g 2 and mpirun -np 2 at 16 MiB-1 GiB, main / branch / NCCL in alternating rounds;
# oxccl-perf alltoall_grouped, gather and all_reduce against NCCL (main).
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
rows() { grep -E '^ +[0-9]+ ' $1 | awk '{printf "%s:%s/%s ", $1, $6, $10}'; }
wrong() { grep -o 'Out of bounds values : [0-9]*' $1 | grep -o '[0-9]*$'; }
( OUT=$r/main-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p::" GPU_TEST_TIMEOUT=280 bash gpu-bin-main/gpu-run.sh > /dev/null ) &
( OUT=$r/main-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::ranks_as_threads" GPU_TEST_TIMEOUT=280 bash gpu-bin-main/gpu-run.sh > /dev/null ) &
( OUT=$r/br-a XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::" GPU_TEST_TIMEOUT=280 bash gpu-bin/gpu-run.sh > /dev/null ) &
( OUT=$r/br-b XDG_CACHE_HOME=/tmp/cache-d GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="every_route_matches" GPU_TEST_TIMEOUT=280 bash gpu-bin/gpu-run.sh > /dev/null ) &
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 12 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 12 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)" ) &
wait
for d in main-a main-b br-a br-b; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|groups ok\|FAILED\|panicked\|test result" $r/$d/*.log | cut -c1-200 | tail -8; done
echo "tests $((SECONDS-start)) s"
a2a() { # $1 lib dir ('' = NCCL) $2 name $3 mpi?
  local path=$LD_LIBRARY_PATH; [[ -n $1 ]] && path="$PWD/$1/lib:$LD_LIBRARY_PATH"
  if [[ $3 == 1 ]]; then
    LD_LIBRARY_PATH="$path" XDG_CACHE_HOME=/tmp/cache-n timeout 100 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/alltoall_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 1 > $r/$2.txt 2>&1
  else
    LD_LIBRARY_PATH="$path" XDG_CACHE_HOME=/tmp/cache-n timeout 100 $nt/build/alltoall_perf -b 16M -e 1G -f 2 -c 1 -n 20 -w 5 -g 2 > $r/$2.txt 2>&1
  fi
  echo "$2: exit $? wrong $(wrong $r/$2.txt) $(rows $r/$2.txt)"
}
a2a gpu-bin-main main-1 0; a2a gpu-bin br-1 0; a2a "" nccl-1 0
a2a gpu-bin br-2 0; a2a gpu-bin-main main-2 0; a2a "" nccl-2 0
a2a gpu-bin-main mpi-main-1 1; a2a gpu-bin mpi-br-1 1; a2a "" mpi-nccl-1 1
a2a gpu-bin mpi-br-2 1; a2a gpu-bin-main mpi-main-2 1
echo "a2a done $((SECONDS-start)) s"
perf() { XDG_CACHE_HOME=/tmp/cache-p timeout 120 gpu-bin-main/oxccl-perf "$@" -f 2 -n 20 -w 5 -c 1 --gpus 2 --baseline nccl > $r/perf-$1.txt 2>&1; echo "perf $1: exit $?"; grep -E '^ +[0-9]+ ' $r/perf-$1.txt | awk '{print "  ", $1, $6, $10, $14, $16}'; }
perf alltoall_grouped -b 16M -e 1G
perf gather -b 64M -e 1G
perf all_reduce -b 256M -e 1G
echo "total $((SECONDS-start)) s"
tar czf $OUT/x2-1.tgz -C $r .
