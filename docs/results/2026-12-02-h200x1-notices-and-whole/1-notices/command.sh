#!/usr/bin/env bash
# Device call 1 (session 29): gpu-bin = dc8d4f8 (branch notices-on-request: notices held
# until many, needed or asked; no 50 us clock); gpu-bin/netplugin-main = main's plugin
# (a559e80, notices after 50 us). Part pytorch: PyTorch's collectives through NCCL over
# main's plugin and over NCCL's sockets (two processes posing as hosts). Part small: small
# calls (8 B-32 KiB, 200 iterations) at mpirun's default binding, main and branch in turn,
# two rounds each. Part bn: all_reduce and alltoall 1-16 MiB with `--bind-to none`, main and
# branch in turn, two rounds each. Part def: alltoall 1-64 MiB at the default binding, main
# and branch in turn, two rounds each. Everything under $OUT/parts, packed into
# $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { if [[ $1 == main ]]; then echo $PWD/gpu-bin/netplugin-main; else echo $PWD/gpu-bin/netplugin; fi; }
# The first netplugin stage on a fresh machine also builds nccl-tests (~36 s).
OUT=$parts GPU_SESSION_TAG=pytorch NETPLUGIN_PYTORCH=1 NETPLUGIN_DIR=$(dir_of main) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=1M NETPLUGIN_TESTS="all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 200 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "pytorch|exit [1-9]|wrong [1-9]"
pack pytorch
for r in 1 2; do for v in main branch; do
  OUT=$parts GPU_SESSION_TAG=small-$v-$r NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=8 NCCL_TESTS_MAX=32K NCCL_TESTS_ITERS=200 NETPLUGIN_TESTS="broadcast all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 60 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "exit [1-9]|wrong [1-9]"
  pack small-$v-$r
done; done
for r in 1 2; do for v in main branch; do
  OUT=$parts GPU_SESSION_TAG=bn-$v-$r NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=16M NETPLUGIN_TESTS="all_reduce alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 60 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(alltoall|all_reduce) |exit [1-9]|wrong [1-9]"
  pack bn-$v-$r
done; done
for r in 1 2; do for v in main branch; do
  OUT=$parts GPU_SESSION_TAG=def-$v-$r NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=64M NETPLUGIN_TESTS="alltoall" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 50 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^alltoall |exit [1-9]|wrong [1-9]"
  pack def-$v-$r
done; done
echo "total $((SECONDS-start)) s"
