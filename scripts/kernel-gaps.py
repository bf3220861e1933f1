#!/usr/bin/env python3
"""A GPU-side comparison of small calls in a row, oxccl's kernels against NCCL's, from the
kernels' own clocks (%globaltimer): how long each launch ran and how long the GPU took from
one launch's end to the next one's start, by call. Reads oxccl's kernel timelines
(OXCCL_KERNEL_TRACE files: "launch N <what>: ... started at T ns", lane 0's end) and the
traces of NCCL's example profiler plugin (NCCL_PROFILE_DUMP_FILE, with the collective and
kernel-channel events in its mask, NCCL_PROFILE_EVENT_MASK=66: a "COLL" event per call
with its count, algorithm and protocol, then a "KernelCh" event per channel with
StartGpuClk and StopGpuClk). A launch's time is its first lane's or channel's start to its
end; the gap, from that end to the next launch's start in the same process. Per file and
call, the count of launches and the medians (10th-90th percentiles) in µs.
Usage: kernel-gaps.py FILE..."""

import json
import re
import statistics
import sys


def oxccl_launches(path):
    """[(what, start ns, end ns)] in launch order, from an oxccl kernel timeline."""
    launches, current = [], None
    with open(path) as f:
        for line in f:
            m = re.match(r"launch (\d+) (.*): \d+ lane\(s\), started at (\d+) ns", line)
            if m:
                current = [m.group(2), int(m.group(3)), None]
                launches.append(current)
                continue
            m = re.match(r"  lane 0: \d+ step\(s\), start \S+, end \+?(\S+)", line)
            if m and current is not None and m.group(1) != "-":
                current[2] = current[1] + int(m.group(1))
    return [tuple(l) for l in launches if l[2] is not None]


def nccl_launches(path):
    """[(what, start ns, end ns)] ordered by start, from an NCCL example-profiler trace: each
    call's earliest channel start and latest channel stop."""
    with open(path) as f:
        text = f.read()
    events = json.loads(text)
    calls, current = [], None
    for e in events:
        if e.get("cat") == "COLL" and e.get("ph") == "b":
            a = e.get("args", {})
            current = {"what": f"{e['name']} count {a.get('Count')} {a.get('Algorithm')}/{a.get('Protocol')} {a.get('nChannels')} ch", "start": None, "end": None}
            calls.append(current)
        elif e.get("name") == "KernelCh" and e.get("ph") == "b" and current is not None:
            a = e.get("args", {})
            start, stop = a.get("StartGpuClk", 0), a.get("StopGpuClk", 0)
            if start and stop:
                current["start"] = start if current["start"] is None else min(current["start"], start)
                current["end"] = stop if current["end"] is None else max(current["end"], stop)
    done = [(c["what"], c["start"], c["end"]) for c in calls if c["start"] is not None]
    return sorted(done, key=lambda c: c[1])


def spread(values):
    values = sorted(values)
    if not values:
        return "-"
    pick = lambda q: values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]
    return f"{statistics.median(values) / 1000:.2f} ({pick(0.1) / 1000:.2f}-{pick(0.9) / 1000:.2f})"


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    for path in paths:
        try:
            launches = oxccl_launches(path)
            if not launches:
                launches = nccl_launches(path)
        except (OSError, ValueError) as e:
            print(f"{path}: not a kernel timeline or profiler trace: {e}", file=sys.stderr)
            return 1
        print(f"{path}: {len(launches)} launches")
        print(f"  {'call':<48} {'launches':>8}  {'run µs median (p10-p90)':<26} gap to the next launch µs")
        by_what = {}
        for i, (what, start, end) in enumerate(launches):
            entry = by_what.setdefault(what, ([], []))
            entry[0].append(end - start)
            if i + 1 < len(launches):
                entry[1].append(launches[i + 1][1] - end)
        for what, (runs, gaps) in by_what.items():
            print(f"  {what:<48} {len(runs):>8}  {spread(runs):<26} {spread(gaps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
