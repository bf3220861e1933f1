#!/usr/bin/env python3
"""Samples the CPU time of every thread of the processes whose name ends in `_perf`
(nccl-tests), every 0.1 s, until it is killed: one line a thread a sample,

    S <seconds> <pid> <tid> <utime ticks> <stime ticks> <voluntary> <involuntary> <cpu> <name>

and, once a process, `P <pid> <NCCL_NET> <NCCL_HOSTID> <Cpus_allowed_list> <argv...>`.
Ticks are /proc's clock ticks (os.sysconf("SC_CLK_TCK"), 100 a second on Linux). Written
for the GPU machine (which has no perf or strace): which thread of a rank spends its core,
in user or kernel mode, and how often it is switched out. $1: the output file."""
import os
import sys
import time


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def main():
    out = open(sys.argv[1], "w", buffering=1)
    out.write(f"# clock ticks a second: {os.sysconf('SC_CLK_TCK')}\n")
    seen = set()
    start = time.monotonic()
    while True:
        now = time.monotonic() - start
        for pid in filter(str.isdigit, os.listdir("/proc")):
            name = (read(f"/proc/{pid}/comm") or "").strip()
            if not name.endswith("_perf"):
                continue
            if pid not in seen:
                env = dict(e.split("=", 1) for e in (read(f"/proc/{pid}/environ") or "").split("\0") if "=" in e)
                status = read(f"/proc/{pid}/status") or ""
                allowed = next((l.split()[1] for l in status.splitlines() if l.startswith("Cpus_allowed_list")), "?")
                argv = (read(f"/proc/{pid}/cmdline") or "").replace("\0", " ").strip()
                out.write(f"P {pid} {env.get('NCCL_NET', '-')} {env.get('NCCL_HOSTID', '-')} {allowed} {argv}\n")
                seen.add(pid)
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                stat = read(f"/proc/{pid}/task/{tid}/stat")
                status = read(f"/proc/{pid}/task/{tid}/status")
                if not stat or not status:
                    continue
                # The name is in parentheses and may hold spaces: fields follow the last ')'.
                tname = stat[stat.index("(") + 1:stat.rindex(")")].replace(" ", "_")
                fields = stat[stat.rindex(")") + 2:].split()
                utime, stime, cpu = fields[11], fields[12], fields[36]
                switches = {l.split(":")[0]: l.split()[1] for l in status.splitlines() if "ctxt_switches" in l}
                out.write(f"S {now:.2f} {pid} {tid} {utime} {stime} {switches.get('voluntary_ctxt_switches', '?')} "
                          f"{switches.get('nonvoluntary_ctxt_switches', '?')} {cpu} {tname}\n")
        time.sleep(0.1)


main()
