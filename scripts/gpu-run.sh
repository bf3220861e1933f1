#!/usr/bin/env bash
# Runs, on a machine with GPUs, what scripts/gpu-build.sh put in gpu-bin/: each test
# binary with OXCCL_TEST_GPU=1 (a missing GPU is then a failure, not a skip). Results go
# to $OUT (the device tool's output folder) or gpu-out/: one log per binary, the machine's
# nvidia-smi, and a summary. Never changes GPU clocks or modes; NVLink multicast stays off.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OXCCL_TEST_GPU=1
# Tests run ranks as threads sharing a GPU, whose kernels wait for each other: two ranks'
# streams in one hardware queue can hold each other up (docs/GPU.md, "Ranks sharing a
# GPU"); the most queues (32; the default is 8) keeps streams made together apart.
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$out/cache}"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
nvidia-smi topo -m > "$out/topo.txt" 2>&1 || true
status=0
tests=${GPU_TESTS:-nvrtc gpu gpu_collectives gpu_calls}
for t in $tests; do
  [[ -x $here/$t ]] || continue
  start=$SECONDS
  # GPU_TEST_FILTERS: test name filters for every binary (a part of gpu_collectives fits a
  # call; the whole binary needs more than the device's 600 s).
  # shellcheck disable=SC2086
  timeout "${GPU_TEST_TIMEOUT:-500}" "$here/$t" ${GPU_TEST_FILTERS:-} --nocapture --test-threads 1 > "$out/$t.log" 2>&1
  rc=$?
  echo "$t: exit $rc ($((SECONDS - start)) s)" | tee -a "$out/summary.txt"
  ((rc == 0)) || status=$rc
done
exit $status
