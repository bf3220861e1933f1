#!/usr/bin/env bash
# Device call 6 (session 24): call 5 again with the kernel compiling under NVRTC (call 5's
# build used offsetof, which NVRTC lacks: every oxccl run there failed to compile).
# gpu-bin = 79b9a4c + the LL entry's plan in its parameters; lib-prev = 79b9a4c,
# lib-base = eed5d48. Traced hops, the GPU tests of the change, then untraced A/B rounds.
cd "$(dirname "$0")/.."
export NET_TIMEOUT=60
mkdir -p /tmp/tl
start=$SECONDS
for t in all_gather reduce_scatter; do
  export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/img-$t-tl"
  GPU_SESSION_TAG=hops-$t NET_TRACE=1 NET_ITERS=100 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 70 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit"
  echo "hops $t done at $((SECONDS-start)) s"
done
mkdir -p /tmp/pack && cp -r /tmp/tl /tmp/pack/ && tar czf $OUT/tl.tgz -C /tmp/pack tl
export OXCCL_TEST_ACROSS_RANKS=2
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=200 GPU_TEST_FILTERS="across_hosts::small_calls one_host::the_executor_over_ll across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network" timeout 210 bash gpu-bin/gpu-session.sh tests
echo "tests done at $((SECONDS-start)) s"
for r in 1 2; do
  left=$((470 - (SECONDS - start)))
  [[ $left -lt 60 ]] && break
  GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-prev oxccl-lib-lib-base" timeout $left bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
  echo "ab$r done at $((SECONDS-start)) s"
done
