# Call 1 (nvidia-h200): issue 20's benchmark at HEAD (2 and 4 ranks as hosts, oxccl vs NCCL
# defaults and 4x4), proxy traces of 2 ranks' all_reduce and reduce_scatter at 2 MiB, the
# plugin at the defaults (3 tests, 2 rounds), then every across_hosts:: GPU test.
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt; git log -1 --format=%H >> $r/machine.txt 2>/dev/null
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 16 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/h1-1.tgz -C $r . ; }
OUT=$r/net NET_RANKS="2 4" NET_MAX=32M bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1; echo "net $? at $((SECONDS-start)) s"; pack
OUT=$r/trace NET_RANKS=2 NET_TESTS="all_reduce reduce_scatter" NET_LIBS=oxccl NET_TRACE=1 NET_MAX=2M NET_ARGS="-b 2M" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1; echo "trace $? at $((SECONDS-start)) s"; pack
OUT=$r/netplugin NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter" bash gpu-bin/gpu-netplugin.sh $nt/build-mpi > /dev/null 2>&1; echo "netplugin $? at $((SECONDS-start)) s"; pack
left=$((570 - (SECONDS-start)))
OUT=$r/tests XDG_CACHE_HOME=/tmp/cache-t GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="across_hosts::" GPU_TEST_TIMEOUT=$left bash gpu-bin/gpu-run.sh > /dev/null 2>&1; echo "tests $? at $((SECONDS-start)) s"
grep -h "test result\|FAILED\|panicked\| ok$" $r/tests/*.log | tail -15
cat $r/net/summary.txt | grep -v "wrong 0\|lines" ; grep -c "wrong 0" $r/net/summary.txt
echo quit | nvidia-cuda-mps-control
pack
echo "total $((SECONDS-start)) s"
