#!/usr/bin/env bash
# Device call 3 (session 27): gpu-bin = 8dbedb6, netplugin-old = efb4aca (as calls 1-2).
# As call 2, with `mpirun --bind-to none` (NETPLUGIN_MPIRUN_ARGS): each rank's threads free
# to use the machine's 16 cores, not one core for NCCL's proxy thread and the test's own
# thread together (the default binding, whose small-call times are bimodal for both nets).
# Small calls over both plugins in turn, two rounds each; then the new plugin from 1 MiB,
# four tests, two rounds.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
export NETPLUGIN_MPIRUN_ARGS="--bind-to none"
for r in 1 2; do for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=small-$v-$r NETPLUGIN_DIR=$d NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="broadcast reduce all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 60 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "exit [1-9]|wrong [1-9]"
  pack small-$v-$r
done; done
OUT=$parts GPU_SESSION_TAG=big-new NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 120 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -6
pack big-new
echo "total $((SECONDS-start)) s"
