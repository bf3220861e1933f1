#!/usr/bin/env bash
# Device call 3 (session 29): gpu-bin = notices on request (now main, 977e376; its plugin
# is base); gpu-bin/netplugin-f = base where a message of at most 128 KiB goes whole over
# the control socket even on a comm with data sockets (base: from 64 KiB in pieces over
# the data sockets). Part bn: NCCL over each plugin against its sockets with `mpirun
# --bind-to none`, four tests 256 KiB-16 MiB (factor 2), builds in turn, four rounds. Part
# prof: NCCL's example profiler (proxy steps), all_reduce at 1 MiB, each build. Everything
# under $OUT/parts, packed into $OUT/all.tar after each part.
cd "$(dirname "$0")/.."
start=$SECONDS
parts=$OUT/parts; mkdir -p $parts
pack() { tar cf $OUT/all.tar -C $OUT parts; echo "$1 done at $((SECONDS-start)) s"; }
dir_of() { if [[ $1 == base ]]; then echo $PWD/gpu-bin/netplugin; else echo $PWD/gpu-bin/netplugin-$1; fi; }
# The first netplugin stage on a fresh machine also builds nccl-tests (~36 s).
limit=150
for r in 1 2 3 4; do for v in base f; do
  OUT=$parts GPU_SESSION_TAG=bn-$v-$r NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=256K NCCL_TESTS_MAX=16M NCCL_TESTS_FACTOR=2 NETPLUGIN_TESTS="all_reduce all_gather alltoall reduce_scatter" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout $limit bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^(alltoall|all_gather|all_reduce|reduce_scatter) |exit [1-9]|wrong [1-9]"
  pack bn-$v-$r; limit=60
done; done
P=gpu-bin/profiler-src/plugins/profiler/example
mkdir -p gpu-bin/profiler && g++ -O2 -I$P/nccl -I/usr/local/cuda/include -fPIC -shared -o gpu-bin/profiler/libnccl-profiler-example.so $P/*.cc -L/usr/local/cuda/lib64 -lcudart -lpthread || echo "profiler build failed"
for v in base f; do
  tr=$parts/traces-$v; mkdir -p $tr
  OUT=$parts GPU_SESSION_TAG=prof-$v NETPLUGIN_ENV="NCCL_PROFILER_PLUGIN=$PWD/gpu-bin/profiler/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=16 NCCL_PROFILE_GROUP_API_POOL_SIZE=4096 NCCL_PROFILE_DUMP_FILE=$tr/trace" NETPLUGIN_MPIRUN_ARGS="--bind-to none" NETPLUGIN_DIR=$(dir_of $v) NCCL_TESTS_MIN=1M NCCL_TESTS_MAX=1M NETPLUGIN_TESTS="all_reduce" NETPLUGIN_SOCKET_SETTINGS=default NETPLUGIN_ROUNDS=1 timeout 60 bash gpu-bin/gpu-session.sh netplugin 2>&1 | grep -E "^all_reduce |exit [1-9]|wrong [1-9]"
  pack prof-$v
done
echo "total $((SECONDS-start)) s"
