#!/usr/bin/env python3
"""Time per call of NCCL over the plugin and over its own sockets, from gpu-netplugin.sh's
output folders: for each folder given, test and net, the geometric mean of the times (µs,
out of place and in place, every size of the table) of each round, their geometric mean,
and per test the plugin's over the sockets' (below 1: the plugin takes less time). Where
the folders' names say which plugin build ran (`-new`, `-old`), the rounds of each build
together at the end: geometric mean (lowest-highest round) and the ratio.
Usage: geomean.py <folder>..."""
import glob, math, os, re, sys


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


builds = {}
for folder in sys.argv[1:]:
    rounds = {}
    for path in sorted(glob.glob(os.path.join(folder, "netplugin-*-*-*-*.txt"))):
        m = re.match(r"netplugin-\w+?-(\w+)-(plugin|socket)-(\d+)\.txt$", os.path.basename(path))
        if not m:
            continue
        test, net, _ = m.groups()
        times = []
        for line in open(path):
            cols = line.split()
            if len(cols) >= 12 and cols[0].isdigit() and not line.startswith("#"):
                times += [float(cols[5]), float(cols[9])]
        if times:
            rounds.setdefault(test, {}).setdefault(net, []).append(geomean(times))
            build = re.search(r"-(new|old)\b", os.path.basename(os.path.normpath(folder)))
            if build:
                builds.setdefault((test, build.group(1), net), []).append(geomean(times))
    print(folder)
    for test, nets in sorted(rounds.items()):
        means = {net: geomean(v) for net, v in nets.items()}
        for net, v in sorted(nets.items()):
            print(f"  {test:14s} {net:7s} rounds " + " ".join(f"{x:8.2f}" for x in v) + f"   mean {means[net]:8.2f} us")
        if len(means) == 2:
            print(f"  {test:14s} plugin/socket {means['plugin'] / means['socket']:.3f}")

if builds:
    print("by build: plugin and sockets, geometric mean of the rounds (lowest-highest), plugin/socket")
    for test in sorted({t for t, _, _ in builds}):
        cells = []
        for build in ("new", "old"):
            plugin, socket = builds.get((test, build, "plugin")), builds.get((test, build, "socket"))
            if plugin and socket:
                cells.append(f"{build}: {geomean(plugin):6.2f} ({min(plugin):.1f}-{max(plugin):.1f}) / {geomean(socket):6.2f} ({min(socket):.1f}-{max(socket):.1f}) = {geomean(plugin) / geomean(socket):.3f}")
        print(f"  {test:12s} " + " | ".join(cells))
