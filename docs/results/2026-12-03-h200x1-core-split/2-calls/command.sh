#!/usr/bin/env bash
# Device call 2 (session 31): the socket calls of each net under NCCL's proxy at mpirun's
# default binding, counted by an LD_PRELOAD library (socket-call-counter.c) in the ranks
# (mpirun -x), with every thread's CPU time sampled as in call 1. NCCL over
# libnccl-net-oxccl.so (main, 70c4a6f) and over its own sockets, all_reduce and all_gather
# at one size a run (16 MiB, 600 iterations; 1 MiB, 6000), rounds in turn.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
python3 gpu-bin/thread-cpu-sampler.py $parts/samples.txt & sampler=$!
limit=150
for r in 1 2; do for size in 16M 1M; do
  ((SECONDS - start > ${CALL_SECONDS:-300})) && break 2
  n=600; [[ $size == 1M ]] && n=6000
  calls=$parts/calls-$size-$r; mkdir -p $calls
  OUT=$parts GPU_SESSION_TAG=calls-$size-$r NETPLUGIN_MPIRUN_ARGS="-x LD_PRELOAD=$PWD/gpu-bin/libsocket-call-counter.so -x SOCKET_CALLS_DIR=$calls -x NCCL_SET_THREAD_NAME=1" NCCL_TESTS_MIN=$size NCCL_TESTS_MAX=$size NCCL_TESTS_ITERS=$n NETPLUGIN_TESTS="all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(all_gather|all_reduce) |exit [1-9]|wrong [1-9]"
  pack calls-$size-$r; limit=100
done; done
kill $sampler
cp "$0" $parts/command.sh
pack all
echo "total $((SECONDS-start)) s"
