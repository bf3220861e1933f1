#!/usr/bin/env bash
# Runs oxccl-perf (gpu-bin, scripts/gpu-build.sh) on every GPU here once per variant named
# as an argument: a variant is `default` (oxccl at its defaults, with NCCL as the same-run
# baseline) or `label=NAME=VALUE[,NAME=VALUE...]` (oxccl with those settings, no baseline:
# NCCL reads NCCL_ALGO and the channel bounds too), so that settings a choice could take
# are measured side by side, in one call, before the choice is made. Tables go to $OUT (or gpu-out/) as perf-<collective>-<N>gpu-<label>.txt, one
# line per table in summary.txt.
# Knobs: VARIANT_COLLECTIVES (default all_reduce), VARIANT_MIN / VARIANT_MAX (64K / 32M,
# factor 2), VARIANT_ITERS (20), GPU_BENCH_GPUS (every GPU).
# NVLink multicast stays off; GPU clocks and modes are never touched.
set -uo pipefail
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
(($# > 0)) || { echo "usage: gpu-variants.sh default|label=NAME=VALUE[,NAME=VALUE...] ..." >&2; exit 2; }
status=0
for c in ${VARIANT_COLLECTIVES:-all_reduce}; do
  for variant in "$@"; do
    label=${variant%%=*}
    settings=()
    if [[ $variant == *=* ]]; then
      IFS=, read -ra settings <<< "${variant#*=}"
    fi
    for s in "${settings[@]}"; do
      [[ $s == *=* ]] || { echo "variant $variant: '$s' is not NAME=VALUE" >&2; exit 2; }
    done
    table="$out/perf-$c-${gpus}gpu-$label.txt"
    baseline=()
    ((${#settings[@]} == 0)) && baseline=(--baseline nccl)
    env "${settings[@]}" timeout 180 "$here/oxccl-perf" "$c" -b "${VARIANT_MIN:-64K}" -e "${VARIANT_MAX:-32M}" -f 2 -n "${VARIANT_ITERS:-20}" -w 5 -c 1 \
      --gpus "$gpus" "${baseline[@]}" > "$table" 2>&1
    rc=$?
    echo "$c on $gpus GPUs, $label (${settings[*]:-defaults}): exit $rc, $(grep -o "Out of bounds values : [0-9]*" "$table" || echo "no check line")" | tee -a "$out/summary.txt"
    ((rc == 0)) || status=$rc
  done
done
exit $status
