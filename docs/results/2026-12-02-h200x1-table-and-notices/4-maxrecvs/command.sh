#!/usr/bin/env bash
# Device call 4 (session 26): gpu-bin = efb4aca. NCCL over the plugin with its comms
# receiver-driven (maxRecvs 8, the default) and eager (OXCCL_NETPLUGIN_MAX_RECVS=1), in
# turn: all_gather and all_reduce from 1 MiB, three rounds; broadcast at 8 B-32 KiB, two.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for m in 8 1; do
  OUT=$parts GPU_SESSION_TAG=big-r$m OXCCL_NETPLUGIN_MAX_RECVS=$m NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_gather all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=3 timeout 90 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -4
  pack big-r$m
done
for m in 8 1; do
  OUT=$parts GPU_SESSION_TAG=small-r$m OXCCL_NETPLUGIN_MAX_RECVS=$m NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="broadcast" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 40 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -2
  pack small-r$m
done
echo "total $((SECONDS-start)) s"
