#!/usr/bin/env bash
# Device call 5 (session 27): gpu-bin = 8dbedb6. NCCL over the plugin against its sockets
# at mpirun's default binding, all_reduce, reduce_scatter and alltoall from 1 MiB, four
# rounds (call 4 ran all_gather in six). Everything under $OUT/parts, packed into
# $OUT/all.tar.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
OUT=$parts GPU_SESSION_TAG=big4 NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="reduce_scatter all_reduce alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=4 timeout 200 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -5
tar cf $OUT/all.tar -C $OUT parts
echo "total $((SECONDS-start)) s"
