# 2xH200 at the new defaults: issue 20's six tests at 8 B..32 MiB, oxccl against NCCL at its
# defaults and at 4x4, 2 ranks a GPU and a host each, then 4 ranks as 2 hosts of 2 GPUs.
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 32 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/x2c.tmp -C $r . 2>/dev/null && mv $OUT/x2c.tmp $OUT/x2c.tgz; }
(while sleep 20; do pack; done) &
packer=$!
for layout in 2x1 4x2; do
  n=${layout%x*}; h=${layout#*x}
  OUT=$r/full-l$layout NET_SAMPLE=1 NET_PER_HOST=$h NET_RANKS=$n NET_MAX=32M NET_TIMEOUT=40 bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "layout $layout: $? at $((SECONDS-start)) s"; rm -f $r/full-l$layout/rank.sh; pack
done
grep -v "wrong 0\|lines\|loopback\|MPS" $r/*/summary.txt
echo quit | nvidia-cuda-mps-control
kill $packer
pack
echo "total $((SECONDS-start)) s"
