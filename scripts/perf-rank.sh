#!/usr/bin/env bash
# Runs one MPI rank's command ("$@") under `perf record`: cpu-clock samples of every thread
# of it, user and kernel, PERF_FREQ a second (default 4999), into
# $PERF_DIR/<NETPLUGIN_RUN, else "run">-<rank>.data. Given to gpu-netplugin.sh as
# NETPLUGIN_RANK_WRAPPER. PERF_BIN is perf (default gpu-bin/perf/perf, from
# scripts/perf-bundle.sh); its libraries in PERF_BIN's lib/ are on perf's search path
# alone (the loader's --library-path), not on the rank's.
set -euo pipefail
perf="${PERF_BIN:-$(cd "$(dirname "$0")" && pwd)/perf/perf}"
dir="${PERF_DIR:?PERF_DIR: where the samples go}"
mkdir -p "$dir"
file="$dir/${NETPLUGIN_RUN:-run}-${OMPI_COMM_WORLD_RANK:-0}.data"
exec /lib64/ld-linux-x86-64.so.2 --library-path "$(dirname "$perf")/lib" "$perf" record -q -e cpu-clock -F "${PERF_FREQ:-4999}" -o "$file" -- "$@"
