#!/usr/bin/env bash
# Runs, on a machine with GPUs, oxccl-perf from gpu-bin/ (scripts/gpu-build.sh) on every
# GPU with NCCL (the machine's libnccl.so.2) as the same-run baseline, one table per
# collective into $OUT (or gpu-out/). NVLink multicast stays off; clocks and modes are
# never touched. GPU_BENCH_COLLECTIVES and GPU_BENCH_GPUS narrow the run; GPU_BENCH_CHECK_MAX
# (default 16M; 1G checks every row, slower) is the largest size checked, GPU_BENCH_TIMEOUT
# (300 s) each table's bound. Then the staged
# path (ranks posing as separate hosts) against NCCL's socket transport, for all_reduce and
# sendrecv up to 64 MiB (GPU_BENCH_STAGED=0 skips it). Each table also as a picture beside
# it (oxccl-perf --svg: busbw and time against size, oxccl and NCCL).
set -uo pipefail
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
status=0
for c in ${GPU_BENCH_COLLECTIVES:-all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv}; do
  case $c in
    all_reduce | sendrecv) range=(-b 8 -e 1G -f 2) ;;
    *) range=(-b 1K -e 1G -f 4) ;;
  esac
  timeout "${GPU_BENCH_TIMEOUT:-300}" "$here/oxccl-perf" "$c" "${range[@]}" -n "${GPU_BENCH_ITERS:-20}" -w 5 -c 1 --check-max "${GPU_BENCH_CHECK_MAX:-16M}" --gpus "$gpus" --baseline nccl --svg "$out/perf-$c-${gpus}gpu.svg" > "$out/perf-$c-${gpus}gpu.txt" 2>&1
  rc=$?
  echo "$c on $gpus GPUs: exit $rc" | tee -a "$out/summary.txt"
  ((rc == 0)) || status=$rc
done
if [[ ${GPU_BENCH_STAGED:-1} == 1 ]]; then
  for c in all_reduce sendrecv; do
    timeout 300 "$here/oxccl-perf" "$c" -b 8 -e 64M -f 4 -n "${GPU_BENCH_ITERS:-20}" -w 5 -c 1 --gpus "$gpus" --separate-hosts --baseline nccl --svg "$out/perf-$c-${gpus}gpu-staged.svg" > "$out/perf-$c-${gpus}gpu-staged.txt" 2>&1
    rc=$?
    echo "$c staged (separate hosts) on $gpus GPUs: exit $rc" | tee -a "$out/summary.txt"
    ((rc == 0)) || status=$rc
  done
fi
exit $status
