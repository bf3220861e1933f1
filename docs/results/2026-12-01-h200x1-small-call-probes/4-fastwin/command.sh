#!/usr/bin/env bash
# Device call 4 (session 22): gpu-bin/lib = e1b677e + inert temporary switches
# (../3-prologue-cycles/switches.patch): EXP_OX_DEFINES: OX_EXP_PROLOGUE (prologue stamps,
# clock64 cycles of the window's arithmetic, the SM), OX_EXP_FASTWIN (the window's
# arithmetic without the loop over earlier steps, the 64-bit modulo or the flag's modulo:
# right only where a lane's window has one step per connection end, as 2 ranks' small
# one-hop calls), OX_EXP_REPS=2.
cd "$(dirname "$0")/.."
mkdir -p /tmp/tl
export NET_TIMEOUT=60 NET_ITERS=200 NET_RANKS=2
export NET_ENV_tlp="OXCCL_KERNEL_TRACE=/tmp/tl/p EXP_OX_DEFINES=-DOX_EXP_PROLOGUE%-DOX_EXP_REPS=2"
export NET_ENV_tlf="OXCCL_KERNEL_TRACE=/tmp/tl/f EXP_OX_DEFINES=-DOX_EXP_PROLOGUE%-DOX_EXP_REPS=2%-DOX_EXP_FASTWIN"
GPU_SESSION_TAG=tl NET_TESTS="all_gather" NET_MAX=128 NET_LIBS="oxccl-env-tlp oxccl-env-tlf" timeout 100 bash gpu-bin/gpu-session.sh net
tar czf $OUT/tl.tgz -C /tmp tl
export NET_ENV_f1="EXP_OX_DEFINES=-DOX_EXP_FASTWIN" NET_ENV_f2="EXP_OX_DEFINES=-DOX_EXP_FASTWIN" NET_ENV_b2="EXP_NONE=1" NET_ENV_n2="EXP_NONE=1" NET_ENV_f3="EXP_OX_DEFINES=-DOX_EXP_FASTWIN" NET_ENV_b3="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_TESTS="all_gather reduce_scatter all_reduce" NET_MAX=2K NET_LIBS="oxccl oxccl-env-f1 nccl oxccl-env-b2 oxccl-env-f2 nccl-env-n2 oxccl-env-f3 oxccl-env-b3" timeout 240 bash gpu-bin/gpu-session.sh net
