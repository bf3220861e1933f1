#!/usr/bin/env bash
# Runs nccl-tests binaries (built elsewhere, unchanged, against NCCL's own header; pass
# their build directory as $1) twice per test on every GPU of this machine: with oxccl's
# libnccl.so.2 (gpu-bin/lib, from scripts/gpu-build.sh) first on the library path, and
# with the machine's NCCL. Tables go to $OUT (or gpu-out/) as nccltests-<test>-<lib>.txt.
# NVLink multicast stays off; GPU clocks and modes are never touched.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: gpu-nccl-tests.sh <nccl-tests build directory>}"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/oxccl-cache}"
gpus=${GPU_BENCH_GPUS:-$(nvidia-smi -L | wc -l)}
status=0
for t in ${NCCL_TESTS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv}; do
  for lib in oxccl nccl; do
    if [[ $lib == oxccl ]]; then path="$here/lib:${LD_LIBRARY_PATH:-}"; else path="${LD_LIBRARY_PATH:-}"; fi
    LD_LIBRARY_PATH="$path" timeout "${NCCL_TESTS_TIMEOUT:-120}" "$build/${t}_perf" -b "${NCCL_TESTS_MIN:-8}" -e "${NCCL_TESTS_MAX:-256M}" -f "${NCCL_TESTS_FACTOR:-4}" -g "$gpus" -c 1 -n 20 -w 5 > "$out/nccltests-$t-$lib.txt" 2>&1
    rc=$?
    wrong=$(grep -o "Out of bounds values : [0-9]*" "$out/nccltests-$t-$lib.txt" | grep -o "[0-9]*$")
    echo "$t with $lib: exit $rc, wrong ${wrong:-?}" | tee -a "$out/summary.txt"
    ((rc == 0)) || status=1
  done
done
exit $status
