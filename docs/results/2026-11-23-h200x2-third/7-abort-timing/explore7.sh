#!/usr/bin/env bash
# Call 7: the "a_" GPU tests in order, the staged abort test's failure message now saying
# when the abort came and when the wait returned; with the host path's logs.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/gpu-bin"
res=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache CUDA_DEVICE_MAX_CONNECTIONS=32 OXCCL_TEST_GPU=1
cp "$0" "$res/"
start=$SECONDS
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET,PROXY timeout 150 "$bin/gpu_collectives" a_ --nocapture --test-threads 1 > "$res/a-tests.log" 2>&1
echo "a_ tests: exit $? ($((SECONDS - start)) s)" | tee -a "$res/summary.txt"
tar czf "$OUT/results.tgz" -C "$res" .
