#!/usr/bin/env bash
# Device call 5 (session 30): gpu-bin/netplugin-main = main's plugin (df754cb);
# gpu-bin/netplugin-queue = df754cb whose isend only queues a message over 64 KiB, `test`
# writing it (as NCCL's socket isend); "eager" = main's plugin with
# OXCCL_NETPLUGIN_MAX_RECVS=1 (eager comms, no notices). Part def: NCCL over each against
# its sockets at mpirun's default binding, all_reduce, all_gather and reduce_scatter
# 1-16 MiB (factor 2), builds in turn, rounds while time is left.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { case $1 in queue) echo $PWD/gpu-bin/netplugin-queue;; *) echo $PWD/gpu-bin/netplugin-main;; esac; }
env_of() { case $1 in eager) echo "OXCCL_NETPLUGIN_MAX_RECVS=1";; *) echo "";; esac; }
limit=100
for r in 1 2 3 4 5 6; do for v in main queue eager; do
  ((SECONDS - start > ${CALL_SECONDS:-170})) && break 2
  OUT=$parts GPU_SESSION_TAG=def-$v-$r NETPLUGIN_ENV="$(env_of $v)" NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack def-$v-$r; limit=40
done; done
echo "total $((SECONDS-start)) s"
