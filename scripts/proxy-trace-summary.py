#!/usr/bin/env python3
"""Summarizes proxy timelines (OXCCL_PROXY_TRACE files, docs/NET.md): for each rank and
network link, how many spans of each kind (wait for data, send, receive) and their
median, 99th percentile and longest duration; then the longest spans of all, with when
they began (µs after the first event of all files) and on which link; then the proxy
threads' sleeps of at least 1 ms; then, given both ends' files, the operations whose
two ends were issued furthest apart: operation k of a link is the k-th announced to its
sending end ("send to rank p channel c" on rank r) and to its receiving end ("receive
from rank r channel c" on rank p), so the end issued later names the rank that was late.
Usage: proxy-trace-summary.py FILE... [--top N]"""

import json
import sys


def percentile(sorted_values, fraction):
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(fraction * (len(sorted_values) - 1) + 0.5))
    return sorted_values[index]


def main(argv):
    top = 10
    files = []
    args = iter(argv)
    for arg in args:
        if arg == "--top":
            top = int(next(args, "10"))
        else:
            files.append(arg)
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    spans = []  # (rank, track name, span name, ts, dur, args)
    for path in files:
        try:
            with open(path) as f:
                trace = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: not a proxy trace: {e}", file=sys.stderr)
            return 1
        names = {}
        for event in trace.get("traceEvents", []):
            if event.get("ph") == "M" and event.get("name") == "thread_name":
                names[(event["pid"], event["tid"])] = event["args"]["name"]
        for event in trace.get("traceEvents", []):
            if event.get("ph") == "X":
                track = names.get((event["pid"], event["tid"]), f"track {event['tid']}")
                spans.append((event["pid"], track, event["name"], event["ts"], event["dur"], event.get("args", {})))
    if not spans:
        print("no spans in these files")
        return 0
    origin = min(s[3] for s in spans)
    groups = {}
    for rank, track, name, ts, dur, _ in spans:
        groups.setdefault((rank, track, name), []).append(dur)
    print("rank  link                                        span            count    median µs    p99 µs    longest µs")
    for (rank, track, name), durations in sorted(groups.items()):
        durations.sort()
        print(f"{rank:>4}  {track:<42}  {name:<14} {len(durations):>6} {percentile(durations, 0.5):>12.1f} {percentile(durations, 0.99):>9.1f} {durations[-1]:>13.1f}")
    print(f"\nthe {top} longest spans (begin in µs after the first event):")
    for rank, track, name, ts, dur, extra in sorted((s for s in spans if s[2] != "sleep"), key=lambda s: -s[4])[:top]:
        number = extra.get("number", "")
        print(f"  rank {rank}, {track}: {name} {dur:.1f} µs from {ts - origin:.1f} (number {number}, {extra.get('bytes', '?')} bytes)")
    sleeps = [s for s in spans if s[2] == "sleep" and s[4] >= 1000.0]
    print(f"\nproxy thread sleeps of 1 ms or more: {len(sleeps)}")
    for rank, track, _, ts, dur, _ in sorted(sleeps, key=lambda s: -s[4])[:top]:
        print(f"  rank {rank}, {track}: {dur / 1000:.1f} ms from {ts - origin:.1f} µs")
    # Operation k of each link, at its two ends: (rank, peer, channel) -> number -> time.
    sends, receives = {}, {}
    for rank, track, name, ts, _, extra in spans:
        words = track.split()
        if name != "announced" or len(words) != 6 or words[2] != "rank" or words[4] != "channel":
            continue
        if words[:2] == ["send", "to"]:
            sends.setdefault((rank, int(words[3]), words[5]), {})[extra.get("number")] = ts
        elif words[:2] == ["receive", "from"]:
            receives.setdefault((int(words[3]), rank, words[5]), {})[extra.get("number")] = ts
    apart = []
    for key, sent in sends.items():
        received = receives.get(key, {})
        for k in sent.keys() & received.keys():
            apart.append((abs(sent[k] - received[k]), key, k, sent[k], received[k]))
    apart.sort(reverse=True)
    print(f"\noperations issued apart at a link's two ends ({len(apart)} seen at both): {sum(1 for a in apart if a[0] >= 1000.0)} by 1 ms or more")
    for gap, (sender, receiver, channel), k, sent, received in apart[:top]:
        late = sender if sent > received else receiver
        print(f"  rank {sender} -> rank {receiver} channel {channel}, operation {k}: {gap:.1f} µs apart, rank {late} late, from {min(sent, received) - origin:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
