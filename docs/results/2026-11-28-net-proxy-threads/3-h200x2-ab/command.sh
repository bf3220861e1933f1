# 2xH200 (32 cores) at the new defaults: oxccl against the library before the change
# (gpu-bin/lib-old) and NCCL at 4x4, six tests, 512 KiB..32 MiB, 2 ranks a GPU each and 4 ranks
# as 2 hosts of 2 GPUs, runnable threads sampled; then issue 20's six tests at 8 B..32 MiB.
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 32 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/x2b.tmp -C $r . 2>/dev/null && mv $OUT/x2b.tmp $OUT/x2b.tgz; }
(while sleep 30; do pack; done) &
packer=$!
for round in 1 2; do
for layout in 2x1 4x2; do
  n=${layout%x*}; h=${layout#*x}
  OUT=$r/ab$round-l$layout NET_SAMPLE=1 NET_PER_HOST=$h NET_RANKS=$n NET_MAX=32M NET_ARGS="-b 512K" NET_TIMEOUT=40 NET_LIBS="oxccl oxccl-lib-lib-old nccl-best" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "round $round layout $layout: $? at $((SECONDS-start)) s"; rm -f $r/ab$round-l$layout/rank.sh; pack
done
done
grep -v "wrong 0\|lines\|loopback\|MPS" $r/ab*/summary.txt
echo quit | nvidia-cuda-mps-control
kill $packer
pack
echo "total $((SECONDS-start)) s"
