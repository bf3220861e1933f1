# Call 3 (nvidia-h200-x4, binaries of 96c0f8c; gpu-bin/alt: the same with two experiment
# variables, OXCCL_EXP_A2A_WIDTH (channels a peer of the ordered lanes) and
# OXCCL_EXP_A2A_ALWAYS (ordered lanes out of place too), never committed): the GPU tests
# that now hold in-place alltoall cases, then nccl-tests alltoall -g 4 in place.
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 16 > $r/nt-build.txt 2>&1
  make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build-mpi -j 16 >> $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)" ) &
( OUT=$r/tests-a XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="one_host::ranks_as_threads one_host::large_messages" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-b XDG_CACHE_HOME=/tmp/cache-b GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="across_hosts::ranks_on_separate_hosts processes::ranks_as_processes" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
( OUT=$r/tests-c XDG_CACHE_HOME=/tmp/cache-c GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="five_ranks" GPU_TEST_TIMEOUT=300 bash gpu-bin/gpu-run.sh ) &
wait
for d in tests-a tests-b tests-c; do echo "== $d"; cat $r/$d/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result\|wrong\|mismatch" $r/$d/*.log | cut -c1-220 | tail -14; done
echo "tests $((SECONDS-start)) s"
a2a() {  # tag libdir [VAR=value ...]
  local tag=$1 lib=$2; shift 2
  env "$@" LD_LIBRARY_PATH="$lib${lib:+:}$LD_LIBRARY_PATH" timeout 120 $nt/build/alltoall_perf -b ${MIN:-16M} -e 1G -f 4 -c 1 -n 20 -w 5 -g 4 > $r/a2a-$tag.txt 2>&1
  echo "$tag: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/a2a-$tag.txt | grep -o '[0-9]*$') $(grep -E '^ +[0-9]+ ' $r/a2a-$tag.txt | awk '{printf "%s:%s/%s|%s/%s ", $1, $6, $8, $10, $12}')"
}
a2a nccl1 ""
a2a main1 gpu-bin/lib
a2a w42 gpu-bin/alt OXCCL_EXP_A2A_WIDTH=42
a2a always gpu-bin/alt OXCCL_EXP_A2A_ALWAYS=1
a2a always42 gpu-bin/alt OXCCL_EXP_A2A_ALWAYS=1 OXCCL_EXP_A2A_WIDTH=42
a2a main2 gpu-bin/lib
a2a w32 gpu-bin/alt OXCCL_EXP_A2A_WIDTH=32
a2a nccl2 ""
MIN=8 a2a full-main gpu-bin/lib
echo "a2a $((SECONDS-start)) s"
for lib in oxccl nccl; do
  path=; [[ $lib == oxccl ]] && path=$PWD/gpu-bin/lib
  LD_LIBRARY_PATH="$path${path:+:}$LD_LIBRARY_PATH" timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $nt/build-mpi/alltoall_perf -b 8 -e 1G -f 4 -c 1 -n 20 -w 5 -g 1 > $r/a2a-mpi-$lib.txt 2>&1
  echo "mpi $lib: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/a2a-mpi-$lib.txt | grep -o '[0-9]*$') $(grep -E '^ +[0-9]+ ' $r/a2a-mpi-$lib.txt | awk '$1>=16777216 {printf "%s:%s/%s|%s/%s ", $1, $6, $8, $10, $12}')"
done
echo "total $((SECONDS-start)) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
