# Call 3 (nvidia-h200-x2): issue 20's benchmark with several GPUs per posed host: 4 ranks as
# 2 hosts of 2 GPUs (NVLink inside a host, loopback sockets between; each GPU shared by a
# rank of each host under MPS), and 2 ranks as 2 hosts, a GPU each; oxccl against NCCL at
# its defaults and at 4 threads x 4 sockets, six tests, 8 B..32 MiB.
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nvidia-smi topo -m >> $r/machine.txt 2>&1; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 32 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/x2-1.tgz -C $r . ; }
OUT=$r/net-2x2 NET_PER_HOST=2 NET_RANKS=4 NET_MAX=32M bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1; echo "2x2 $? at $((SECONDS-start)) s"; pack
OUT=$r/net-2x1 NET_RANKS=2 NET_MAX=32M bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1; echo "2x1 $? at $((SECONDS-start)) s"; pack
grep -v "wrong 0\|lines" $r/net-2x2/summary.txt $r/net-2x1/summary.txt; grep -c "wrong 0" $r/net-2x2/summary.txt $r/net-2x1/summary.txt
echo quit | nvidia-cuda-mps-control
pack
echo "total $((SECONDS-start)) s"
