#!/usr/bin/env bash
# Device call 2 (session 30): gpu-bin = 0fc76e1 (branch notices-by-arrived-bytes, plugin
# "arr"); gpu-bin/netplugin-main = main's plugin (df754cb). Part tests: every
# `across_hosts::` GPU test on the branch's binaries. Part def: NCCL over each plugin
# against its sockets at mpirun's default binding, all_reduce, all_gather and
# reduce_scatter 1-16 MiB (factor 2), builds in turn, rounds 5 on while time is left.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { case $1 in arr) echo $PWD/gpu-bin/netplugin;; main) echo $PWD/gpu-bin/netplugin-main;; esac; }
OXCCL_TEST_ACROSS_RANKS=2 GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=380 GPU_TEST_FILTERS="across_hosts::" timeout 390 bash gpu-bin/gpu-session.sh tests 2>&1 | tail -2
pack tests
for r in 5 6 7 8; do for v in main arr; do
  ((SECONDS - start > 560)) && break 2
  OUT=$parts GPU_SESSION_TAG=def-$v-$r NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $((595 - (SECONDS-start))) bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack def-$v-$r
done; done
echo "total $((SECONDS-start)) s"
