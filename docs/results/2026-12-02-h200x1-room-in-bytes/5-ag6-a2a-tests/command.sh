#!/usr/bin/env bash
# Device call 4 (session 27): gpu-bin = 8dbedb6. NCCL over the plugin against its sockets:
# all_gather from 1 MiB at mpirun's default binding, six rounds; alltoall from 1 MiB with
# `--bind-to none`, the plugin's comms receiver-driven (maxRecvs 8, the default) and eager
# (OXCCL_NETPLUGIN_MAX_RECVS=1), two rounds each. Then every across_hosts:: GPU test
# (2 ranks for the network kernels' matrix). Everything under $OUT/parts, packed into
# $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
OUT=$parts GPU_SESSION_TAG=ag6 NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=6 timeout 100 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -3
pack ag6
for m in 8 1; do
  OUT=$parts GPU_SESSION_TAG=a2a-r$m NETPLUGIN_MPIRUN_ARGS="--bind-to none" OXCCL_NETPLUGIN_MAX_RECVS=$m NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="alltoall all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=2 timeout 70 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -4
  pack a2a-r$m
done
export OXCCL_TEST_ACROSS_RANKS=2
left=$((585 - (SECONDS-start)))
GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left-5)) GPU_TEST_FILTERS="across_hosts::" timeout $left bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
pack tests
echo "total $((SECONDS-start)) s"
