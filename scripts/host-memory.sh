#!/usr/bin/env bash
# Host memory per rank: the peak resident set (VmHWM, from GNU time's %M) of every rank
# process of the main example's all_reduce, for jobs of several sizes on this machine.
#
#   scripts/host-memory.sh [OUT_DIR]          (default: a new folder under /tmp)
#
# Ranks are plain processes joined through the torchrun-style environment (RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each started under /usr/bin/time, so nothing but
# oxccl and the example is in a rank's memory (no MPI runtime, no spawner). The example
# all-reduces MIB MiB of f32 ITERS times (send and receive buffers: 2 x MIB MiB per rank)
# over shared memory, checks the result and exits. Environment: RANKS (default
# "1 8 16 32 64 128"), MIB (1), ITERS (5), EXAMPLE (target/release/examples/allreduce),
# and any oxccl setting (NCCL_BUFFSIZE, NCCL_SHM_DISABLE=1 for the socket Net, ...).
# Writes OUT_DIR/rss-N.txt (one line per rank), OUT_DIR/summary.md (a table) and
# OUT_DIR/env.txt (commit, uptime, machine).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$OXCCL_ROOT"

out="${1:-$(mktemp -d /tmp/oxccl-host-memory.XXXXXX)}"
mkdir -p "$out"
ranks_list="${RANKS:-1 8 16 32 64 128}"
mib="${MIB:-1}"
iters="${ITERS:-5}"
example="${EXAMPLE:-target/release/examples/allreduce}"
[[ -x "$example" ]] || die "$example not built (cargo build --release --example allreduce)"
[[ -x /usr/bin/time ]] || die "needs GNU time (/usr/bin/time; apt-get install time)"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"

{
    echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with uncommitted changes)')"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "uptime: $(uptime)"
    echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
    echo "command: RANKS=\"$ranks_list\" MIB=$mib ITERS=$iters scripts/host-memory.sh"
    env | grep -E '^(NCCL|OXCCL)_' | sort | sed 's/^/env: /' || true
} > "$out/env.txt"

{
    echo "| ranks | peak RSS per rank, min (MiB) | median | max | sum over ranks (MiB) | job time (s) |"
    echo "|---:|---:|---:|---:|---:|---:|"
} > "$out/summary.md"

port=$((29000 + RANDOM % 2000))
for n in $ranks_list; do
    port=$((port + 7))
    rm -f "$out/rss-$n.txt"
    start=$(date +%s.%N)
    pids=()
    for ((rank = 0; rank < n; rank++)); do
        RANK=$rank WORLD_SIZE=$n LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            /usr/bin/time -o "$out/time-$n-$rank.txt" -f "%M" "$example" --nranks "$n" --mib "$mib" --iters "$iters" \
            > "$out/log-$n-$rank.txt" 2>&1 &
        pids+=($!)
    done
    failed=0
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    for ((rank = 0; rank < n; rank++)); do
        echo "rank $rank maxrss_kib $(tail -1 "$out/time-$n-$rank.txt")" >> "$out/rss-$n.txt"
    done
    if [[ $failed != 0 ]]; then
        grep -l -i -E "error|fail" "$out"/log-"$n"-*.txt | head -1 | xargs cat >&2
        die "a rank of the $n-rank job failed (its log above; all in $out)"
    fi
    head -1 "$out/log-$n-0.txt" >> "$out/example-output.txt"
    sort -n -k4 "$out/rss-$n.txt" | awk -v n="$n" -v s="$seconds" '{ v[NR] = $4 / 1024; sum += $4 / 1024 } END {
        printf "| %d | %.1f | %.1f | %.1f | %.0f | %.1f |\n", n, v[1], v[int((NR + 1) / 2)], v[NR], sum, s }' >> "$out/summary.md"
    rm -f "$out"/time-"$n"-*.txt
    # Keep rank 0's log; the others say nothing on success.
    find "$out" -name "log-$n-*.txt" ! -name "log-$n-0.txt" -delete
done
cat "$out/env.txt" "$out/summary.md"
echo "written to $out"
