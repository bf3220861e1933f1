#!/usr/bin/env bash
# Text reports of every perf-rank.sh sample file in folder $1, each beside its file:
# <name>.threads.txt (share of samples by thread name and object: the program, a library,
# the kernel) and <name>.symbols.txt (by thread name, object and function, down to
# PERF_LIMIT per cent, default 0.05). Run where the samples were taken, so that perf finds
# the same binaries; PERF_BIN as for perf-rank.sh.
set -euo pipefail
perf="${PERF_BIN:-$(cd "$(dirname "$0")" && pwd)/perf/perf}"
run_perf() { /lib64/ld-linux-x86-64.so.2 --library-path "$(dirname "$perf")/lib" "$perf" "$@"; }
for data in "${1:?usage: perf-report.sh <folder of .data files>}"/*.data; do
  name="${data%.data}"
  run_perf report -i "$data" --stdio --sort comm,dso > "$name.threads.txt" 2>&1 || true
  run_perf report -i "$data" --stdio --sort comm,dso,sym --percent-limit "${PERF_LIMIT:-0.05}" > "$name.symbols.txt" 2>&1 || true
done
