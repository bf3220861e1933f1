#!/usr/bin/env bash
# Device call 4 (session 24): gpu-bin = the executor's LL entry and the slot by mask (as
# committed); gpu-bin/lib-base = eed5d48. Three untraced A/B rounds, then NCCL over the
# plugin against NCCL's sockets from 1 MiB (issue 21).
cd "$(dirname "$0")/.."
start=$SECONDS
for r in 1 2 3; do
  GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-base" timeout 120 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
  echo "ab$r done at $((SECONDS-start)) s"
done
GPU_SESSION_TAG=plugbig NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 220 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -15
echo "plugbig done at $((SECONDS-start)) s"
