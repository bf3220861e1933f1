#!/usr/bin/env bash
# Device call 1 (session 30): gpu-bin = 0fc76e1 (branch notices-by-arrived-bytes: held
# notices written once messages of 2 MiB arrived since the last write, not once buffers of
# 2 MiB are held; plugin "arr"); gpu-bin/netplugin-main = main's plugin (df754cb);
# gpu-bin/netplugin-spin = arr with an experimental knob, OXCCL_NETPLUGIN_TEST_SPIN_US: a
# test that finds its request not done tries again for up to so many microseconds (builds
# spin20 and spin100). Part def: NCCL over each plugin against its sockets at mpirun's
# default binding, all_reduce, all_gather and reduce_scatter 1-16 MiB (factor 2), builds
# in turn, rounds while time is left. Everything under $OUT/parts, packed into
# $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { case $1 in arr) echo $PWD/gpu-bin/netplugin;; main) echo $PWD/gpu-bin/netplugin-main;; *) echo $PWD/gpu-bin/netplugin-spin;; esac; }
env_of() { case $1 in spin*) echo "OXCCL_NETPLUGIN_TEST_SPIN_US=${1#spin}";; *) echo "";; esac; }
# The first netplugin stage on a fresh machine also builds nccl-tests (~36 s).
limit=150
for r in 1 2 3 4; do for v in main arr spin20 spin100; do
  ((SECONDS - start > 540)) && break 2
  OUT=$parts GPU_SESSION_TAG=def-$v-$r NETPLUGIN_ENV="$(env_of $v)" NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack def-$v-$r; limit=$((590 - (SECONDS-start))); ((limit > 60)) && limit=60
done; done
echo "total $((SECONDS-start)) s"
