#!/usr/bin/env bash
# Device call 3 (session 22): gpu-bin/lib = e1b677e + inert temporary switches (switches.patch):
# EXP_OX_DEFINES (extra NVRTC defines): OX_EXP_PROLOGUE (stamps inside the prologue),
# OX_EXP_REPS=2 (the window's arithmetic twice, stamped each time: warm vs cold code),
# OX_LL_UNROLL=1 / OX_UNROLL=1 (less code); EXP_PROXY_SPIN=1 (proxy polling spins).
cd "$(dirname "$0")/.."
mkdir -p /tmp/tl
export NET_TIMEOUT=60 NET_ITERS=200 NET_RANKS=2
export NET_ENV_tlp="OXCCL_KERNEL_TRACE=/tmp/tl/p EXP_OX_DEFINES=-DOX_EXP_PROLOGUE"
export NET_ENV_tlr="OXCCL_KERNEL_TRACE=/tmp/tl/r EXP_OX_DEFINES=-DOX_EXP_PROLOGUE%-DOX_EXP_REPS=2"
export NET_ENV_tlu="OXCCL_KERNEL_TRACE=/tmp/tl/u EXP_OX_DEFINES=-DOX_EXP_PROLOGUE%-DOX_LL_UNROLL=1%-DOX_UNROLL=1"
GPU_SESSION_TAG=tl NET_TESTS="all_gather" NET_MAX=128 NET_LIBS="oxccl-env-tlp oxccl-env-tlr oxccl-env-tlu" timeout 100 bash gpu-bin/gpu-session.sh net
tar czf $OUT/tl.tgz -C /tmp tl
export NET_ENV_u1="EXP_OX_DEFINES=-DOX_LL_UNROLL=1%-DOX_UNROLL=1" NET_ENV_u2="EXP_OX_DEFINES=-DOX_LL_UNROLL=1%-DOX_UNROLL=1" NET_ENV_s1="EXP_PROXY_SPIN=1" NET_ENV_s2="EXP_PROXY_SPIN=1" NET_ENV_b2="EXP_NONE=1" NET_ENV_n2="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_TESTS="all_gather reduce_scatter" NET_MAX=2K NET_LIBS="oxccl oxccl-env-u1 oxccl-env-s1 nccl oxccl-env-b2 oxccl-env-u2 oxccl-env-s2 nccl-env-n2" timeout 200 bash gpu-bin/gpu-session.sh net
