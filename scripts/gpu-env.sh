# Sourced by the oxccl-perf scripts on the GPU machine (gpu-bench.sh, gpu-variants.sh), from
# gpu-bin/ beside them: sets `here` (that directory), `out` ($OUT, else gpu-out/, made),
# `gpus` (GPU_BENCH_GPUS, else every GPU), and the environment every run shares: NVLink
# multicast off, CUDA's libraries on the path, NVRTC's kernel cache.
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/oxccl-cache}"
gpus=${GPU_BENCH_GPUS:-$(nvidia-smi -L | wc -l)}
