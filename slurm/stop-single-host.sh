#!/usr/bin/env bash
# Stops the one-node Slurm started by start-single-host.sh, by the pids in its pid files
# (never by name: other Slurm daemons on the machine are not ours). Idempotent. munged stays
# up: it is harmless and other munge users may rely on it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../scripts/lib.sh"

# slurmd first, so that slurmctld does not mark the node down on its way out.
for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
  [[ -f $pidfile ]] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    # Give it 10 s to save its state, then force.
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$(basename "$pidfile" .pid) ($pid) ignored SIGTERM: killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
done
log "slurm stopped"
