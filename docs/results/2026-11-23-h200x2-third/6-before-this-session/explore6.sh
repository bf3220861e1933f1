#!/usr/bin/env bash
# Call 6: the "a_" GPU tests in binary order with the binary of 54d59c6 (before this
# session's changes): is the staged abort failure after the peer-left tests older?
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache CUDA_DEVICE_MAX_CONNECTIONS=32 OXCCL_TEST_GPU=1
cp "$0" "$res/"
start=$SECONDS
timeout 150 "$bin/old_gpu_collectives" a_ --nocapture --test-threads 1 > "$res/a-tests-54d59c6.log" 2>&1
echo "a_ tests, 54d59c6: exit $? ($((SECONDS - start)) s)" | tee -a "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
