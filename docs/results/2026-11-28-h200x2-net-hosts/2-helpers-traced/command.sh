# Call 4 (nvidia-h200-x2): the slow, erratic mid sizes of call 3 (2 ranks a GPU each as 2
# hosts; 4 ranks as 2 hosts of 2 GPUs): all_gather and all_reduce 512 KiB..32 MiB, oxccl
# traced, oxccl without the socket net's helper threads (NCCL_SOCKET_NTHREADS=0), oxccl with
# 8 proxy threads, and NCCL at its defaults.
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 32 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/x2-2.tgz --exclude=traces -C $r . ; }
export NET_ENV_nohelp="NCCL_SOCKET_NTHREADS=0"
for layout in "2 1" "4 2"; do set -- $layout
  OUT=$r/l$1x$2 NET_PER_HOST=$2 NET_RANKS=$1 NET_TESTS="all_gather all_reduce" NET_MAX=32M NET_ARGS="-b 512K" NET_TRACE=1 NET_LIBS="oxccl oxccl-env-nohelp oxccl-proxy8 nccl" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "layout $1x$2: $? at $((SECONDS-start)) s"; pack
done
for f in $r/l*/net-*.txt; do case $f in *trace*) continue;; esac; printf "%s: " $(basename $f .txt); grep -E "^ +[0-9]+ " $f | awk '{printf "%s:%s/%s ", $1/1024, $6, $10}'; echo; done
echo quit | nvidia-cuda-mps-control
pack
echo "total $((SECONDS-start)) s"
