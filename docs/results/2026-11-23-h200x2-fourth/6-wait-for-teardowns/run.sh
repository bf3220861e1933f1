#!/usr/bin/env bash
# Call 13 (2026-11-23, day): gpu::wait_for_teardowns, and the GPU tests making their
# communicators only once the ones dropped before have freed their memory. The fault
# tests in binary order, the pieces that hung after the every-pair test, ranks as threads.
set -u
export OXCCL_TEST_GPU=1 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
for set in "$@"; do
  IFS=: read -r name limit binary filters <<< "$set"
  start=$SECONDS
  # shellcheck disable=SC2086
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout "$limit" "$b/$binary" $filters --test-threads 1 --nocapture > "$res/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$res/summary.txt"
done
tar czf "$OUT/results.tgz" -C "$res" .
cat "$res/summary.txt"
