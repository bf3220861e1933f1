#!/usr/bin/env bash
# Device call 4 (session 28): gpu-bin = 1866174. alltoall from 1 MiB, NCCL over the plugin
# against its sockets, the plugin's comms receiver-driven (maxRecvs 8, the default: r8) and
# eager (OXCCL_NETPLUGIN_MAX_RECVS=1: r1) in turn, one round each time: four times each
# with `mpirun --bind-to none` (bn-), three times each at mpirun's default binding (def-).
# Everything under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
# The first netplugin stage on a fresh machine also builds nccl-tests (~36 s).
limit=120
for r in 1 2 3 4; do for m in 8 1; do
  OUT=$parts GPU_SESSION_TAG=bn-r$m-$r NETPLUGIN_MPIRUN_ARGS="--bind-to none" OXCCL_NETPLUGIN_MAX_RECVS=$m NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^alltoall |exit [1-9]|wrong [1-9]"
  pack bn-r$m-$r; limit=50
done; done
for r in 1 2 3; do for m in 8 1; do
  OUT=$parts GPU_SESSION_TAG=def-r$m-$r OXCCL_NETPLUGIN_MAX_RECVS=$m NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 50 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^alltoall |exit [1-9]|wrong [1-9]"
  pack def-r$m-$r
done; done
echo "total $((SECONDS-start)) s"
