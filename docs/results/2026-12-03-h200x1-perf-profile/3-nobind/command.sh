#!/usr/bin/env bash
# Device call 3 (session 33): every test, NCCL over libnccl-net-oxccl.so
# (main at f4278bb) against NCCL over its own sockets, with mpirun --bind-to none (each rank's threads on any core),
# 1-16 MiB (factor 2), rounds while time is left (nets in alternating order within each
# round; gpu-netplugin.sh), no profiler.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
cp "$0" $parts/command.sh
for r in $(seq 1 30); do
  ((SECONDS - start > ${CALL_SECONDS:-220})) && break
  OUT=$parts GPU_SESSION_TAG=nobind-round-$r NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall broadcast reduce" NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $((590 - (SECONDS-start))) bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^\[default\] .*(geometric|exit [1-9]|wrong [1-9])"
  pack nobind-round-$r
done
pack all
echo "total $((SECONDS-start)) s"
