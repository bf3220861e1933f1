#!/usr/bin/env bash
# Device call 5 (session 24): gpu-bin = 79b9a4c + the LL entry's plan in its parameters
# (ox_run_ll reads its steps and connections from an image passed by value);
# gpu-bin/lib-prev = 79b9a4c, gpu-bin/lib-base = eed5d48. Traced hops, untraced A/B, tests.
cd "$(dirname "$0")/.."
export NET_TIMEOUT=60
mkdir -p /tmp/tl
start=$SECONDS
for t in all_gather reduce_scatter; do
  export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/img-$t-tl"
  GPU_SESSION_TAG=hops-$t NET_TRACE=1 NET_ITERS=100 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 70 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit"
  echo "hops $t done at $((SECONDS-start)) s"
done
for r in 1 2; do
  GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-prev oxccl-lib-lib-base" timeout 100 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
  echo "ab$r done at $((SECONDS-start)) s"
done
GPU_SESSION_TAG=ab4 NET_CYCLES=8 NET_ITERS=50 NET_RANKS=4 NET_MAX=8K NET_TESTS="broadcast all_gather" NET_LIBS="nccl oxccl oxccl-lib-lib-prev" timeout 80 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
echo "ab4 done at $((SECONDS-start)) s"
left=$((575 - (SECONDS - start)))
export OXCCL_TEST_ACROSS_RANKS=2
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left - 10)) GPU_TEST_FILTERS="across_hosts::small_calls one_host::the_executor_over_ll across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network" timeout $left bash gpu-bin/gpu-session.sh tests
echo "tests done at $((SECONDS-start)) s"
mkdir -p /tmp/pack && cp -r /tmp/tl /tmp/pack/ && tar czf $OUT/tl.tgz -C /tmp/pack tl
