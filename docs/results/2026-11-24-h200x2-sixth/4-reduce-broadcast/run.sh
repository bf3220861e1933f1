#!/usr/bin/env bash
# Call 4 (2026-11-24): staged reduce, new (pieces) and old alternating twice, and
# broadcast once more: call 3 had reduce slower with pieces (one run each).
set -u
export CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/oxccl-cache NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
res=$(mktemp -d); b=gpu-bin
trap 'tar czf "$OUT/results.tgz" -C "$res" .' EXIT
note() { echo "$*" | tee -a "$res/summary.txt"; }
for round in 1 2; do
  for c in reduce broadcast; do
    for v in old new; do
      bin=oxccl-perf; [[ $v == old ]] && bin=old-oxccl-perf
      timeout 100 "$b/$bin" $c -b 4M -e 256M -f 4 -n 20 -w 5 -c 0 --gpus 2 --separate-hosts --baseline nccl > "$res/$c-$v-$round.txt" 2>&1
      note "$c staged $v round $round: exit $? ($SECONDS s)"
    done
  done
done
cat "$res/summary.txt"
