#!/usr/bin/env bash
# Device call 1 (session 27): gpu-bin = 8dbedb6 (a receiver-driven comm's room ahead
# counted in bytes, 8 MiB, and 1024 messages, instead of 8 messages);
# gpu-bin/netplugin-old and transports-tests-old = efb4aca (held notices, room 8 messages).
# NCCL over both plugins at 8 B-32 KiB (broadcast, reduce, all_reduce, all_gather) and from
# 1 MiB; socket_latency of both builds. Everything under $OUT/parts, packed into
# $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts/lat
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=plugsmall-$v NETPLUGIN_DIR=$d NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="broadcast reduce all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 100 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -6
  pack plugsmall-$v
done
for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=plugbig-$v NETPLUGIN_DIR=$d NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 90 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -6
  pack plugbig-$v
done
for r in 1 2; do for v in new old; do
  b=gpu-bin/transports-tests; [[ $v == old ]] && b=gpu-bin/transports-tests-old
  echo "== $v round $r" >> $parts/lat/socket_latency.txt
  timeout 40 $b socket_latency --ignored --nocapture 2>&1 | grep "one way" >> $parts/lat/socket_latency.txt
done; done
pack lat
echo "total $((SECONDS-start)) s"
