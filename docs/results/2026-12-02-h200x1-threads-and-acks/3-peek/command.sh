#!/usr/bin/env bash
# Device call 3 (session 25): gpu-bin = 61998b2 (the receiver peeks small messages, their
# ACK after the caller took them; a channel's send and receive links on different proxy
# threads); gpu-bin/lib-deal = 31b1115 (the threads alone); gpu-bin/lib-base = 0c1df28;
# gpu-bin/netplugin-base = the plugin of 0c1df28. Everything under $OUT/parts, packed into
# $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts/lat
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
timeout 60 gpu-bin/transports-tests socket_latency --ignored --nocapture > $parts/lat/socket_latency.txt 2>&1
pack lat
for r in 1 2 3; do
  OUT=$parts GPU_SESSION_TAG=ab$r NET_CYCLES=12 NET_ITERS=50 NET_RANKS=2 NET_MAX=32K NET_TESTS="all_gather reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-deal oxccl-lib-lib-base" timeout 100 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]"
  pack ab$r
done
for r in 1 2; do
  OUT=$parts GPU_SESSION_TAG=ab4r$r NET_CYCLES=8 NET_ITERS=50 NET_RANKS=4 NET_MAX=32K NET_TESTS="all_gather broadcast reduce_scatter all_reduce" NET_LIBS="nccl oxccl oxccl-lib-lib-base" timeout 100 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]"
  pack ab4r$r
done
OUT=$parts GPU_SESSION_TAG=big2 NET_ARGS="-b 512K" NET_MAX=32M NET_RANKS=2 NET_LIBS="nccl oxccl oxccl-lib-lib-base" timeout 150 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "from 1 MiB"
pack big2
OUT=$parts GPU_SESSION_TAG=plugbig NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout $((570 - (SECONDS-start))) bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -8
pack plugbig
