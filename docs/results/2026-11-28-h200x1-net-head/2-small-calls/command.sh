# Call 2 (nvidia-h200): small calls of 2 ranks as hosts, many iterations, three rounds
# alternating oxccl at HEAD, oxccl at e7f3013 (gpu-bin/lib-old) and NCCL at its defaults;
# then 4 ranks' all_reduce 8 B..32 MiB twice with proxy traces (a first-row stall seen in call 1).
set -u
start=$SECONDS
r=$OUT/r; mkdir -p $r
nvidia-smi -L > $r/machine.txt; nproc >> $r/machine.txt
nt=$PWD/.nccl-tests
make -C $nt MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$nt/build-mpi -j 16 > $r/nccl-tests-build.txt 2>&1; echo "build $? at $((SECONDS-start)) s"
pack() { tar czf $OUT/h1-2.tgz -C $r . ; }
for round in 1 2 3; do
  OUT=$r/small-$round NET_RANKS=2 NET_TESTS="all_gather reduce_scatter all_reduce" NET_MAX=8K NET_ITERS=300 NET_LIBS="oxccl oxccl-lib-lib-old nccl" bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "small round $round: $? at $((SECONDS-start)) s"
done
pack
for round in 1 2; do
  OUT=$r/stall-$round NET_RANKS=4 NET_TESTS="all_reduce sendrecv" NET_MAX=32M NET_LIBS="oxccl" NET_TRACE=1 bash gpu-bin/gpu-net-bench.sh $nt/build-mpi > /dev/null 2>&1
  echo "stall round $round: $? at $((SECONDS-start)) s"
  grep -E "^ +8 " $r/stall-$round/net-4r-*-oxccl.txt
done
pack
for round in 1 2 3; do for t in all_gather reduce_scatter all_reduce; do for lib in oxccl oxccl-lib-lib-old nccl; do
  printf "%s %-15s %-18s " $round $t $lib; grep -E "^ +[0-9]+ " $r/small-$round/net-2r-$t-$lib.txt | awk '$1>0{printf "%s:%s/%s ", $1,$6,$10}'; echo
done; done; done
echo quit | nvidia-cuda-mps-control
pack
echo "total $((SECONDS-start)) s"
