# One H200 (16 cores) at the new defaults (proxy threads by the machine's ranks, no socket
# helpers): issue 20's benchmark (2 and 4 ranks as hosts, six tests, 8 B..32 MiB, oxccl vs
# NCCL at its defaults and at 4x4), then the A/B against the library before the change
# (gpu-bin/lib-old) from 512 KiB, then the across_hosts GPU tests in the time left.
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 16 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/h1b.tmp -C $r . 2>/dev/null && mv $OUT/h1b.tmp $OUT/h1b.tgz; }
(while sleep 30; do pack; done) &
packer=$!
OUT=$r/net NET_SAMPLE=1 NET_RANKS="2 4" NET_MAX=32M NET_TIMEOUT=60 bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1; echo "net $? at $((SECONDS-start)) s"; pack
OUT=$r/ab NET_SAMPLE=1 NET_RANKS="2 4" NET_MAX=32M NET_ARGS="-b 512K" NET_TIMEOUT=40 NET_LIBS="oxccl oxccl-lib-lib-old" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1; echo "ab $? at $((SECONDS-start)) s"; pack
left=$((570 - (SECONDS-start)))
OUT=$r/tests XDG_CACHE_HOME=/tmp/cache-t GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="across_hosts::" GPU_TEST_TIMEOUT=$left bash gpu-bin/gpu-run.sh > /dev/null 2>&1; echo "tests $? at $((SECONDS-start)) s"
grep -h "test result\|FAILED\|panicked\| ok$" $r/tests/*.log | tail -15
grep -v "wrong 0\|lines" $r/net/summary.txt $r/ab/summary.txt; grep -c "wrong 0" $r/net/summary.txt $r/ab/summary.txt
for f in $r/net/net-*.txt; do printf "%s: " $(basename $f .txt); grep -E "^ +[0-9]+ " $f | awk '{printf "%s:%s/%s ", $1, $6, $10}'; echo; done
echo quit | nvidia-cuda-mps-control
kill $packer
pack
echo "total $((SECONDS-start)) s"
