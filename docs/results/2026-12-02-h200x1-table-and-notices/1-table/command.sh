#!/usr/bin/env bash
# Device call 1 (session 26): gpu-bin = 093360e. Issue 20's benchmark in full (2 and 4
# ranks as hosts, six tests, 8 B..32 MiB, oxccl against NCCL at its defaults and at 4x4,
# three cycles a size), socket_latency, NCCL over the plugin from 1 MiB at the defaults.
# Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts/lat
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
nproc > $parts/lat/machine.txt; nvidia-smi -L >> $parts/lat/machine.txt; uname -a >> $parts/lat/machine.txt
timeout 60 gpu-bin/transports-tests socket_latency --ignored --nocapture > $parts/lat/socket_latency.txt 2>&1
pack lat
for n in 2 4; do
  OUT=$parts GPU_SESSION_TAG=table$n NET_SAMPLE=1 NET_CYCLES=3 NET_RANKS=$n NET_MAX=32M NET_TIMEOUT=60 timeout 190 bash gpu-bin/gpu-session.sh net 2>&1 | grep -E "x[0-9]|wrong [1-9]|exit [1-9]"
  pack table$n
done
OUT=$parts GPU_SESSION_TAG=plug NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout $((580 - (SECONDS-start))) bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -7
pack plug
