#!/usr/bin/env bash
# Device call 1 (session 24): gpu-bin = eed5d48 + temporary switches: OX_EXP_STAMPS (stamps
# after the first window's loads and after the window, as "EXP"), OX_EXP_TWICE (the first
# window worked out twice in one launch), OX_EXP_LLONLY (ox_run without the Simple moves).
cd "$(dirname "$0")/.."
export NET_TIMEOUT=60
mkdir -p /tmp/tl
start=$SECONDS
for v in "stamps:-DOX_EXP_STAMPS" "twice:-DOX_EXP_STAMPS%-DOX_EXP_TWICE" "llonly:-DOX_EXP_STAMPS%-DOX_EXP_LLONLY"; do
  name=${v%%:*}; defs=${v#*:}
  for t in all_gather reduce_scatter; do
    [[ $name == twice && $t == reduce_scatter ]] && continue
    export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/$name-$t-tl EXP_OX_DEFINES=$defs"
    GPU_SESSION_TAG=hops-$name-$t NET_TRACE=1 NET_ITERS=100 NET_RANKS=2 NET_TESTS="$t" NET_MAX=128 NET_LIBS="oxccl-env-tl" timeout 60 bash gpu-bin/gpu-session.sh net
    echo "hops $name $t done at $((SECONDS-start)) s"
  done
done
tar czf $OUT/tl.tgz -C /tmp tl
export NET_ENV_ll="EXP_OX_DEFINES=-DOX_EXP_LLONLY" NET_ENV_x="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=1K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-env-ll nccl-env-x oxccl-env-x" timeout 200 bash gpu-bin/gpu-session.sh net
echo "ab done at $((SECONDS-start)) s"
