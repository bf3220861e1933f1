#!/usr/bin/env bash
# Device call 3 (session 23): gpu-bin = d2ecbc0 + the window by warp 0 + temporary stamps
# after each dependent load of the prologue (OX_EXP_CHAIN, printed as "EXP chain").
cd "$(dirname "$0")/.."
export NET_TIMEOUT=60
for t in all_gather reduce_scatter; do
  export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$t-tl EXP_OX_DEFINES=-DOX_EXP_CHAIN"
  mkdir -p /tmp/tl
  GPU_SESSION_TAG=hops-$t NET_TRACE=1 NET_ITERS=200 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 60 bash gpu-bin/gpu-session.sh net
done
tar czf $OUT/tl.tgz -C /tmp tl
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=330 GPU_TEST_FILTERS="one_host:: p2p:: across_hosts::the_tree" timeout 340 bash gpu-bin/gpu-session.sh tests
