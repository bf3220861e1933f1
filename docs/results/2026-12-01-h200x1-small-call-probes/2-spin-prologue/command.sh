#!/usr/bin/env bash
# Device call 2 (session 22): gpu-bin/lib = e1b677e + inert temporary switches
# (EXP_OX_DEFINES=-DOX_EXP_PROLOGUE: stamps inside the kernel's prologue; EXP_PROXY_SPIN=1:
# proxy threads polling a kernel's FIFO spin instead of yielding); ../3-prologue-cycles/switches.patch.
cd "$(dirname "$0")/.."
mkdir -p /tmp/tl
export NET_TIMEOUT=60 NET_ITERS=200 NET_RANKS=2
export NET_ENV_tlp="OXCCL_KERNEL_TRACE=/tmp/tl/p EXP_OX_DEFINES=-DOX_EXP_PROLOGUE" NET_ENV_spin="EXP_PROXY_SPIN=1" NET_ENV_spin2="EXP_PROXY_SPIN=1" NET_ENV_b2="EXP_NONE=1" NET_ENV_n2="EXP_NONE=1"
GPU_SESSION_TAG=ab NET_TRACE=0 NET_TESTS="all_gather reduce_scatter all_reduce" NET_MAX=32K NET_LIBS="oxccl-env-tlp oxccl oxccl-env-spin nccl oxccl-env-b2 oxccl-env-spin2 nccl-env-n2" timeout 240 bash gpu-bin/gpu-session.sh net
tar czf $OUT/tl.tgz -C /tmp tl
# NCCL over the plugin with one receive per irecv (eager comms) at small sizes.
GPU_SESSION_TAG=plug1 OXCCL_NETPLUGIN_MAX_RECVS=1 NCCL_TESTS_MAX=2K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="all_gather reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 100 bash gpu-bin/gpu-session.sh netplugin
