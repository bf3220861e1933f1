#!/usr/bin/env bash
# Device call 2 (session 28): gpu-bin = 1866174 (base); gpu-bin/netplugin-c = base where a
# lone message's piece too long for the caller (over 128 KiB) has its helper thread woken
# at once while the caller moves its first 128 KiB; gpu-bin/netplugin-b150 = base with
# helper threads looking for work 150 µs (not 50) before they sleep. NCCL over each plugin
# against its sockets with `mpirun --bind-to none`, four tests 256 KiB-16 MiB, builds in
# turn, three rounds. Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
limit=150
for r in 1 2 3; do for v in base c b150; do
  d=$PWD/gpu-bin/netplugin; [[ $v != base ]] && d=$PWD/gpu-bin/netplugin-$v
  OUT=$parts GPU_SESSION_TAG=bn-$v-$r NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$d NCCL_TESTS_MIN=256K NCCL_TESTS_MAX=16M NETPLUGIN_TESTS="all_reduce all_gather alltoall reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(alltoall|all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack bn-$v-$r; limit=60
done; done
echo "total $((SECONDS-start)) s"
