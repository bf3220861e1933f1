#!/usr/bin/env bash
# Device call 1 (session 28): gpu-bin = 1866174 (base); gpu-bin/netplugin-a = base with a
# data socket's lone piece (its only one) moved by the caller whatever its length while the
# socket's helper thread sleeps; gpu-bin/netplugin-b = base with helper threads looking for
# work 500 µs (not 50) before they sleep. Part bn: NCCL over each plugin against its sockets
# with `mpirun --bind-to none`, four tests 256 KiB-16 MiB, builds in turn, three rounds.
# Part def: mpirun's default binding, reduce_scatter and all_gather from 1 MiB, six rounds
# (base); part eager: reduce_scatter over eager comms (OXCCL_NETPLUGIN_MAX_RECVS=1), three
# rounds. Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
limit=150
for r in 1 2 3; do for v in base a b; do
  d=$PWD/gpu-bin/netplugin; [[ $v != base ]] && d=$PWD/gpu-bin/netplugin-$v
  OUT=$parts GPU_SESSION_TAG=bn-$v-$r NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$d NCCL_TESTS_MIN=256K NCCL_TESTS_MAX=16M NETPLUGIN_TESTS="all_reduce all_gather alltoall reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(alltoall|all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack bn-$v-$r; limit=60
done; done
OUT=$parts GPU_SESSION_TAG=def NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="reduce_scatter all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=6 timeout 150 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -4
pack def
OUT=$parts GPU_SESSION_TAG=eager OXCCL_NETPLUGIN_MAX_RECVS=1 NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=3 timeout 70 bash gpu-bin/gpu-session.sh netplugin 2>&1 | tail -3
pack eager
echo "total $((SECONDS-start)) s"
