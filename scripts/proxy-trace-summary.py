#!/usr/bin/env python3
"""Summarizes proxy timelines (OXCCL_PROXY_TRACE files, docs/NET.md): for each rank and
network link, how many spans of each kind (wait for data, send, receive) and their
median, 99th percentile and longest duration; then the longest spans of all, with when
they began (µs after the first event of all files) and on which link; then the proxy
threads' sleeps of at least 1 ms; then, given both ends' files, the operations whose
two ends were issued furthest apart: operation k of a link is the k-th announced to its
sending end ("send to rank p channel c" on rank r) and to its receiving end ("receive
from rank r channel c" on rank p), so the end issued later names the rank that was late;
then, by message size, where the time of a hop goes: "network" from the sending kernel's
post of message k (its link's wait for data ends) to the k-th receive's end at the peer
(proxy, Net, proxy), and "turnaround" from a receive's end on a rank to that rank's next
post on any link (its kernel seeing the data, finishing, the next kernel starting and
posting: the GPU's side of a call that waits on its peers, as small calls in a row do).
Usage: proxy-trace-summary.py FILE... [--top N]"""

import bisect
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
    hops(spans)
    return 0


def hops(spans):
    """Network time and GPU turnaround per message size (the docstring's last part)."""
    posts, received = {}, {}  # (sender, receiver, channel) -> [(end, bytes)] in order
    for rank, track, name, ts, dur, extra in spans:
        words = track.split()
        if len(words) != 6 or words[2] != "rank" or words[4] != "channel":
            continue
        if name == "wait for data" and words[:2] == ["send", "to"]:
            posts.setdefault((rank, int(words[3]), words[5]), []).append((ts + dur, extra.get("bytes", 0)))
        elif name == "receive" and words[:2] == ["receive", "from"] and extra.get("messages") == 1:
            received.setdefault((int(words[3]), rank, words[5]), []).append((ts + dur, extra.get("bytes", 0)))
    network, turnaround = {}, {}
    for key, sent in posts.items():
        sent.sort()
        for (post, size), (done, _) in zip(sent, sorted(received.get(key, []))):
            network.setdefault(size, []).append(done - post)
    own_posts = {}
    for (sender, _, _), sent in posts.items():
        own_posts.setdefault(sender, []).extend(end for end, _ in sent)
    for (_, receiver, _), done in received.items():
        mine = sorted(own_posts.get(receiver, []))
        for end, size in done:
            at = bisect.bisect_left(mine, end)
            if at < len(mine):
                turnaround.setdefault(size, []).append(mine[at] - end)
    if not network:
        return
    print("\nwhere a hop goes, by message size: network = sender's post to the peer's receive end; turnaround = a receive's end to the rank's next post (µs)")
    print("   bytes   messages   network median   p90   turnaround median   p90")
    for size in sorted(network):
        n, t = sorted(network[size]), sorted(turnaround.get(size, []))
        print(f"{size:>8} {len(n):>10} {percentile(n, 0.5):>16.1f} {percentile(n, 0.9):>5.1f} {percentile(t, 0.5):>19.1f} {percentile(t, 0.9):>5.1f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
