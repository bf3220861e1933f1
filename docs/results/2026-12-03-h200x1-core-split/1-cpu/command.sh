#!/usr/bin/env bash
# Device call 1 (session 31): where each rank's one core goes at mpirun's default binding.
# NCCL over libnccl-net-oxccl.so (main, 70c4a6f) and over its own sockets, all_reduce and
# all_gather at one size each run (16 MiB, 600 iterations; 1 MiB, 6000), rounds in turn,
# every thread's CPU time sampled every 0.1 s (thread-cpu-sampler.py, threads named by
# NCCL_SET_THREAD_NAME=1).
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
nproc; uname -r; cat /sys/kernel/debug/sched/base_slice_ns 2>/dev/null
python3 gpu-bin/thread-cpu-sampler.py $parts/samples.txt & sampler=$!
limit=150
for r in 1 2 3; do for size in 16M 1M; do
  ((SECONDS - start > ${CALL_SECONDS:-330})) && break 2
  n=600; [[ $size == 1M ]] && n=6000
  OUT=$parts GPU_SESSION_TAG=cpu-$size-$r NETPLUGIN_ENV="NCCL_SET_THREAD_NAME=1" NCCL_TESTS_MIN=$size NCCL_TESTS_MAX=$size NCCL_TESTS_ITERS=$n NETPLUGIN_TESTS="all_reduce all_gather" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(all_gather|all_reduce) |exit [1-9]|wrong [1-9]"
  pack cpu-$size-$r; limit=100
done; done
kill $sampler
cp "$0" $parts/command.sh
pack all
echo "total $((SECONDS-start)) s"
