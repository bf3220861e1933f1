#!/usr/bin/env bash
# Runs nccl-tests binaries (built elsewhere, unchanged, against NCCL's own header; pass
# their build directory as $1) twice per test on every GPU of this machine: with oxccl's
# libnccl.so.2 (gpu-bin/lib, from scripts/gpu-build.sh) first on the library path, and
# with the machine's NCCL. Tables go to $OUT (or gpu-out/) as nccltests-<test>-<lib>.txt.
# NVLink multicast stays off; GPU clocks and modes are never touched.
# NCCL_TESTS_MPI=1: the build is nccl-tests' MPI=1 one; run one process per GPU under
# mpirun (-g 1 each), tables as nccltests-mpi-<test>-<lib>.txt.
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
    args=(-b "${NCCL_TESTS_MIN:-8}" -e "${NCCL_TESTS_MAX:-256M}" -f "${NCCL_TESTS_FACTOR:-4}" -c 1 -n 20 -w 5)
    if [[ ${NCCL_TESTS_MPI:-0} == 1 ]]; then
      table="$out/nccltests-mpi-$t-$lib.txt"
      LD_LIBRARY_PATH="$path" timeout "${NCCL_TESTS_TIMEOUT:-120}" mpirun --allow-run-as-root --oversubscribe -np "$gpus" \
        -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x XDG_CACHE_HOME --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        "$build/${t}_perf" "${args[@]}" -g 1 > "$table" 2>&1
    else
      table="$out/nccltests-$t-$lib.txt"
      LD_LIBRARY_PATH="$path" timeout "${NCCL_TESTS_TIMEOUT:-120}" "$build/${t}_perf" "${args[@]}" -g "$gpus" > "$table" 2>&1
    fi
    rc=$?
    wrong=$(grep -o "Out of bounds values : [0-9]*" "$table" | grep -o "[0-9]*$")
    echo "$t with $lib: exit $rc, wrong ${wrong:-?}" | tee -a "$out/summary.txt"
    ((rc == 0)) || status=1
  done
done
exit $status
