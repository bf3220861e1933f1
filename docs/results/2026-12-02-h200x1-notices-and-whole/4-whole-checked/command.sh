#!/usr/bin/env bash
# Device call 4 (session 29): gpu-bin = main with messages of at most 128 KiB whole over
# the control socket (WHOLE_BYTES_MAX; its plugin is "f" of call 3), gpu-bin/netplugin-base
# = the plugin before that change (977e376). Part tests: every `across_hosts::` GPU test.
# Part pytorch: PyTorch's collectives through NCCL over the new plugin and over NCCL's
# sockets. Part bn: NCCL over each plugin against its sockets with `mpirun --bind-to
# none`, four tests 256 KiB-16 MiB (factor 2), builds in turn, while time is left.
# Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { if [[ $1 == new ]]; then echo $PWD/gpu-bin/netplugin; else echo $PWD/gpu-bin/netplugin-$1; fi; }
OXCCL_TEST_ACROSS_RANKS=2 GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=380 GPU_TEST_FILTERS="across_hosts::" timeout 390 bash gpu-bin/gpu-session.sh tests 2>&1 | tail -2
pack tests
# The first netplugin stage on a fresh machine also builds nccl-tests (~36 s).
OUT=$parts GPU_SESSION_TAG=pytorch NETPLUGIN_PYTORCH=1 NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=1M NETPLUGIN_TESTS="all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 150 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "pytorch|exit [1-9]|wrong [1-9]"
pack pytorch
for r in 1 2; do for v in new base; do
  ((SECONDS - start > 520)) && break 2
  OUT=$parts GPU_SESSION_TAG=bn-$v-$r NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=256K NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather alltoall reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 40 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(alltoall|all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack bn-$v-$r
done; done
echo "total $((SECONDS-start)) s"
