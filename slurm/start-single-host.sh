#!/usr/bin/env bash
# Starts a real one-node Slurm (slurmctld + slurmd, munge authentication) on this machine,
# for the srun tests. Idempotent: daemons already running are left as they are. Needs root
# and the slurm-wlm and munge packages (scripts/install-deps.sh). Stop: stop-single-host.sh.
#
# Everything talks over loopback (NodeAddr 127.0.0.1), so no Slurm traffic targets another
# interface of this machine. Exits non-zero, with the daemons' log tails, when the node is
# not idle within OXCCL_SLURM_START_TIMEOUT seconds (default 60).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../scripts/lib.sh"

conf=/etc/slurm/slurm.conf
ctld_pid=/run/slurmctld.pid
slurmd_pid=/run/slurmd.pid
logs=/var/log/slurm
timeout=${OXCCL_SLURM_START_TIMEOUT:-60}

main() {
  [[ $(id -u) -eq 0 ]] || die "needs root (it writes /etc/slurm and starts daemons)"
  for c in munged slurmctld slurmd sinfo; do
    command -v "$c" >/dev/null || die "$c missing: run scripts/install-deps.sh"
  done
  start_munge
  write_config
  started=0
  start_daemons
  wait_for_idle_node
}

# munge authenticates every Slurm message: a key readable only by the munge user, and munged
# running as that user (no systemd here to do it).
start_munge() {
  mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 700 /etc/munge
  chmod 400 /etc/munge/munge.key
  if ! pidfile_alive /run/munge/munged.pid; then
    detached /var/log/munge/munged.start.log su -s /bin/sh munge -c /usr/sbin/munged || die "munged did not start; see /var/log/munge/munged.log"
  fi
  munge -n | unmunge >/dev/null || die "munge does not round-trip a credential; see /var/log/munge/munged.log"
}

# slurm.conf describing this machine as it is: its short hostname, and the CPUs, boards,
# sockets, cores, threads and memory that slurmd itself detects (a node configured with more
# than it has would be drained). Rewritten only when it changes, since running daemons would
# have to be told.
write_config() {
  local host hardware new
  host=$(hostname -s)
  # `slurmd -C` prints "NodeName=<host> CPUs=.. Boards=.. ... RealMemory=.." then "UpTime=..".
  hardware=$(slurmd -C | sed -n 's/^NodeName=[^ ]* //p' | head -1)
  [[ $hardware == *CPUs=* ]] || die "slurmd -C did not describe this machine: $(slurmd -C 2>&1)"
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$logs"
  new=$(cat <<CONF
# Written by slurm/start-single-host.sh: a one-node cluster for oxccl's srun tests.
ClusterName=oxccl
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# No cgroups in containers: track processes by parentage and bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
# A node that went down (daemon restarts) comes back by itself.
ReturnToService=2
SlurmdTimeout=60
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$ctld_pid
SlurmdPidFile=$slurmd_pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
SchedulerType=sched/backfill
NodeName=$host NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
)
  if [[ ! -f $conf ]] || [[ $(cat "$conf") != "$new" ]]; then
    printf '%s\n' "$new" > "$conf"
    # Daemons started with an older file must read the new one.
    if pidfile_alive "$ctld_pid"; then
      log "slurm.conf changed: restarting the running daemons"
      "$(dirname "$0")/stop-single-host.sh" >/dev/null
    fi
  fi
}

# slurmctld first: slurmd registers with it. Both daemonize and write their pid files.
start_daemons() {
  if ! pidfile_alive "$ctld_pid"; then
    detached "$logs/slurmctld.start.log" slurmctld || fail "slurmctld did not start"
    started=1
  fi
  if ! pidfile_alive "$slurmd_pid"; then
    detached "$logs/slurmd.start.log" slurmd || fail "slurmd did not start"
    started=1
  fi
}

wait_for_idle_node() {
  local host state deadline=$((SECONDS + timeout))
  host=$(hostname -s)
  while ((SECONDS < deadline)); do
    # %T is the node's state; a trailing '*' means it does not respond, '~'/'#' power
    # states: only a plain idle (or busy with someone's job) node takes steps.
    state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    case $state in
      idle|mixed|allocated)
        # A restarted slurmctld reports the node state it saved before slurmd has even
        # registered: after starting a daemon, only a real step proves the node takes work.
        if ((started == 0)) || timeout 10 srun -n 1 -t 1 true >/dev/null 2>&1; then
          log "node $host is $state"
          return 0
        fi ;;
      down|drained|draining)
        # ReturnToService=2 brings a node back on registration; nudge it for older states.
        scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  fail "node $host not idle after ${timeout}s (sinfo says: '${state:-no answer}')"
}

fail() {
  log "$*"
  sinfo >&2 2>&1 || true
  for f in "$logs/slurmctld.log" "$logs/slurmd.log"; do
    [[ -f $f ]] && { echo "--- last lines of $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}

main "$@"
