#!/usr/bin/env bash
# Device call 2 (session 23): gpu-bin = d2ecbc0 + the window worked out by warp 0 (match_any,
# masks for slots, flags without 64-bit division, the steps' inputs prefetched into L2);
# gpu-bin/lib-base = 9c8063f (+ a switch that does nothing unset).
cd "$(dirname "$0")/.."
export NET_TIMEOUT=90
# 1. Traced hops of the new build (the proxy's wait now ends before the isend).
for t in all_gather reduce_scatter; do
  export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$t-tl"
  mkdir -p /tmp/tl
  GPU_SESSION_TAG=hops-$t NET_TRACE=1 NET_ITERS=200 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 60 bash gpu-bin/gpu-session.sh net
done
tar czf $OUT/tl.tgz -C /tmp tl
# 2. Untraced A/B, 12 cycles, two rounds.
export NET_ENV_x="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-base nccl-env-x oxccl-env-x oxccl-lib-lib-base2" timeout 240 bash gpu-bin/gpu-session.sh net
GPU_SESSION_TAG=ab4 NET_CYCLES=8 NET_ITERS=50 NET_RANKS=4 NET_MAX=8K NET_TESTS="all_gather all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-base" timeout 120 bash gpu-bin/gpu-session.sh net
# 3. Correctness of the kernel change.
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=200 GPU_TEST_FILTERS="one_host:: p2p:: across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network across_hosts::the_tree" timeout 210 bash gpu-bin/gpu-session.sh tests
