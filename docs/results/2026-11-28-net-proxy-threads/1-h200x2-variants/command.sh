# Proxy threads on a many-core host: oxccl at its defaults, without helpers (NCCL_SOCKET_NTHREADS=0)
# at 4, 8 and 16 proxy threads, against NCCL at 4x4; four tests, 512 KiB..32 MiB, ranks posing as
# hosts, with the machine's runnable threads sampled during each run (NET_SAMPLE=1).
set -u
start=$SECONDS
tag=${TAG:-x2a}
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 32 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/$tag.tmp -C $r . 2>/dev/null && mv $OUT/$tag.tmp $OUT/$tag.tgz; }
(while sleep 30; do pack; done) &
packer=$!
export NET_ENV_nohelp="NCCL_SOCKET_NTHREADS=0" NET_ENV_nh8="NCCL_SOCKET_NTHREADS=0 OXCCL_PROXY_THREADS=8" NET_ENV_nh16="NCCL_SOCKET_NTHREADS=0 OXCCL_PROXY_THREADS=16"
for layout in ${LAYOUTS:-2x1 4x2}; do
  n=${layout%x*}; h=${layout#*x}
  OUT=$r/l$layout NET_SAMPLE=1 NET_PER_HOST=$h NET_RANKS=$n NET_MAX=32M NET_ARGS="-b 512K" NET_TIMEOUT=40 NET_TESTS="${TESTS:-all_reduce all_gather reduce_scatter alltoall}" NET_LIBS="${LIBS:-oxccl oxccl-env-nohelp oxccl-env-nh8 oxccl-env-nh16 nccl-best}" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "layout $layout: $? at $((SECONDS-start)) s"; rm -f $r/l$layout/rank.sh; pack
done
grep -v "wrong 0\|lines\|loopback\|MPS" $r/l*/summary.txt
cut -c1-230 $r/l*/runnable.txt
for f in $r/l*/net-*.txt; do printf "%s: " $(basename $f .txt); grep -E "^ +[0-9]+ " $f | awk '{printf "%s:%s/%s ", $1/1024, $6, $10}'; echo; done
echo quit | nvidia-cuda-mps-control
kill $packer
pack
echo "total $((SECONDS-start)) s"
# run as: bash gpu-bin/x2-a.sh
