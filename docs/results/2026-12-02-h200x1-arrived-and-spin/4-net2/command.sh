#!/usr/bin/env bash
# Device call 4 (session 30), run from the repository root as the device command: oxccl's
# own GPU path across two posed hosts (gpu-net-bench.sh), gpu-bin = 0fc76e1.
start=$SECONDS; mkdir -p $OUT/parts; OUT=$OUT/parts GPU_SESSION_TAG=net2 NET_RANKS=2 NET_TESTS="all_reduce all_gather reduce_scatter" NET_LIBS="oxccl nccl nccl-best" NET_MAX=32M NET_CYCLES=3 NET_TIMEOUT=60 timeout 280 bash gpu-bin/gpu-session.sh net 2>&1 | tail -5; tar cf $OUT/all.tar -C $OUT parts; echo "total $((SECONDS-start)) s"
