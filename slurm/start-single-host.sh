#!/usr/bin/env bash
# Starts a real one-node Slurm (slurmctld + slurmd, munge authentication) on this machine,
# for the srun tests. Idempotent: a running cluster is left as it is. Needs root and the
# slurm-wlm and munge packages (scripts/install-deps.sh). Stop it with stop-single-host.sh.
set -euo pipefail

conf=/etc/slurm/slurm.conf
host=$(hostname -s)

if [[ -f /run/slurmctld.pid ]] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null \
   && [[ -f /run/slurmd.pid ]] && kill -0 "$(cat /run/slurmd.pid)" 2>/dev/null \
   && sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mix|alloc'; then
  echo "slurm: already running"
  exit 0
fi

# munge: a key, and the daemon running as the munge user.
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  su -s /bin/sh munge -c /usr/sbin/munged
fi

# slurm.conf describing this machine as it is.
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
node=$(slurmd -C | head -1 | sed -E "s/^NodeName=[^ ]+/NodeName=$host/; s/ UpTime=.*//")
cat > "$conf" <<CONF
ClusterName=oxccl
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SchedulerType=sched/backfill
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

slurmctld
slurmd

for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "slurm: node $host is up"
    exit 0
  fi
  sleep 0.5
done
echo "slurm: the node did not come up within 30 s; see /var/log/slurm/*.log" >&2
sinfo >&2 || true
exit 1
