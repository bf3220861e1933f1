#!/usr/bin/env bash
# Device call 5 (session 22): gpu-bin/lib = e1b677e + inert temporary switches
# (EXP_PROXY_SPIN=1; EXP_OX_DEFINES=-DOX_EXP_FASTWIN, right for 2 ranks' one-hop calls;
# ../3-prologue-cycles/switches.patch). Each run: 12 cycles (-N 12) of 50 iterations per
# size; compare medians over cycles (scripts/net-compare.py, written after this call).
cd "$(dirname "$0")/.."
export NET_TIMEOUT=90 NET_ITERS=50 NET_RANKS=2 NET_ARGS="-N 12" NET_MAX=2K
for r in 1 2; do
  export NET_ENV_b$r="EXP_NONE=$r" NET_ENV_s$r="EXP_PROXY_SPIN=1" NET_ENV_f$r="EXP_OX_DEFINES=-DOX_EXP_FASTWIN" NET_ENV_sf$r="EXP_PROXY_SPIN=1 EXP_OX_DEFINES=-DOX_EXP_FASTWIN" NET_ENV_n$r="EXP_NONE=$r"
done
GPU_SESSION_TAG=ab NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="oxccl-env-b1 oxccl-env-s1 oxccl-env-f1 oxccl-env-sf1 nccl-env-n1 oxccl-env-b2 oxccl-env-s2 oxccl-env-f2 oxccl-env-sf2 nccl-env-n2" timeout 420 bash gpu-bin/gpu-session.sh net
