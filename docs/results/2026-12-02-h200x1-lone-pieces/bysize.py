#!/usr/bin/env python3
"""Time per call by size of NCCL over the plugin and over its own sockets, from
gpu-netplugin.sh's output folders, grouped by the plugin build or kind the folders' names
give (`<part>-<build>-<round>`, e.g. `bn-base-2`, `def-r8-1`): for each group and test, the
geometric mean over its rounds of the plugin's time (µs, out of place and in place
averaged) at each size, and of the plugin's time over the sockets' time in the same round
(below 1: the plugin takes less time), then that ratio's geometric mean over the sizes
and its lowest and highest round.
Usage: bysize.py <folder>..."""
import glob, math, os, re, sys


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def table(path):
    rows = {}
    for line in open(path):
        cols = line.split()
        if len(cols) >= 12 and cols[0].isdigit() and not line.startswith("#"):
            rows[int(cols[0])] = (float(cols[5]) + float(cols[9])) / 2
    return rows


groups = {}
for folder in sys.argv[1:]:
    name = os.path.basename(os.path.normpath(folder))
    m = re.match(r"(.+)-(\d+)$", name)
    group = m.group(1) if m else name
    for path in sorted(glob.glob(os.path.join(folder, "netplugin-*-plugin-*.txt"))):
        m = re.match(r"netplugin-\w+?-(\w+)-plugin-(\d+)\.txt$", os.path.basename(path))
        if not m:
            continue
        test, run = m.groups()
        socket = os.path.join(folder, f"netplugin-default-{test}-socket-{run}.txt")
        if not os.path.exists(socket):
            continue
        plugin, sockets = table(path), table(socket)
        sizes = sorted(set(plugin) & set(sockets))
        if sizes:
            groups.setdefault(group, {}).setdefault(test, []).append({s: (plugin[s], plugin[s] / sockets[s]) for s in sizes})

for group, tests in groups.items():
    print(f"{group}")
    for test, rounds in sorted(tests.items()):
        sizes = sorted(set.intersection(*(set(r) for r in rounds)))
        times = " ".join(f"{geomean([r[s][0] for r in rounds]):9.1f}" for s in sizes)
        ratios = " ".join(f"{geomean([r[s][1] for r in rounds]):6.3f}" for s in sizes)
        per_round = [geomean([r[s][1] for s in sizes]) for r in rounds]
        print(f"  {test:15s} {len(rounds)} rounds, sizes {sizes[0] >> 10} KiB-{sizes[-1] >> 20} MiB")
        print(f"    plugin us  {times}")
        print(f"    plug/sock  {ratios}   geomean {geomean(per_round):.3f} (rounds {min(per_round):.3f}-{max(per_round):.3f})")
