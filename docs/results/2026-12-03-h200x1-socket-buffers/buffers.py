#!/usr/bin/env python3
"""Socket buffer settings (docs/results/2026-12-03-h200x1-socket-buffers): per test and
setting, each net's out-of-place busbw (geometric mean over rounds and sizes, 1-16 MiB), and
plugin/sockets (geometric mean over sizes in each round; the mean of those, and the lowest
and highest round). Reads <part>/buf-<setting>-<round>/netplugin-default-<test>-<net>-1.txt,
or <part>/other-<round>/... (the kernel's sizes). Usage: buffers.py <part>, e.g.
buffers.py 2-bytes."""
import glob, math, os, re, sys
from collections import defaultdict

root = sys.argv[1] if len(sys.argv) > 1 else "."
bw = defaultdict(dict)  # (setting, test, net, round) -> {bytes: busbw}
for path in glob.glob(os.path.join(root, "*-*/netplugin-default-*-*-1.txt")):
    folder = re.search(r"(?:buf-(.+)|other)-(\d+)/", path)
    setting, rnd = folder.group(1) or "default", folder.group(2)
    test, net = re.search(r"netplugin-default-(\w+?)-(plugin|socket)-1\.txt$", path).groups()
    for line in open(path):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit() and re.fullmatch(r"[0-9.]+", f[7]):
            bw[(setting, test, net, int(rnd))][int(f[0])] = float(f[7])

def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

settings = sorted({k[0] for k in bw}, key=lambda s: (s != "default", int(s) if s.isdigit() else 0, s))
tests = sorted({k[1] for k in bw})
print("| test | SO_SNDBUF = SO_RCVBUF | rounds | plugin GB/s | sockets GB/s | plugin / sockets (rounds' range) |")
print("|---|---|---:|---:|---:|---|")
for t in tests:
    for s in settings:
        rounds = sorted({k[3] for k in bw if k[0] == s and k[1] == t})
        per_net = {n: gmean([v for r in rounds for v in bw[(s, t, n, r)].values()]) for n in ("plugin", "socket")}
        ratios = [gmean([bw[(s, t, "plugin", r)][b] / bw[(s, t, "socket", r)][b] for b in bw[(s, t, "plugin", r)]]) for r in rounds]
        label = "kernel's (unset)" if s == "default" else f"{int(s) >> 10} KiB" if s.isdigit() else f"{s} (as written)"
        print(f"| {t} | {label} | {len(rounds)} | {per_net['plugin']:.2f} | {per_net['socket']:.2f} | {gmean(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
