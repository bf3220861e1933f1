#!/usr/bin/env bash
# Device call 3 (session 28): gpu-bin = 1866174. Part small: NCCL over the plugin against
# its sockets at mpirun's default binding, small calls (8 B-32 KiB, 200 iterations), two
# rounds. Part a2a-r8 / a2a-r1: alltoall and all_gather from 1 MiB with `--bind-to none`,
# the plugin's comms receiver-driven (maxRecvs 8, the default) or eager
# (OXCCL_NETPLUGIN_MAX_RECVS=1), two rounds each. Part tests: every `across_hosts::` GPU
# test (oxccl's own network kernels, PXN relays over receiver-driven comms) in the time
# left. Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
# The first netplugin stage on a fresh machine also builds nccl-tests (~36 s).
OUT=$parts GPU_SESSION_TAG=small NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="broadcast reduce all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 150 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -6
pack small
for m in 8 1; do
  OUT=$parts GPU_SESSION_TAG=a2a-r$m NETPLUGIN_MPIRUN_ARGS="--bind-to none" OXCCL_NETPLUGIN_MAX_RECVS=$m NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="alltoall all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 80 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -4
  pack a2a-r$m
done
export OXCCL_TEST_ACROSS_RANKS=2
left=$((585 - (SECONDS-start)))
GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left-5)) GPU_TEST_FILTERS="across_hosts::" timeout $left bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
pack tests
echo "total $((SECONDS-start)) s"
