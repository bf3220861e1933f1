#!/usr/bin/env python3
"""Summarises scripts/thread-cpu-sampler.py's samples (samples.txt or .gz) of a call that ran
nccl-tests at one size a run: per test, size and net, the mean over the call's processes of
each thread group's share of a core (user and kernel), its involuntary switches a second,
over the last half of each process's life (the timed loop; the first half holds init), and
with the tables (the run folders of the call, out-of-place and in-place mean) the time of
one operation and the NCCL proxy thread's CPU time per operation.
Usage: summary.py <call folder> (its samples.txt.gz, and its runs' */netplugin-default-*-1.txt)"""
import collections, glob, gzip, os, re, statistics, sys

tables = sys.argv[1]
path = os.path.join(tables, "samples.txt.gz")
lines = (gzip.open(path, "rt") if path.endswith(".gz") else open(path)).read().splitlines()
meta, series = {}, collections.defaultdict(list)
for line in lines:
    f = line.split()
    if f[0] == "P":
        argv = f[5:]
        meta[f[1]] = ("plugin" if f[2] == "oxccl" else "socket", os.path.basename(argv[0]).replace("_perf", ""), argv[argv.index("-b") + 1])
    elif f[0] == "S":
        series[(f[2], f[3])].append((float(f[1]), int(f[4]), int(f[5]), int(f[7]), f[9]))

def group(name, tid, pid):
    if tid == pid: return "main"
    if name.startswith("NCCL_Progress"): return "proxy"
    return None  # NCCL's other threads and CUDA's: at most 1% together, not shown

# Per process: group -> [user %, kernel %, involuntary switches/s], over the last half of its life.
shares = collections.defaultdict(list)
byproc = collections.defaultdict(dict)
for (pid, tid), s in series.items(): byproc[pid][tid] = s
for pid, threads in byproc.items():
    t0 = min(s[0][0] for s in threads.values()); t1 = max(s[-1][0] for s in threads.values())
    w0 = t1 - 0.5 * (t1 - t0)
    acc = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for tid, s in threads.items():
        a = next((x for x in s if x[0] >= w0), None); b = s[-1]
        if a is None or b[0] <= a[0]: continue
        dt = b[0] - a[0]
        name = group(b[4], tid, pid)
        if name is None: continue
        g = acc[name]
        g[0] += (b[1] - a[1]) / dt; g[1] += (b[2] - a[2]) / dt; g[2] += (b[3] - a[3]) / dt
    shares[meta[pid]].append(acc)

# Time of one operation from the tables: mean of out-of-place and in-place, over rounds.
optime = collections.defaultdict(list)
for table in glob.glob(os.path.join(tables, "*", "netplugin-default-*-1.txt")):
    m = re.search(r"netplugin-default-(\w+?)-(plugin|socket)-1.txt", table)
    for line in open(table):
        f = line.split()
        if len(f) == 13 and f[0].isdigit():
            optime[(m.group(2), m.group(1), f[0])].append((float(f[5]) + float(f[9])) / 2)

print("test        size  net     procs  op µs  proxy user%  proxy kernel%  proxy switches/s  main %  proxy CPU µs/op")
sizes = {"1M": "1048576", "16M": "16777216"}
for key in sorted(shares, key=lambda k: (k[1], int(sizes[k[2]]), k[0])):
    net, test, size = key
    accs = shares[key]
    mean = lambda g, i: statistics.mean(a[g][i] for a in accs)
    op = statistics.mean(optime[(net, test, sizes[size])])
    proxy = mean("proxy", 0) + mean("proxy", 1)
    print(f"{test:11s} {size:4s}  {net:6s}  {len(accs):5d} {op:6.0f}  {mean('proxy', 0):11.1f}  {mean('proxy', 1):13.1f}  {mean('proxy', 2):16.0f}  "
          f"{mean('main', 0) + mean('main', 1):6.1f}  {proxy / 100 * op:15.0f}")
