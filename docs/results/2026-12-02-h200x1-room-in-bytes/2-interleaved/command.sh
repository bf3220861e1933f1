#!/usr/bin/env bash
# Device call 2 (session 27): gpu-bin = 8dbedb6, netplugin-old = efb4aca (as call 1).
# Small calls (8 B-32 KiB, 200 a size) over both plugins in turn, three rounds each
# (new, old, new, old, ...; each round NCCL over the plugin and over its sockets), so that
# the machine's drift between parts falls on both; then NCCL over the new plugin from 1 MiB,
# all_gather and reduce_scatter, four rounds.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for r in 1 2 3; do for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=small-$v-$r NETPLUGIN_DIR=$d NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="broadcast reduce all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 60 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "exit [1-9]|wrong [1-9]"
  pack small-$v-$r
done; done
OUT=$parts GPU_SESSION_TAG=big-new NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_gather reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=4 timeout 120 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -4
pack big-new
echo "total $((SECONDS-start)) s"
