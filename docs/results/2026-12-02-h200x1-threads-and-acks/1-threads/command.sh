#!/usr/bin/env bash
# Device call 1 (session 25): gpu-bin = 0c1df28 + a channel's send and receive links on
# different proxy threads; gpu-bin/lib-base = 0c1df28. Tests of 8035942 left from session
# 24, traced hops of both builds, untraced A/B rounds.
cd "$(dirname "$0")/.."
start=$SECONDS
{ uname -a; nproc; cat /proc/cpuinfo | grep "model name" | head -1; } > $OUT/machine.txt 2>&1
export OXCCL_TEST_ACROSS_RANKS=2
GPU_SESSION_TAG=tests GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=200 GPU_TEST_FILTERS="across_hosts::small_calls one_host::the_executor_over_ll" timeout 210 bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
echo "tests at $((SECONDS-start)) s"
export NET_TIMEOUT=60
mkdir -p /tmp/tl
cp gpu-bin/lib/libnccl.so.2 /tmp/libnccl-new.so.2
for v in new base; do
  [[ $v == base ]] && cp gpu-bin/lib-base/libnccl.so.2 gpu-bin/lib/libnccl.so.2
  for t in all_gather reduce_scatter; do
    export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$v-$t-tl"
    GPU_SESSION_TAG=hops-$v-$t NET_TRACE=1 NET_ITERS=100 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 60 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit"
    echo "hops $v $t done at $((SECONDS-start)) s"
  done
done
cp /tmp/libnccl-new.so.2 gpu-bin/lib/libnccl.so.2
tar czf $OUT/tl.tgz -C /tmp tl
for r in 1 2; do
  GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-base" timeout 120 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
  echo "ab$r done at $((SECONDS-start)) s"
  (( SECONDS - start > 470 )) && break
done
