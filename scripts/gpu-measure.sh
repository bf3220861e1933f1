#!/usr/bin/env bash
# The GPU measurements nobody had made, oxccl beside NCCL in the same run (issue 24): GPU
# memory per communicator, communicator init time, and every collective checked element by
# element at every size up to 1 GiB. Run on the GPU machine from the repository root, with
# gpu-bin/ from scripts/gpu-build.sh (for oxccl's libnccl.so.2):
#
#   bash scripts/gpu-measure.sh                      # all stages, results in $OUT/results.tgz
#   MEASURE_STAGES="init" bash scripts/gpu-measure.sh
#
# It builds examples/c/gpu_measure.c with the machine's gcc against /usr/include/nccl.h and
# CUDA's runtime, then runs it as RANK/NRANKS processes (one rank per process), each
# configuration once with oxccl's libnccl.so.2 first on LD_LIBRARY_PATH and once with the
# machine's NCCL:
#   init    1 rank; N ranks sharing one GPU (NCCL refuses this: its error is recorded);
#           N ranks posing as hosts (NCCL_HOSTID=measure-host-RANK: oxccl stages through
#           host memory, NCCL uses its socket transport), for N in MEASURE_RANKS (2 3 4),
#           each twice: ncclCommInitRank's time, a first and a second all_reduce's time,
#           cudaMemGetInfo (device-wide) before init, after it, after the first calls and
#           after destroy, and ncclCommMemStats where the library has it.
#   check   every collective (all_reduce out of and in place, broadcast, reduce,
#           all_gather, reduce_scatter, alltoall and sendrecv as send/recv groups) at every
#           size from MEASURE_MIN (8) to MEASURE_MAX (1G) by MEASURE_FACTOR (2), each output
#           element compared with its exact value: 1 rank, 2 ranks sharing the GPU, 2 ranks
#           as hosts.
# With more than one GPU, rank r runs on GPU r % GPUs (so "sharing" only shares when
# N > GPUs). NVLink multicast stays off; clocks and modes are never touched. A budget
# (MEASURE_BUDGET_S, default 540 s: the device tool stops a call at 600) skips what would
# start after it, saying so, and a run gets at most what is left of it (MEASURE_RUN_S, default
# 300 s, at most). Writes under a temporary folder, packed into $OUT/results.tgz
# (OUT defaults to gpu-out/): summary.txt (one line per run), <stage>/<lib>-<config>/rank-R.txt
# (each rank's key=value lines), init.md (the init stage's table), env.txt, build.txt.
# MEASURE_PROGRAM runs another build of gpu_measure instead of building one (tests).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
res=$(mktemp -d)
trap 'tar czf "$out/results.tgz" -C "$res" . && echo "results in $out/results.tgz"' EXIT
export NCCL_NVLS_ENABLE=0 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/oxccl-cache}"
# One rank per process: CUDA's default hardware queues (8). 32 (what ranks as threads of one
# process need, docs/GPU.md) made 4 processes under MPS fail in cudaSetDevice with "out of
# memory" on one H100 (docs/results/2026-11-25-h100x1-socks/measure-4ranks).
oxccl_lib="${OXCCL_LIB:-$root/gpu-bin/lib}"
budget=${MEASURE_BUDGET_S:-540}
note() { echo "$*" | tee -a "$res/summary.txt"; }

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "uptime: $(uptime)"
  echo "command: MEASURE_STAGES=\"${MEASURE_STAGES:-init check}\" MEASURE_RANKS=\"${MEASURE_RANKS:-2 3 4}\" MEASURE_MAX=${MEASURE_MAX:-1G} bash scripts/gpu-measure.sh"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  echo "oxccl library: $(ls -la "$oxccl_lib/libnccl.so.2" 2>&1)"
  echo "NCCL library: $(ls -la /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>&1)"
} > "$res/env.txt"
cat "$res/env.txt"
[[ -f "$oxccl_lib/libnccl.so.2" ]] || { note "no $oxccl_lib/libnccl.so.2: run scripts/gpu-build.sh on the build machine and carry gpu-bin"; exit 1; }

program="${MEASURE_PROGRAM:-$res/gpu_measure}"
if [[ -z ${MEASURE_PROGRAM:-} ]] && ! gcc -O2 -std=gnu11 -Wall -I"$CUDA_HOME/include" "$root/examples/c/gpu_measure.c" -o "$program" \
    -L"$CUDA_HOME/lib64" -lcudart -L/usr/lib/x86_64-linux-gnu -l:libnccl.so.2 -ldl > "$res/build.txt" 2>&1; then
  note "building gpu_measure failed:"; cat "$res/build.txt"; exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
((gpus > 0)) || gpus=1

# run STAGE LIB CONFIG N HOSTS ARGS...: N rank processes of gpu_measure; HOSTS=1 gives each
# rank a host id of its own. Prints the folder of the rank files.
run() {
  local stage=$1 lib=$2 config=$3 n=$4 hosts=$5
  shift 5
  local dir="$res/$stage/$lib-$config" path="$LD_LIBRARY_PATH" pids=() rank rc=0
  if ((SECONDS > budget)); then
    note "$stage $lib $config: skipped (past the ${budget} s budget)"
    return
  fi
  mkdir -p "$dir/sync"
  [[ $lib == oxccl ]] && path="$oxccl_lib:$LD_LIBRARY_PATH"
  # A run may not outlast the budget: its processes get what is left (MEASURE_RUN_S at most).
  local limit=$((budget - SECONDS))
  ((limit > ${MEASURE_RUN_S:-300})) && limit=${MEASURE_RUN_S:-300}
  ((limit < 10)) && limit=10
  local start=$SECONDS
  for ((rank = 0; rank < n; rank++)); do
    (
      export RANK=$rank NRANKS=$n MEASURE_DIR="$dir/sync" LD_LIBRARY_PATH="$path"
      [[ $hosts == 1 ]] && export NCCL_HOSTID="measure-host-$rank"
      # Ranks as hosts on one machine: NCCL needs its socket transport (no RDMA here).
      [[ $hosts == 1 && $lib == nccl ]] && export NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
      exec timeout "$limit" "$program" "$@"
    ) > "$dir/rank-$rank.txt" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  rm -rf "$dir/sync"
  local errors
  errors=$(grep -h "error=" "$dir"/rank-*.txt | head -2 | tr '\n' ' ')
  local wrong
  # awk, not bc: the GPU machines have no bc.
  wrong=$(grep -h "total_wrong=" "$dir"/rank-*.txt | sed 's/.*total_wrong=//' | awk '{ s += $1 } END { if (NR) print s }')
  note "$stage $lib $config: exit $rc, $((SECONDS - start)) s${wrong:+, wrong $wrong}${errors:+, $errors}"
}

# value FILE KEY: the value of KEY= in a rank file.
value() { grep -o "$2=[^ ]*" "$1" | head -1 | cut -d= -f2; }
# slowest DIR KEY: the largest value of KEY over the ranks of a run.
slowest() { grep -h -o "$2=[^ ]*" "$1"/rank-*.txt | cut -d= -f2 | sort -g | tail -1; }

for stage in ${MEASURE_STAGES:-init check}; do
  case $stage in
    init)
      for repeat in 1 2; do
        for lib in oxccl nccl; do
          run init "$lib" "1rank-$repeat" 1 0 init
          for n in ${MEASURE_RANKS:-2 3 4}; do
            run init "$lib" "${n}shared-$repeat" "$n" 0 init
            run init "$lib" "${n}hosts-$repeat" "$n" 1 init
          done
        done
      done
      # Tables: per run, the device-wide drop in free memory per rank on the device, the
      # slowest rank's init and first-call times, and rank 0's ncclCommMemStats total.
      {
        echo "| library | ranks | repeat | init s (slowest rank) | first all_reduce 8 B s | second 8 B s | first 64 MiB s | GPU MiB per rank after init | after first calls | left after destroy | MemStats total MiB (rank 0, after calls) |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for dir in "$res"/init/*/; do
          name=$(basename "$dir"); lib=${name%%-*}; config=${name#*-}; r0="$dir/rank-0.txt"
          [[ -f $r0 ]] || continue
          if grep -q "error=" "$dir"/rank-*.txt; then
            echo "| $lib | ${config%-*} | ${config##*-} | failed: $(grep -h -o 'error=.*' "$dir"/rank-*.txt | head -1 | cut -c7-160) | | | | | | | |"
            continue
          fi
          n=$(value "$r0" nranks); per_device=$(( (n + gpus - 1) / gpus ))
          b=$(value "$r0" device_free_before); i=$(value "$r0" device_free_after_init)
          c=$(value "$r0" device_free_after_calls); d=$(value "$r0" device_free_after_destroy)
          stats=$(value "$r0" memstats_after_calls_total)
          [[ $stats =~ ^[0-9]+$ ]] && stats=$(awk -v s="$stats" 'BEGIN { printf "%.1f", s / 1048576 }')
          mib() { awk -v b="$b" -v x="$1" -v n="$per_device" 'BEGIN { printf "%.1f", (b - x) / 1048576 / n }'; }
          echo "| $lib | ${config%-*} | ${config##*-} | $(slowest "$dir" init_s) | $(slowest "$dir" first_allreduce_8B_s) | $(slowest "$dir" second_allreduce_8B_s) | $(slowest "$dir" first_allreduce_64MiB_s) | $(mib "$i") | $(mib "$c") | $(mib "$d") | ${stats:-?} |"
        done
      } > "$res/init.md"
      cat "$res/init.md"
      ;;
    check)
      args=(check "${MEASURE_MIN:-8}" "${MEASURE_MAX:-1G}" "${MEASURE_FACTOR:-2}")
      for lib in oxccl nccl; do
        run check "$lib" 1rank 1 0 "${args[@]}"
        run check "$lib" 2shared 2 0 "${args[@]}"
        run check "$lib" 2hosts 2 1 "${args[@]}"
      done
      ;;
    *) note "unknown stage $stage (init, check)" ;;
  esac
done
cat "$res/summary.txt"
