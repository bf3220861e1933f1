#!/usr/bin/env bash
# Device call 2 (session 26): gpu-bin = efb4aca (a receiver-driven comm's notices held back
# and written four at a time); gpu-bin/netplugin-old and transports-tests-old = 093360e.
# socket_latency both builds; 4 ranks' reduce_scatter (and all_gather beside it) by
# algorithm and channels, with the TUNING lines; NCCL over both plugins, from 1 MiB and at
# 8 B-32 KiB. Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts/lat
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for r in 1 2; do for v in old new; do
  b=gpu-bin/transports-tests; [[ $v == old ]] && b=gpu-bin/transports-tests-old
  echo "== $v round $r" >> $parts/lat/socket_latency.txt
  timeout 60 $b socket_latency --ignored --nocapture 2>&1 | grep "one way" >> $parts/lat/socket_latency.txt
done; done
pack lat
export NET_ENV_ch16="OXCCL_GPU_NET_CHANNELS=16" NET_ENV_tun="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING"
OUT=$parts GPU_SESSION_TAG=rs4 NET_CYCLES=5 NET_RANKS=4 NET_ARGS="-b 512K" NET_MAX=32M NET_TIMEOUT=60 NET_TESTS="reduce_scatter all_gather" NET_LIBS="nccl oxccl oxccl-algo-ring oxccl-env-ch16" timeout 150 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]|wrong [1-9]|exit [1-9]"
pack rs4
OUT=$parts GPU_SESSION_TAG=tun NET_RANKS="2 4" NET_MAX=32M NET_TIMEOUT=40 NET_TESTS="reduce_scatter all_gather all_reduce" NET_LIBS="oxccl-env-tun" timeout 70 bash gpu-bin/gpu-session.sh net > /dev/null 2>&1
pack tun
for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=plugbig-$v NETPLUGIN_DIR=$d NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 80 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -6
  pack plugbig-$v
done
for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=plugsmall-$v NETPLUGIN_DIR=$d NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="all_reduce all_gather broadcast" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 60 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -5
  pack plugsmall-$v
done
echo "total $((SECONDS-start)) s"
