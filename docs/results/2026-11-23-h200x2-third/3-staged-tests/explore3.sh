#!/usr/bin/env bash
# Call 3: the staged abort test that timed out in call 2 — with one proxy thread and with
# the default (4 on 32 cores) — then the GPU tests call 2's time limit cut off.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache OXCCL_TEST_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32
cp "$0" "$res/"
note() { echo "$*" | tee -a "$res/summary.txt"; }
t() { # name, test, timeout, env...
  local name=$1 test=$2 limit=$3; shift 3
  local start=$SECONDS
  env "$@" timeout "$limit" "$bin/gpu_collectives" "$test" --exact --nocapture --test-threads 1 > "$res/$name.log" 2>&1
  note "$name: exit $? ($((SECONDS - start)) s, at $SECONDS s)"
}
t staged-abort-threads1 a_staged_operation_stops_on_abort_and_when_its_peer_leaves 90 OXCCL_PROXY_THREADS=1
t staged-abort-default a_staged_operation_stops_on_abort_and_when_its_peer_leaves 90 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET,PROXY
t staged-matrix ranks_on_separate_hosts_stage_through_host_memory 150
t staged-groups staged_send_recv_groups 60
((SECONDS < 420)) && t threads ranks_as_threads $((560 - SECONDS))
cat "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
