#!/usr/bin/env bash
# Experiment (2026-11-23, new session): the host path's ring over the socket Net split over
# XCH channels (a temporary knob, not committed: comm.rs read XCH for the plan's channels),
# staged all_reduce against NCCL's socket transport.
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0
res=$(mktemp -d)
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
nproc > "$res/nproc.txt"
for pt in 0 8; do
  for ch in 1 2 4 8; do
    start=$SECONDS
    OXCCL_PROXY_THREADS=$pt XCH=$ch timeout 120 gpu-bin/oxccl-perf all_reduce -b 2M -e 64M -f 4 -n 10 -w 3 -c 1 --gpus 2 --separate-hosts --baseline nccl > "$res/ar-pt$pt-ch$ch.txt" 2>&1
    echo "pt$pt ch$ch: exit $? in $((SECONDS - start)) s" | tee -a "$res/summary.txt"
    grep -E "^ +[0-9]" "$res/ar-pt$pt-ch$ch.txt" | tee -a "$res/summary.txt"
  done
done
