#!/usr/bin/env bash
# Runs, on a machine with GPUs, the GPU test matrix (exact and random inputs, the
# `child` of gpu-bin/gpu_collectives) as two processes, each under compute-sanitizer, once
# per tool: memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory
# hazards), synccheck (barriers misused), initcheck (reads of uninitialized device
# memory); SANITIZER_TOOLS narrows them. The ranks join
# through the torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) on
# GPUs 0 and 1 % GPUs: on one GPU the two processes share it, time-sliced. One log per
# tool and rank into $OUT (or gpu-out/), a line per tool in summary.txt; the exit code is
# non-zero when a tool found an error or a rank failed. NVLink multicast stays off.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OXCCL_TEST_GPU=1 NCCL_SOCKET_IFNAME=lo
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/oxccl-cache}"
sanitizer=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
status=0
port=${SANITIZER_PORT:-29550}
for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}; do
  start=$SECONDS
  pids=()
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OXCCL_TEST_GPU_CHILD=2 \
      timeout "${SANITIZER_TIMEOUT:-480}" "$sanitizer" --tool "$tool" --print-limit 30 --error-exitcode 86 \
      "$here/gpu_collectives" child --exact --nocapture --test-threads 1 > "$out/$tool-$rank.log" 2>&1 &
    pids+=($!)
  done
  codes=()
  for pid in "${pids[@]}"; do
    wait "$pid"
    codes+=($?)
  done
  # A new root port for the next tool: the last one's may still be in TIME_WAIT.
  port=$((port + 1))
  summary=$(grep -h -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/$tool"-*.log | tr '\n' ' ')
  echo "$tool: exit ${codes[*]} ($((SECONDS - start)) s) $summary" | tee -a "$out/summary.txt"
  for code in "${codes[@]}"; do
    ((code == 0)) || status=$code
  done
done
exit $status
