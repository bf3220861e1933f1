# The socket net's helper threads on the GPU network path: oxccl at its defaults (1 helper
# thread x 1 data socket per connection on hosts of 4 cores or more) against oxccl with
# NCCL_SOCKET_NTHREADS=0 (no helpers: every byte over the control connection, moved by the
# proxy thread, as NCCL's socket transport at its defaults), and NCCL at its defaults; six
# tests, 512 KiB..32 MiB, ranks posing as hosts. LAYOUTS: "ranks per_host" pairs.
set -u
start=$SECONDS
tag=${TAG:-ab}
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 32 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/$tag.tgz -C $r . ; }
export NET_ENV_nohelp="NCCL_SOCKET_NTHREADS=0" NET_ENV_s44="NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4"
for layout in $LAYOUTS; do
  n=${layout%x*}; h=${layout#*x}
  OUT=$r/l$layout NET_PER_HOST=$h NET_RANKS=$n NET_MAX=32M NET_ARGS="-b 512K" NET_TIMEOUT=60 NET_LIBS="${LIBS:-oxccl oxccl-env-nohelp nccl}" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "layout $layout: $? at $((SECONDS-start)) s"; rm -f $r/l$layout/rank.sh; pack
done
grep -v "wrong 0\|lines\|loopback\|MPS" $r/l*/summary.txt
for f in $r/l*/net-*.txt; do printf "%s: " $(basename $f .txt); grep -E "^ +[0-9]+ " $f | awk '{printf "%s:%s/%s ", $1/1024, $6, $10}'; echo; done
echo quit | nvidia-cuda-mps-control
pack
echo "total $((SECONDS-start)) s"
# The call (from the repository root, gpu-bin/ and .nccl-tests/ carried):
# TAG=x2-4 LAYOUTS="2x1 4x2" LIBS="oxccl-env-s44 oxccl-env-nohelp nccl-best" timeout 190 bash gpu-bin/ab-helpers.sh
