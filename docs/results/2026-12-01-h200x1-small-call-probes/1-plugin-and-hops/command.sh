#!/usr/bin/env bash
# Device call 1 (session 22): binaries of e1b677e.
cd "$(dirname "$0")/.."
mkdir -p /tmp/tl
export NET_TIMEOUT=60
# 1. NCCL over the plugin at small sizes, then from 1 MiB at defaults.
GPU_SESSION_TAG=plugsmall NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="all_gather reduce_scatter all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 120 bash gpu-bin/gpu-session.sh netplugin
GPU_SESSION_TAG=plugbig NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 200 bash gpu-bin/gpu-session.sh netplugin
# 2. Hops: oxccl's kernel timeline + proxy trace; NCCL's profiler with large API pools.
export NET_ENV_tl="OXCCL_KERNEL_TRACE=/tmp/tl/ox"
export NET_ENV_prof="NCCL_PROFILER_PLUGIN=$PWD/gpu-bin/profiler/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=66 NCCL_PROFILE_DUMP_FILE=/tmp/tl/nccl NCCL_PROFILE_COLL_POOL_SIZE=16384 NCCL_PROFILE_GROUP_POOL_SIZE=16384 NCCL_PROFILE_GROUP_API_POOL_SIZE=16384 NCCL_PROFILE_COLL_API_POOL_SIZE=16384 NCCL_PROFILE_KERNEL_LAUNCH_POOL_SIZE=16384"
GPU_SESSION_TAG=hops NET_TRACE=1 NET_ITERS=200 NET_RANKS=2 NET_TESTS="all_gather reduce_scatter" NET_MAX=128 NET_LIBS="oxccl-env-tl nccl-env-prof nccl oxccl" timeout 150 bash gpu-bin/gpu-session.sh net
tar czf $OUT/tl.tgz -C /tmp tl
python3 scripts/kernel-gaps.py /tmp/tl/* > $OUT/kernel-gaps.txt 2>&1
