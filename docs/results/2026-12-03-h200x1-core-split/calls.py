#!/usr/bin/env python3
"""Sums scripts/socket-call-counter.c's counts for the NCCL proxy thread (NCCL_Progress*)
of each process of a call: send calls (send, sendmsg) and those that moved no byte, receive
calls (recv, recvmsg) that moved bytes and those that did not (EAGAIN), sched_yield calls,
and the bytes sent; then the means by test, size and net, per GB sent.
Usage: calls.py <call folder> (its runs' */<pid>.txt)"""
import collections, glob, os, statistics, sys

rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*", "[0-9]*.txt"))):
    lines = open(path).read().splitlines()
    head = lines[0].split()  # "# pid <pid> <argv0> NCCL_NET=<net>"
    test = os.path.basename(head[3]).replace("_perf", "")
    net = "plugin" if head[4] == "NCCL_NET=oxccl" else "socket"
    size = os.path.basename(os.path.dirname(path)).split("-")[1]
    calls = collections.defaultdict(lambda: (0, 0, 0))
    for line in lines[2:]:
        f = line.split("|")[0].split()
        if f[0].startswith("NCCL_Progress"):
            calls[f[2]] = (int(f[3]), int(f[4]), int(f[5]))
    sends = sum(calls[k][0] for k in ("send", "sendmsg"))
    sends_empty = sum(calls[k][1] for k in ("send", "sendmsg"))
    recvs = sum(calls[k][0] for k in ("recv", "recvmsg"))
    recvs_empty = sum(calls[k][1] for k in ("recv", "recvmsg"))
    sent = sum(calls[k][2] for k in ("send", "sendmsg"))
    rows.append((test, size, net, os.path.basename(path), sends, sends_empty, recvs - recvs_empty, recvs_empty, calls["sched_yield"][0], sent))

print("test        size  net     pid    sends (no byte)  receives moving  receives empty   yields   GB sent")
for r in sorted(rows):
    print(f"{r[0]:11s} {r[1]:4s}  {r[2]:6s}  {r[3][:-4]:6s} {r[4]:7d} ({r[5]:5d})  {r[6]:15d}  {r[7]:14d}  {r[8]:7d}  {r[9] / 1e9:7.2f}")
print()
print("per GB sent, mean over processes")
print("test        size  net     sends  receives moving  receives empty  yields")
groups = collections.defaultdict(list)
for r in rows:
    groups[r[:3]].append(r)
for key in sorted(groups):
    per = lambda i: statistics.mean(r[i] / (r[9] / 1e9) for r in groups[key])
    print(f"{key[0]:11s} {key[1]:4s}  {key[2]:6s} {per(4):6.0f}  {per(6):15.0f}  {per(7):14.0f}  {per(8):6.0f}")
