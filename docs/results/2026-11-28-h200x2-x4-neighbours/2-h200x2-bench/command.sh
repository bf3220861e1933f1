# Call 2 (nvidia-h200-x2, binaries of HEAD): oxccl-perf's exchange collectives with
# OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS 0 and 128 (two rounds, NCCL in the first); nccl-tests
# (built in call 1) every test, -g 2 and mpirun -np 2, oxccl against NCCL; the exchange tests
# again with 128; PyTorch's collectives through oxccl.
set -u
source gpu-bin/gpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
r=$OUT/r; mkdir -p $r
nt=.nccl-tests
nvidia-smi -L
for round in 1 2; do for nb in 0 128; do for c in sendrecv gather scatter alltoall; do
  base=; [[ $round == 1 && $nb == 0 ]] && base="--baseline nccl"
  OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=$nb timeout 90 gpu-bin/oxccl-perf $c -b 16M -e 1G -f 2 -n 20 -w 5 -c 1 --gpus 2 $base > $r/perf-$c-nb$nb-$round.txt 2>&1
  echo "$c nb=$nb r$round exit $? $(grep -E '^ +[0-9]+ ' $r/perf-$c-nb$nb-$round.txt | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $14}')"
done; done; done
echo "perf $((SECONDS-start)) s"
OUT=$r/nt GPU_BENCH_GPUS=2 bash gpu-bin/gpu-nccl-tests.sh $PWD/$nt/build > /dev/null
OUT=$r/nt NCCL_TESTS_MPI=1 GPU_BENCH_GPUS=2 bash gpu-bin/gpu-nccl-tests.sh $PWD/$nt/build-mpi > /dev/null
cat $r/nt/summary.txt | tr '\n' ';'; echo
echo "nccl-tests $((SECONDS-start)) s"
OUT=$r/nt-nb128 OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=128 NCCL_TESTS="sendrecv alltoall gather scatter" NCCL_TESTS_MAX=1G GPU_BENCH_GPUS=2 bash gpu-bin/gpu-nccl-tests.sh $PWD/$nt/build > /dev/null
cat $r/nt-nb128/summary.txt | tr '\n' ';'; echo
echo "nccl-tests nb128 $((SECONDS-start)) s"
LD_PRELOAD=$PWD/gpu-bin/lib/libnccl.so.2 timeout 150 python3 examples/pytorch/check_collectives.py > $r/pytorch-oxccl.txt 2>&1; echo "pytorch exit $?"; tail -4 $r/pytorch-oxccl.txt
echo "total $((SECONDS-start)) s"
tar czf $OUT/x2-2.tgz -C $r .
