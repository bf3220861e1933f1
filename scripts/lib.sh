# shellcheck shell=bash
# Helpers shared by the scripts in scripts/ and slurm/. Source it; it defines functions and
# variables only, and changes no shell option of the caller.

# The repository root, whatever the caller's cwd: the scripts run from anywhere.
OXCCL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Messages go to stderr with the script's name, so that they stand out in cargo's output.
log() { echo "$(basename "$0"): $*" >&2; }
die() { log "$*"; exit 1; }

# Commands that need root: as root run them directly, otherwise through sudo when there is one.
as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    die "'$*' needs root and there is no sudo"
  fi
}

# Runs a command that daemonizes with none of the caller's open files: only /dev/null on
# stdin and the log file $1 on stdout/stderr. A daemon that kept an inherited descriptor
# would keep a lock held forever, or keep the pipe of whoever reads our output (CI) open so
# that it never sees the end.
detached() {
  local out=$1
  shift
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@" </dev/null >>"$out" 2>&1
  )
}

# Whether the process whose pid is in the file $1 is alive.
pidfile_alive() {
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

# The directory of the NVIDIA CUDA wheels (nvidia-cuda-nvrtc and the headers), e.g.
# <site-packages>/nvidia/cu13: libnvrtc is in its lib/, the CUDA headers in its include/.
# Prints nothing when the wheels are not installed.
nvidia_wheel_dir() {
  python3 - <<'PY' 2>/dev/null || true
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for d in sorted(pathlib.Path(root).glob("cu*")):
        if (d / "lib").is_dir():
            print(d)
            raise SystemExit
PY
}

# Several test runs may share the one-node Slurm at once (engineers on one machine): each run
# holds a lease (a file named by its pid) and the last one out stops Slurm, but only a Slurm
# that a lease holder started: one that was up before (someone's own) is left running.
slurm_leases=${TMPDIR:-/tmp}/oxccl-slurm.leases

# Starts the single-host Slurm if needed and takes a lease for the calling shell ($$).
slurm_acquire() {
  local lock_fd rc=0
  mkdir -p "$slurm_leases"
  exec {lock_fd}>"$slurm_leases/lock"
  _slurm_lock "$lock_fd" || return 1
  _slurm_prune_leases
  if ! compgen -G "$slurm_leases/lease.*" >/dev/null \
     && pidfile_alive /run/slurmctld.pid && [[ ! -e $slurm_leases/owned ]]; then
    log "Slurm was already running before this run: leaving it running afterwards"
  elif ! pidfile_alive /run/slurmctld.pid || ! pidfile_alive /run/slurmd.pid; then
    touch "$slurm_leases/owned"
  fi
  # The start script must not hand the lock to the daemons it starts.
  as_root "$OXCCL_ROOT/slurm/start-single-host.sh" {lock_fd}>&- || rc=$?
  ((rc)) || touch "$slurm_leases/lease.$$"
  exec {lock_fd}>&-
  return "$rc"
}

# Drops this shell's lease; stops Slurm when it was the last one and a lease holder started it.
slurm_release() {
  local lock_fd
  [[ -d $slurm_leases ]] || return 0
  exec {lock_fd}>"$slurm_leases/lock"
  _slurm_lock "$lock_fd" || return 1
  rm -f "$slurm_leases/lease.$$"
  _slurm_prune_leases
  if ! compgen -G "$slurm_leases/lease.*" >/dev/null && [[ -e $slurm_leases/owned ]]; then
    as_root "$OXCCL_ROOT/slurm/stop-single-host.sh" {lock_fd}>&- && rm -f "$slurm_leases/owned"
  fi
  exec {lock_fd}>&-
}

# Takes the lease lock on fd $1, giving up after 2 minutes (a run holds it only while it
# starts or stops Slurm) with an error naming the lock file.
_slurm_lock() {
  flock -w 120 "$1" && return 0
  log "could not lock $slurm_leases/lock within 120 s: its holders are $(fuser "$slurm_leases/lock" 2>/dev/null || echo unknown)"
  return 1
}

# Leases of runs that died without releasing (SIGKILL) do not count.
_slurm_prune_leases() {
  local f
  for f in "$slurm_leases"/lease.*; do
    [[ -e $f ]] || continue
    kill -0 "${f##*.}" 2>/dev/null || rm -f "$f"
  done
}
