# Call 2 (nvidia-h200-x4, binaries of 4c0f013): OXCCL_GPU_P2P_RING_CHANNELS on and off
# (p2p tests with it on; oxccl-perf and nccl-tests -g 4 sendrecv and alltoall, 16 MiB-1 GiB,
# NCCL in the same run), then first-row stalls at 512 KiB-2 MiB with the throttle notes.
set -u
source gpu-bin/gpu-env.sh
start=$SECONDS
r=$OUT/r; mkdir -p $r/perf $r/nt-off $r/nt-on $r/rows
nt=.nccl-tests; export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
( make -C $nt MPI=0 CUDA_HOME=$CUDA_HOME NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/$nt/build -j 32 > $r/nt-build.txt 2>&1; echo "nccl-tests build: $? ($((SECONDS-start)) s)" ) &
OXCCL_GPU_P2P_RING_CHANNELS=1 OUT=$r/p2p-ring GPU_TESTS=gpu_collectives GPU_TEST_FILTERS="p2p::" GPU_TEST_TIMEOUT=150 bash gpu-bin/gpu-run.sh
grep -h "^test \|ok in\|FAILED\|panicked\|test result" $r/p2p-ring/gpu_collectives.log | cut -c1-160
wait
echo "p2p tests done $((SECONDS-start)) s"
for round in 1 2; do for v in off on; do for c in sendrecv alltoall; do
  base=; [[ $round == 1 && $v == off ]] && base="--baseline nccl"
  ring=; [[ $v == on ]] && ring=OXCCL_GPU_P2P_RING_CHANNELS=1
  env $ring timeout 90 gpu-bin/oxccl-perf $c -b 16M -e 1G -f 4 -n 20 -w 5 -c 1 --gpus 4 $base > $r/perf/$c-$v$round.txt 2>&1
  echo "perf $c $v $round: $? $(awk '$1 ~ /^[0-9]+$/ {printf "%s:%s/%s ", $1, $6, $10}' $r/perf/$c-$v$round.txt)"
done; done; done
echo "perf done $((SECONDS-start)) s"
NCCL_TESTS="sendrecv alltoall" NCCL_TESTS_MIN=16M NCCL_TESTS_MAX=1G OUT=$r/nt-off timeout 150 bash gpu-bin/gpu-nccl-tests.sh $nt/build
OXCCL_GPU_P2P_RING_CHANNELS=1 NCCL_TESTS="sendrecv alltoall" NCCL_TESTS_MIN=16M NCCL_TESTS_MAX=1G OUT=$r/nt-on timeout 150 bash gpu-bin/gpu-nccl-tests.sh $nt/build
for f in $r/nt-off/nccltests-*.txt $r/nt-on/nccltests-*-oxccl.txt; do echo "== $f"; grep -E "^ +[0-9]+ " $f | awk '{print $1, $6, $8, $10, $12}'; done
echo "nccl-tests done $((SECONDS-start)) s"
for round in 1 2; do for c in alltoall sendrecv gather scatter; do
  timeout 40 gpu-bin/oxccl-perf $c -b 512K -e 2M -f 2 -n 30 -w 5 -c 1 --gpus 4 > $r/rows/$c-$round.txt 2>&1
  echo "rows $c $round: $? $(awk '$1 ~ /^[0-9]+$/ {printf "%s:%s/%s ", $1, $6, $10}' $r/rows/$c-$round.txt) $(grep -ci "throttl\|enqueue" $r/rows/$c-$round.txt) notes"
done; done
echo "total $((SECONDS-start)) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
