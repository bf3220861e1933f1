#!/usr/bin/env bash
# Device call 3 (session 32): the other tests at mpirun's default binding, the plugin of
# 92fabf0 (code as at e9ed87e) against NCCL's sockets, kernel's socket buffers:
# reduce_scatter, alltoall, broadcast and reduce 1-16 MiB (factor 2), rounds while time
# is left (the two nets in alternating order within each run, as gpu-netplugin.sh does).
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
for r in 1 2 3 4 5 6 7 8 9 10; do
  ((SECONDS - start > ${CALL_SECONDS:-500})) && break
  OUT=$parts GPU_SESSION_TAG=other-$r NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="reduce_scatter alltoall broadcast reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $((590 - (SECONDS-start))) bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^\[default\] .*(geometric|exit [1-9]|wrong [1-9])"
  pack other-$r
done
cp "$0" $parts/command.sh
pack all
echo "total $((SECONDS-start)) s"
