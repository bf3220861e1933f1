#!/usr/bin/env bash
# Device call 3 (session 26): gpu-bin = efb4aca. Issue 20's 4-rank table again, five
# cycles a size and no runnable-thread sampler; 2 ranks' small all_gather and
# reduce_scatter, 12 cycles of 50 calls; then every across_hosts:: GPU test in the time left.
# Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
OUT=$parts GPU_SESSION_TAG=table4 NET_CYCLES=5 NET_RANKS=4 NET_MAX=32M NET_TIMEOUT=60 timeout 220 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]|wrong [1-9]|exit [1-9]"
pack table4
OUT=$parts GPU_SESSION_TAG=small2 NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter" NET_LIBS="oxccl nccl nccl-best" timeout 60 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]"
pack small2
export OXCCL_TEST_ACROSS_RANKS=2
left=$((588 - (SECONDS-start)))
GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left-5)) GPU_TEST_FILTERS="across_hosts::" timeout $left bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
pack tests
echo "total $((SECONDS-start)) s"
