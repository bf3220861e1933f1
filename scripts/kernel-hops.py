#!/usr/bin/env python3
"""Where a small message's hop across posed hosts goes, from both sides' records of one run:
the executor kernel's timeline (OXCCL_KERNEL_TRACE, runtime/src/gpu/timeline.rs) and the
proxy's (OXCCL_PROXY_TRACE, runtime/src/proxy/trace.rs) of two ranks. For each launch
whose traced lane 0 has one network send and one network receive (the steps' labels say
which: `>p net`, `<p net`), message k of rank r to its peer p is followed from r's kernel
publishing it (the send step's last stamp) through r's proxy seeing it (the end of its
"wait for data"), the Net's send (its isend apart where traced: over sockets the write),
p's proxy's receive ending, to p's kernel having it (the
receive step's "moved" stamp); then p's kernel ending and its next launch starting.
Kernel stamps are %globaltimer and proxy spans the host's clock: the two differ by an
offset (about a millisecond was seen). A timeline whose launches carry a clock line (lane 0
read the host's clock between two stamps after its end) pins it: the offset of each launch
is the host's reading minus the middle of the two stamps, good to within half their
difference (one read across PCIe). Then the two notices are printed apart, and the host's
issuing of a launch (its "announced" span's start on the send link) to the kernel's start.
Without clock lines only "both notices" (the proxy's notice of the kernel's post plus the
kernel's notice of the proxy's receive, one message) is an absolute duration; the single
notices print with the offset in them. "Both notices" is then
split by whether the peer kernel's receive step was polling when the data landed (its move
took longer than its rank's shortest by more than ARRIVED_NS) or found the data there (a
kernel that came late: its share is that wait, not a notice's). The proxy's times are its
spans' integer ns (`begin_ns`, `end_ns`), or where a trace lacks them microseconds since
the epoch as doubles, good to about 0.25 µs. Assumes launch k's
message is message k of its link (one message a link a launch, as small calls have).
Usage: kernel-hops.py KERNEL_RANK0.txt KERNEL_RANK1.txt PROXY_RANK0.json PROXY_RANK1.json"""

import json
import re
import statistics
import sys


def kernel_launches(path):
    """{launch number: {"t0": ns, "end": ns, "send": (peer, stamps), "recv": (peer, stamps)}} for lane 0."""
    launches, current, lane = {}, None, None
    with open(path) as f:
        for line in f:
            m = re.match(r"launch (\d+) .*: \d+ lane\(s\), started at (\d+) ns", line)
            if m:
                current = {"t0": int(m.group(2)), "steps": []}
                launches[int(m.group(1))] = current
                continue
            m = re.match(r"  clock: host (\d+) ns read between \+(\d+) and \+(\d+)", line)
            if m and current is not None:
                host, g0, g1 = (int(x) for x in m.groups())
                current["offset"] = host - (current["t0"] + (g0 + g1) // 2)
                current["clock read"] = g1 - g0
                continue
            m = re.match(r"  lane (\d+): \d+ step\(s\), start \S+, end \+?(\S+)", line)
            if m and current is not None:
                lane = int(m.group(1))
                if lane == 0 and m.group(2) != "-":
                    current["end"] = int(m.group(2))
                continue
            m = re.match(r"    step \d+ \((.*)\): (.*)", line)
            if m and current is not None and lane == 0:
                stamps = [None if s == "-" else int(s.lstrip("+")) for s in m.group(2).split()]
                current["steps"].append((m.group(1), stamps))
    for launch in launches.values():
        for label, stamps in launch.pop("steps"):
            if " net" not in label or None in stamps:
                continue
            for kind, peer in re.findall(r"([<>])(\d+)", label):
                key = "send" if kind == ">" else "recv"
                # More than one network step of a kind: not this script's case.
                launch[key] = (int(peer), stamps) if key not in launch else None
    return launches


# How much longer than its rank's shortest a receive step's move may take and still count as
# having found its data there (the shortest is a read of the lines across PCIe).
ARRIVED_NS = 500


def proxy_spans(path):
    """{(link name, span name): {message number: (begin ns, end ns)}}."""
    with open(path) as f:
        trace = json.load(f)
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = {}
    for e in trace["traceEvents"]:
        args = e.get("args", {})
        if e["ph"] == "X" and "number" in args:
            span = (args["begin_ns"], args["end_ns"]) if "end_ns" in args else (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000)
            spans.setdefault((names.get(e["tid"]), e["name"]), {})[args["number"]] = span
    return spans


def summary(name, values):
    if not values:
        return f"{name:44s} none"
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] / 1000
    return f"{name:44s} {len(values):4d}  median {statistics.median(values) / 1000:8.2f}  p10 {pick(0.1):8.2f}  p90 {pick(0.9):8.2f}  min {values[0] / 1000:8.2f}"


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    kernels = [kernel_launches(argv[0]), kernel_launches(argv[1])]
    proxies = [proxy_spans(argv[2]), proxy_spans(argv[3])]
    # Each launch's offset (host clock minus kernel clock), or where a launch has none its
    # rank's median; none at all: the single notices print with the offset in them.
    offsets, clock_reads = [], []
    for ks in kernels:
        known = [l["offset"] for l in ks.values() if "offset" in l]
        offsets.append(statistics.median_low(known) if known else None)
        clock_reads += [l["clock read"] for l in ks.values() if "clock read" in l]
    pinned = all(o is not None for o in offsets)
    saw = "published -> proxy saw it" + ("" if pinned else " (+offset)")
    has = "peer's receive done -> peer kernel has it" + ("" if pinned else " (-offset)")
    # The rows, in print order; those that need the clocks pinned only where they are.
    rows = (
        ("launch issued -> kernel start", pinned),
        ("kernel start -> send published", True),
        (saw, True),
        ("proxy saw it -> Net send done", True),
        ("  of which the isend", True),
        ("Net send done -> peer's receive done", True),
        ("isend returned -> peer's receive done", True),
        (has, True),
        ("  of which the peer kernel was waiting", pinned),
        ("  of which the data was there first", pinned),
        ("both notices (no offset)", True),
        ("  both, the peer kernel waiting", True),
        ("  both, the data there first", True),
        ("kernel end -> next launch start", True),
        ("clock read across PCIe (offset's bound x2)", True),
    )
    hops = {name: [] for name, shown in rows if shown}
    hops["clock read across PCIe (offset's bound x2)"] = clock_reads
    offset = lambda r, launch: launch.get("offset", offsets[r]) if pinned else 0
    # A receive step whose move took its rank's shortest time (within ARRIVED_NS) found its
    # lines there when it looked: its "notice" holds the time its kernel came late, not a
    # notice's. One that took longer was polling when the data landed.
    shortest = [min((l["recv"][1][2] - l["recv"][1][1] for l in ks.values() if l.get("recv")), default=0) for ks in kernels]
    for r in (0, 1):
        p = 1 - r
        waits = proxies[r].get((f"send to rank {p} channel 0", "wait for data"), {})
        sends = proxies[r].get((f"send to rank {p} channel 0", "send"), {})
        isends = proxies[r].get((f"send to rank {p} channel 0", "isend"), {})
        issued = proxies[r].get((f"send to rank {p} channel 0", "announced"), {})
        receives = proxies[p].get((f"receive from rank {r} channel 0", "receive"), {})
        for k, launch in sorted(kernels[r].items()):
            if launch.get("send") is None or launch["send"][0] != p:
                continue
            published = launch["t0"] + launch["send"][1][3] + offset(r, launch)
            hops["kernel start -> send published"].append(launch["send"][1][3])
            if pinned and k in issued:
                hops["launch issued -> kernel start"].append(launch["t0"] + offset(r, launch) - issued[k][0])
            if k + 1 in kernels[r] and "end" in launch:
                hops["kernel end -> next launch start"].append(kernels[r][k + 1]["t0"] - launch["t0"] - launch["end"])
            if k in waits:
                hops[saw].append(waits[k][1] - published)
            if k in waits and k in sends:
                hops["proxy saw it -> Net send done"].append(sends[k][1] - waits[k][1])
            if k in isends:
                hops["  of which the isend"].append(isends[k][1] - isends[k][0])
            if k in sends and k in receives:
                hops["Net send done -> peer's receive done"].append(receives[k][1] - sends[k][1])
            if k in isends and k in receives:
                hops["isend returned -> peer's receive done"].append(receives[k][1] - isends[k][1])
            peer = kernels[p].get(k)
            if k in receives and peer and peer.get("recv") and peer["recv"][0] == r:
                has_it = peer["t0"] + peer["recv"][1][2] + offset(p, peer)
                waited = peer["recv"][1][2] - peer["recv"][1][1] > shortest[p] + ARRIVED_NS
                hops[has].append(has_it - receives[k][1])
                if pinned:
                    hops["  of which the peer kernel was waiting" if waited else "  of which the data was there first"].append(has_it - receives[k][1])
                if k in waits:
                    both = waits[k][1] - published + has_it - receives[k][1]
                    hops["both notices (no offset)"].append(both)
                    hops["  both, the peer kernel waiting" if waited else "  both, the data there first"].append(both)
    if pinned:
        print("host clock - kernel clock (ms): " + ", ".join(f"rank {r} {o / 1e6:.6f}" for r, o in enumerate(offsets)))
    print(f"{'hop (us)':44s} {'n':>4s}")
    for name, values in hops.items():
        print(summary(name, values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
