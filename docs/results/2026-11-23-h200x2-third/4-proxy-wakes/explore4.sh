#!/usr/bin/env bash
# Call 4: proxy threads woken by the executor (no waiting for an idle thread to look again).
#  1. staged all_reduce / sendrecv, OXCCL_PROXY_THREADS=1 vs default (4 on 32 cores), NCCL beside
#  2. CPU socket Net under mpirun against Open MPI, 1 vs default
#  3. GPU tests: the "a_" tests in binary order (the staged abort test failed after the
#     other two in call 2, passed alone in call 3), the cache test, staged groups, gpu_calls
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache CUDA_DEVICE_MAX_CONNECTIONS=32
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp "$0" "$res/"
note() { echo "$*" | tee -a "$res/summary.txt"; }
for t in 1 0; do
  for c in all_reduce sendrecv; do
    OXCCL_PROXY_THREADS=$t timeout 100 "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/staged-$c-threads$t.txt" 2>&1
    note "staged $c threads $t: exit $? ($SECONDS s)"
  done
done
for t in 1 0; do
  for c in sendrecv all_reduce; do
    OXCCL_PROXY_THREADS=$t NCCL_SHM_DISABLE=1 timeout 60 mpirun --allow-run-as-root -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NCCL_SHM_DISABLE -x OXCCL_PROXY_THREADS -x LD_LIBRARY_PATH \
      "$bin/oxccl-perf" $c -b 8 -e 64M -f 8 -n 10 -w 3 -c 1 --blocking 1 --baseline mpi > "$res/cpu-net-$c-threads$t.txt" 2>&1
    note "cpu net $c threads $t: exit $? ($SECONDS s)"
  done
done
export OXCCL_TEST_GPU=1
t() { # name, filter, timeout, extra args...
  local name=$1 filter=$2 limit=$3; shift 3
  local start=$SECONDS
  timeout "$limit" "$bin/gpu_collectives" $filter "$@" --nocapture --test-threads 1 > "$res/$name.log" 2>&1
  note "$name: exit $? ($((SECONDS - start)) s, at $SECONDS s)"
}
t a-tests a_ 150
t more-plans more_plans_than_the_cache_holds 60 --exact
t staged-groups staged_send_recv_groups 60 --exact
timeout 60 "$bin/gpu_calls" --nocapture --test-threads 1 > "$res/gpu_calls.log" 2>&1; note "gpu_calls: exit $?"
cat "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
