#!/usr/bin/env bash
# Call 6 (2026-11-23, new session): the GPU tests not run this session, on the final code
# (host plan cache, one shot, network channels, goodbye into live peers only): nvrtc, the
# kernel binary, gpu_calls, large messages; then the staged matrix and the fault tests once
# more (the host path under the staged one changed after call 5).
set -u
export OXCCL_TEST_GPU=1 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
for set in "$@"; do
  IFS=: read -r name limit binary filters <<< "$set"
  start=$SECONDS
  # shellcheck disable=SC2086
  timeout "$limit" "$b/$binary" $filters --test-threads 1 --nocapture > "$res/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$res/summary.txt"
done
cat "$res/summary.txt"
