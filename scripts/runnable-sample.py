#!/usr/bin/env python3
"""How many threads the machine has runnable while a benchmark runs, to tell whether
polling threads outnumber the cores: samples the count of runnable threads (the fourth
field of /proc/loadavg, less this sampler) every 0.5 ms until SIGTERM or SIGINT, and, at
most every 20 ms while more are runnable than the machine has cores, which threads they
are (those in state R in /proc/*/task/*/stat, by name with digits dropped). Then prints
one summary: the samples, the cores, the mean, median, 99th percentile and largest count,
the share of samples above the cores, and the names most often runnable then; and, read
every 100 ms from the same files, the CPU seconds (user and system) the benchmark's
threads spent, summed by name: the threads of processes whose name ends in `_perf`
(nccl-tests) and every thread named `oxccl-*` (where the cores' time went: proxy threads,
socket helpers, the test's own threads).

Usage: runnable-sample.py [label] & ...; kill -TERM $!
It also stops when the process that started it is gone (a killed benchmark script).
"""
import os
import re
import signal
import sys
import time
from collections import Counter

label = sys.argv[1] if len(sys.argv) > 1 else "run"
parent = os.getppid()
cores = os.cpu_count() or 1
counts = []
names = Counter()
scans = 0
stop = False


def on_signal(_signum, _frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)


TICKS = os.sysconf("SC_CLK_TCK")
# The benchmark's threads, by thread id: (name with digits dropped, CPU ticks last read).
spent = {}


def threads():
    """(process name, thread id, thread name, stat fields after the name) of every thread."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                process = f.read().strip()
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # pid (comm) state ...: comm may hold spaces and parentheses.
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
            yield process, int(tid), name, rest.split()


def runnable_names():
    """Names of the threads in state R now, digits dropped (oxccl-proxy-3 -> oxccl-proxy-)."""
    return [re.sub(r"\d+", "", name) for _, tid, name, fields in threads() if fields[0] == "R" and tid != os.getpid()]


def read_spent():
    """Updates `spent` with the CPU ticks of the benchmark's threads (utime + stime: the
    12th and 13th fields after the name)."""
    for process, tid, name, fields in threads():
        if process.endswith("_perf") or name.startswith("oxccl-"):
            spent[tid] = (re.sub(r"\d+", "", name), int(fields[11]) + int(fields[12]))


last_scan = 0.0
last_spent = 0.0
with open("/proc/loadavg") as loadavg:
    while not stop:
        if time.monotonic() - last_spent > 0.1:
            read_spent()
            last_spent = time.monotonic()
            stop = stop or os.getppid() != parent
        loadavg.seek(0)
        running = int(loadavg.read().split()[3].split("/")[0]) - 1
        counts.append(running)
        now = time.monotonic()
        if running > cores and now - last_scan > 0.02:
            names.update(runnable_names())
            scans += 1
            last_scan = time.monotonic()
        time.sleep(0.0005)

if not counts:
    print(f"{label}: no sample")
    sys.exit(0)
ordered = sorted(counts)
over = sum(1 for c in counts if c > cores)
by_name = Counter()
for name, ticks in spent.values():
    by_name[name] += ticks
cpu = ", ".join(f"{name} {ticks / TICKS:.2f}" for name, ticks in by_name.most_common(8)) or "-"
top = ", ".join(f"{name} {n / scans:.1f}" for name, n in names.most_common(8)) if scans else "-"
print(
    f"{label}: {len(counts)} samples, {cores} cores, runnable mean {sum(counts) / len(counts):.1f} "
    f"median {ordered[len(ordered) // 2]} p99 {ordered[int(len(ordered) * 0.99)]} max {ordered[-1]}, "
    f"above the cores {100 * over / len(counts):.1f}% of samples; runnable then (threads a scan, {scans} scans): {top}; "
    f"CPU seconds by thread: {cpu}"
)
