#!/usr/bin/env bash
# Call 5: a communicator's links on one proxy thread, communicators dealt over the threads.
#  1. the "a_" GPU tests in binary order with ONE proxy thread (call 4: the staged abort test
#     failed after the other two with four threads; alone it passes with either)
#  2. staged all_reduce / sendrecv and the CPU socket Net under mpirun, defaults
#  3. the cache test and staged groups
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache CUDA_DEVICE_MAX_CONNECTIONS=32
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp "$0" "$res/"
note() { echo "$*" | tee -a "$res/summary.txt"; }
t() { # name, filter, timeout, extra args...
  local name=$1 filter=$2 limit=$3; shift 3
  local start=$SECONDS
  OXCCL_TEST_GPU=1 timeout "$limit" "$bin/gpu_collectives" $filter "$@" --nocapture --test-threads 1 > "$res/$name.log" 2>&1
  note "$name: exit $? ($((SECONDS - start)) s, at $SECONDS s)"
}
OXCCL_PROXY_THREADS=1 t a-tests-threads1 a_ 150
for c in all_reduce sendrecv; do
  timeout 100 "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/staged-$c.txt" 2>&1
  note "staged $c: exit $? ($SECONDS s)"
done
for c in sendrecv all_reduce; do
  NCCL_SHM_DISABLE=1 timeout 60 mpirun --allow-run-as-root -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NCCL_SHM_DISABLE -x LD_LIBRARY_PATH \
    "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --blocking 1 --baseline mpi > "$res/cpu-net-$c.txt" 2>&1
  note "cpu net $c: exit $? ($SECONDS s)"
done
t more-plans more_plans_than_the_cache_holds 60 --exact
t staged-groups staged_send_recv_groups 60 --exact
cat "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
