#!/usr/bin/env bash
# Device call 2 (session 24): gpu-bin = eed5d48 + the slot by mask (no 64-bit division in
# the window) + the executor's LL entry ox_run_ll; temporary switches: OX_EXP_STAMPS (EXP
# stamps), OX_EXP_DIVIDE (the slot by division again), EXP_NO_LL_ENTRY=1 (ox_run for every
# plan). gpu-bin/lib-base = eed5d48 (+ inert switches).
cd "$(dirname "$0")/.."
export NET_TIMEOUT=60
mkdir -p /tmp/tl
start=$SECONDS
for v in "new:EXP_OX_DEFINES=-DOX_EXP_STAMPS" "mask:EXP_OX_DEFINES=-DOX_EXP_STAMPS EXP_NO_LL_ENTRY=1" "div:EXP_OX_DEFINES=-DOX_EXP_STAMPS%-DOX_EXP_DIVIDE EXP_NO_LL_ENTRY=1"; do
  name=${v%%:*}; envs=${v#*:}
  for t in all_gather reduce_scatter; do
    export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$name-$t-tl $envs"
    GPU_SESSION_TAG=hops-$name-$t NET_TRACE=1 NET_ITERS=100 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 60 bash gpu-bin/gpu-session.sh net > /dev/null 2>&1
    echo "hops $name $t done at $((SECONDS-start)) s"
  done
done
tar czf $OUT/tl.tgz -C /tmp tl
export NET_ENV_full="EXP_NO_LL_ENTRY=1"
for r in 1 2; do
  GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-env-full oxccl-lib-lib-base" timeout 170 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
  echo "ab$r done at $((SECONDS-start)) s"
done
GPU_SESSION_TAG=ab4 NET_CYCLES=8 NET_ITERS=50 NET_RANKS=4 NET_MAX=8K NET_TESTS="all_gather broadcast" NET_LIBS="nccl oxccl oxccl-lib-lib-base" timeout 100 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "exit|x[0-9]"
echo "ab4 done at $((SECONDS-start)) s"
