#!/usr/bin/env bash
# Device call 4 (session 23): gpu-bin = 8f-ish HEAD + the window by warp 0 + a plan's
# connection table loaded beside its steps (two dependent loads instead of four);
# gpu-bin/lib-base = 9c8063f, gpu-bin/lib-window = the window by warp 0 alone.
cd "$(dirname "$0")/.."
export NET_TIMEOUT=60
for t in all_gather reduce_scatter; do
  export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$t-tl"
  mkdir -p /tmp/tl
  GPU_SESSION_TAG=hops-$t NET_TRACE=1 NET_ITERS=200 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 70 bash gpu-bin/gpu-session.sh net
done
tar czf $OUT/tl.tgz -C /tmp tl
export NET_ENV_x="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-base oxccl-lib-lib-window" timeout 150 bash gpu-bin/gpu-session.sh net
GPU_SESSION_TAG=ab2 NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter" NET_LIBS="nccl-env-x oxccl-env-x oxccl-lib-lib-base2" timeout 80 bash gpu-bin/gpu-session.sh net
GPU_SESSION_TAG=tests1 GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=100 GPU_TEST_FILTERS="one_host::every_route one_host::the_executor_over_ll one_host::the_kernel_timeline p2p::send_and_receive" timeout 105 bash gpu-bin/gpu-session.sh tests
GPU_SESSION_TAG=tests2 GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=110 GPU_TEST_FILTERS="across_hosts::ranks_on_separate_hosts_run_kernels_over_the_network" timeout 115 bash gpu-bin/gpu-session.sh tests
