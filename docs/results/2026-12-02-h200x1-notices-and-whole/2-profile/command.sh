#!/usr/bin/env bash
# Device call 2 (session 29): gpu-bin = dc8d4f8 (branch notices-on-request);
# gpu-bin/netplugin-main = main's plugin (a559e80). Part prof-<size>: NCCL's example
# profiler plugin (NVIDIA/nccl plugins/profiler/example, built here from a copy in
# gpu-bin/profiler-src, not the project's), proxy steps only (NCCL_PROFILE_EVENT_MASK=16),
# NCCL_DEBUG_SUBSYS=INIT,NET,TUNING (the algorithm, protocol and channels of each call),
# all_reduce at one size with `--bind-to none`, main's plugin against NCCL's sockets, one
# round; traces under parts/traces-<size>. Part tests: every `across_hosts::` GPU test
# on the branch's binaries in the time left. Everything under $OUT/parts, packed into
# $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
P=gpu-bin/profiler-src/plugins/profiler/example
mkdir -p gpu-bin/profiler && g++ -O2 -I$P/nccl -I/usr/local/cuda/include -fPIC -shared -o gpu-bin/profiler/libnccl-profiler-example.so $P/*.cc -L/usr/local/cuda/lib64 -lcudart -lpthread || echo "profiler build failed"
for size in 1M 4M; do
  tr=$parts/traces-$size; mkdir -p $tr
  OUT=$parts GPU_SESSION_TAG=prof-$size NETPLUGIN_ENV="NCCL_DEBUG_SUBSYS=INIT,NET,TUNING NCCL_PROFILER_PLUGIN=$PWD/gpu-bin/profiler/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=16 NCCL_PROFILE_GROUP_API_POOL_SIZE=4096 NCCL_PROFILE_DUMP_FILE=$tr/trace" NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$PWD/gpu-bin/netplugin-main NCCL_TESTS_MIN=$size NCCL_TESTS_MAX=$size NETPLUGIN_TESTS="all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 100 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^all_reduce |exit [1-9]|wrong [1-9]"
  ls $tr | head -3; ls $tr | wc -l
  pack prof-$size
done
export OXCCL_TEST_ACROSS_RANKS=2
left=$((585 - (SECONDS-start)))
GPU_SESSION_TAG=tests OUT=$parts GPU_TESTS=gpu_collectives GPU_TEST_TIMEOUT=$((left-5)) GPU_TEST_FILTERS="across_hosts::" timeout $left bash gpu-bin/gpu-session.sh tests 2>&1 | tail -3
pack tests
echo "total $((SECONDS-start)) s"
