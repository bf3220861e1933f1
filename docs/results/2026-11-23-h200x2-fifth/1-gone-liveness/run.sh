#!/usr/bin/env bash
# Branch gone-liveness (2026-11-23, new session): the goodbye flag only into allocated
# same-process peers; new GPU memory zeroed on the upload stream.
set -u
export OXCCL_TEST_GPU=1 CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
nvidia-smi topo -m > "$res/topo.txt" 2>&1
for set in "$@"; do
  IFS=: read -r name limit binary filters <<< "$set"
  start=$SECONDS
  # shellcheck disable=SC2086
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout "$limit" "$b/$binary" $filters --test-threads 1 --nocapture > "$res/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$res/summary.txt"
  grep -c "could not tell" "$res/$name.log" | sed "s/^/$name could-not-tell lines: /" | tee -a "$res/summary.txt"
done
cat "$res/summary.txt"
