#!/usr/bin/env bash
# Device call 2 (session 32): socket buffer sizes at mpirun's default binding. NCCL over
# libnccl-net-oxccl.so (this session's plugin, which reads NCCL_SOCKET_SNDBUF and
# NCCL_SOCKET_RCVBUF) and over its own sockets (which read the same two), all_reduce and
# all_gather 1-16 MiB (factor 2), each buffer setting given to both nets' ranks, settings
# in turn within a round, rounds while time is left. Digits, not 256K: NCCL read call 1's
# "256K" as 256 bytes.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
env_of() { case $1 in default) echo "";; *) echo "NCCL_SOCKET_SNDBUF=$1 NCCL_SOCKET_RCVBUF=$1";; esac; }
for r in 1 2 3 4 5 6 7 8 9 10; do for b in default 262144 1048576; do
  ((SECONDS - start > ${CALL_SECONDS:-510})) && break 2
  OUT=$parts GPU_SESSION_TAG=buf-$b-$r NETPLUGIN_ENV="$(env_of $b)" NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $((590 - (SECONDS-start))) bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^\[default\] .*(geometric|exit [1-9]|wrong [1-9])"
  pack buf-$b-$r
done; done
cp "$0" $parts/command.sh
pack all
echo "total $((SECONDS-start)) s"
