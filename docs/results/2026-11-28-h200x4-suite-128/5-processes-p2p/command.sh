# Call 5 (nvidia-h200-x4, binaries of f53e115): the processes-across-hosts test that call 4
# cut off, beside nccl-tests sendrecv, gather and scatter through oxccl (-g 4, 8 B-1 MiB:
# the changed LL send/recv kernel), then PyTorch's collectives.
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
( OUT=$r/tests XDG_CACHE_HOME=/tmp/cache-a GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="processes::ranks_as_processes_on_separate_hosts" GPU_TEST_TIMEOUT=200 bash gpu-bin/gpu-run.sh ) &
make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 16 > $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)"
for t in sendrecv gather scatter alltoall; do
  LD_LIBRARY_PATH=$PWD/gpu-bin/lib:$LD_LIBRARY_PATH timeout 60 $nt/build/${t}_perf -b 8 -e 1M -f 2 -c 1 -n 10 -w 3 -g 4 > $r/nt-$t.txt 2>&1
  echo "$t: exit $? wrong $(grep -o 'Out of bounds values : [0-9]*' $r/nt-$t.txt | grep -o '[0-9]*$')"
done
LD_PRELOAD=$PWD/gpu-bin/lib/libnccl.so.2 timeout 150 python3 examples/pytorch/check_collectives.py > $r/pytorch-oxccl.txt 2>&1; echo "pytorch: exit $?"; grep -c ok $r/pytorch-oxccl.txt
wait
cat $r/tests/summary.txt; grep -h "cases ok\|FAILED\|panicked\|test result\|GPU matrix" $r/tests/gpu_collectives.log | cut -c1-200 | tail -12
echo "total $((SECONDS-start)) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
