#!/usr/bin/env bash
# Device call 5 (session 25): gpu-bin/lib = 585f61b (after a peek the next read takes the
# peeked bytes out again with what follows), gpu-bin/gpu_collectives of the same code;
# lib-peek1 = 61998b2 (a peek discarded by MSG_TRUNC first); lib-deal = 31b1115.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for r in 1 2; do
  OUT=$parts GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-peek1 oxccl-lib-lib-deal" timeout 60 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]"
  pack ab$r
done
OUT=$parts GPU_SESSION_TAG=ab4 NET_CYCLES=8 NET_ITERS=50 NET_RANKS=4 NET_MAX=32K NET_TESTS="all_gather broadcast reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-peek1" timeout 60 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]"
pack ab4
export OXCCL_TEST_ACROSS_RANKS=2
left=$((215 - (SECONDS-start)))
GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left-5)) GPU_TEST_FILTERS="across_hosts::small_calls across_hosts::send_recv_groups_across_hosts" timeout $left bash gpu-bin/gpu-session.sh tests 2>&1 | tail -2
pack tests
