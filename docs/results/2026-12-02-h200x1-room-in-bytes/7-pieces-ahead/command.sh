#!/usr/bin/env bash
# Device call 6 (session 27): gpu-bin = 81f7551 (messages in pieces of at most 1 MiB go
# ahead of their notices on a receiver-driven comm, into stages of their own at the
# receiver); gpu-bin/netplugin-old = 8dbedb6. NCCL over each plugin against its sockets
# with `mpirun --bind-to none` (where the plugin's comms have a helper thread and a data
# socket), alltoall, all_gather and all_reduce from 1 MiB, the builds in turn, two rounds
# each. Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
export NETPLUGIN_MPIRUN_ARGS="--bind-to none"
for r in 1 2; do for v in new old; do
  d=$PWD/gpu-bin/netplugin; [[ $v == old ]] && d=$PWD/gpu-bin/netplugin-old
  OUT=$parts GPU_SESSION_TAG=big-$v-$r NETPLUGIN_DIR=$d NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="alltoall all_gather all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 45 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(alltoall|all_gather|all_reduce) |exit [1-9]|wrong [1-9]"
  pack big-$v-$r
done; done
echo "total $((SECONDS-start)) s"
