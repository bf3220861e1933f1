#!/usr/bin/env bash
# Device call 3 (session 30): as call 2's builds. Part 4x4: NCCL over each plugin against
# its sockets, both at 4 threads x 4 sockets (NETPLUGIN_SOCKET_SETTINGS=4x4), mpirun's
# default binding, four tests 1-16 MiB (factor 2), builds in turn while time is left.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { case $1 in arr) echo $PWD/gpu-bin/netplugin;; main) echo $PWD/gpu-bin/netplugin-main;; esac; }
for r in 1 2; do for v in main arr; do
  ((SECONDS - start > 300)) && break 2
  OUT=$parts GPU_SESSION_TAG=4x4-$v-$r NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter alltoall" NETPLUGIN_SOCKET_SETTINGS=4x4 NETPLUGIN_ROUNDS=1 timeout 90 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(all_gather|all_reduce|reduce_scatter|alltoall) |exit [1-9]|wrong [1-9]"
  pack 4x4-$v-$r
done; done
echo "total $((SECONDS-start)) s"
