#!/usr/bin/env bash
# The proxy's idle wait, before (be3b7a4) and after (NEW_COMMIT): 8 ranks under mpirun
# posing as 2 hosts (posed-host.sh), all_reduce 8 B-1 MiB, the model's choice and
# NCCL_ALGO=tree, in rounds that alternate the two binaries (oxccl-perf of each commit).
# Usage: ab.sh OUT_DIR OLD_PERF NEW_PERF ROUNDS NEW_COMMIT
set -euo pipefail
out=$1 old=$2 new=$3 rounds=${4:-3} new_commit=${5:-2b7e2b9}
here=$(cd "$(dirname "$0")" && pwd)
for round in $(seq 1 "$rounds"); do
  for algo in model tree; do
    for build in old new; do
      perf=$old commit=be3b7a4
      [[ $build == new ]] && perf=$new commit=$new_commit
      env=()
      [[ $algo == model ]] || env=(-x NCCL_ALGO=$algo)
      file="$out/$algo-$build-$round.txt"
      {
        echo "# command: mpirun -np 8 --oversubscribe --bind-to none -x NCCL_SOCKET_IFNAME ${env[*]} posed-host.sh oxccl-perf all_reduce -b 8 -e 1M -f 8 -n 200 -w 20 -c 1 --blocking 1"
        echo "# commit: $commit"
        echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        echo "# machine: $(nproc) cores, $(uname -sr)"
        echo "# uptime before: $(uptime)"
        mpirun --allow-run-as-root -np 8 --oversubscribe --bind-to none -x NCCL_SOCKET_IFNAME "${env[@]}" "$here/posed-host.sh" "$perf" all_reduce -b 8 -e 1M -f 8 -n 200 -w 20 -c 1 --blocking 1 2>&1
        echo "# uptime after: $(uptime)"
      } > "$file"
      echo "$file done"
    done
  done
done
