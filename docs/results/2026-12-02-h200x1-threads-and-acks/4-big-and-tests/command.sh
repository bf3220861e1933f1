#!/usr/bin/env bash
# Device call 4 (session 25): gpu-bin = 61998b2; lib-deal = 31b1115; lib-base = 0c1df28.
# Large sizes again (reduce_scatter was slower in call 3's one round), then the GPU tests
# across posed hosts on this build.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for r in 1 2; do
  OUT=$parts GPU_SESSION_TAG=big$r NET_ARGS="-b 512K" NET_MAX=32M NET_RANKS=2 NET_TESTS="reduce_scatter all_gather all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-deal oxccl-lib-lib-base" timeout 100 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "from 1 MiB"
  pack big$r
done
export OXCCL_TEST_ACROSS_RANKS=2
left=$((585 - (SECONDS-start)))
GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left-5)) GPU_TEST_FILTERS="across_hosts::" timeout $left bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
pack tests
