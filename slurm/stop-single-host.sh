#!/usr/bin/env bash
# Stops the one-node Slurm started by start-single-host.sh (munged stays: it is harmless).
set -euo pipefail
for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  fi
done
echo "slurm: stopped"
