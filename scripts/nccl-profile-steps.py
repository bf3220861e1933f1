#!/usr/bin/env python3
"""NCCL's proxy steps by net and size, from NCCL's example profiler plugin's traces
(NCCL_PROFILE_EVENT_MASK=16, one JSON file per rank and communicator) and the nccl-tests
outputs of the same runs (gpu-netplugin.sh's netplugin-<setting>-<test>-<net>-<round>.txt,
whose "Pid" lines say which process ran over which net). For each net, message size
(bytes of the collective) and step state (SendGpuWait, SendPeerWait, SendWait, RecvWait,
RecvFlushWait, RecvGpuWait), the median and mean µs over every step of both ranks, and the
collective's own time (COLL begin to end, median).
Usage: nccl-profile-steps.py <netplugin output folder> <trace folder>"""
import glob, json, os, re, statistics, sys
from collections import defaultdict

ELEMENT_BYTES = {"ncclInt8": 1, "ncclUint8": 1, "ncclFloat16": 2, "ncclBfloat16": 2, "ncclInt32": 4, "ncclUint32": 4, "ncclFloat32": 4, "ncclInt64": 8, "ncclUint64": 8, "ncclFloat64": 8}

if len(sys.argv) != 3:
    sys.exit(__doc__)
runs, traces = sys.argv[1], sys.argv[2]
net_of_pid = {}
for path in glob.glob(os.path.join(runs, "netplugin-*-*-*-*.txt")):
    m = re.match(r"netplugin-\w+?-\w+-(plugin|socket)-\d+\.txt$", os.path.basename(path))
    if not m:
        continue
    for line in open(path, errors="replace"):
        p = re.search(r"Rank\s+\d+ Group\s+\d+ Pid\s+(\d+)", line)
        if p:
            net_of_pid[int(p.group(1))] = m.group(1)

steps = defaultdict(list)  # (net, bytes, state) -> durations
colls = defaultdict(list)  # (net, bytes) -> durations
for path in sorted(glob.glob(os.path.join(traces, "*.json"))):
    # One event a line, the list closed by "{}]".
    events = [e for e in json.load(open(path)) if e]
    if not events:
        continue
    net = net_of_pid.get(events[0].get("pid"), "?")
    begins, spans = {}, []
    for e in events:
        key = (e.get("name"), e.get("cat"), e.get("id"))
        if e.get("ph") == "b":
            begins[key] = e
        elif e.get("ph") == "e" and key in begins:
            b = begins.pop(key)
            spans.append((b["name"], b["cat"], b["ts"], e["ts"], b.get("args", {})))
    # The collectives (COLL) and their bytes, from Count and Datatype.
    coll = sorted((s[2], s[3], s[4].get("Count", 0) * ELEMENT_BYTES[s[4].get("Datatype")]) for s in spans if s[1] == "COLL")
    for b, e, n in coll:
        colls[(net, n)].append(e - b)
    for name, cat, b, e, args in spans:
        if cat != "NET":
            continue
        owner = [n for cb, ce, n in coll if cb <= b <= ce]
        if owner:
            steps[(net, owner[-1], name)].append(e - b)

order = ["SendGpuWait", "SendPeerWait", "SendWait", "RecvWait", "RecvFlushWait", "RecvGpuWait"]
for net, n in sorted({(k[0], k[1]) for k in colls}):
    c = colls[(net, n)]
    print(f"{net:6s} {n >> 10:6d} KiB: collective median {statistics.median(c):8.1f} us over {len(c)}")
    for state in order:
        d = steps.get((net, n, state))
        if d:
            print(f"         {state:14s} median {statistics.median(d):8.1f} mean {statistics.mean(d):8.1f} us over {len(d)} steps")
