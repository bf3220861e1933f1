"""Per test and size over the rounds of a part (2-rounds, 3-nobind): geometric means of each
net's bus bandwidth and of their ratio, with a 95% interval of the ratio's geometric mean (t over the rounds,
on a log scale).
    python3 rounds.py [2-rounds | 3-nobind]"""
import re, glob, math, statistics as st, sys, collections
# Student's t, 97.5th percentile, by degrees of freedom (2.0 beyond the table).
T = {4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 19: 2.093, 29: 2.045}
data = collections.defaultdict(list)
by_round = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob((sys.argv[1] if len(sys.argv) > 1 else "2-rounds") + '/*round-*/netplugin-compare.txt'):
    test = None
    for line in open(f):
        m = re.match(r'# \[default\] (\S+):', line)
        if m: test = m.group(1); continue
        p = line.split()
        if len(p) == 4:
            data[(test, int(p[0]))].append((float(p[1]), float(p[2])))
            by_round[test][f].append(math.log(float(p[1]) / float(p[2])))
def interval(logs):
    n = len(logs); mu = st.mean(logs); se = st.stdev(logs) / math.sqrt(n); t = T.get(n - 1, 2.0)
    return math.exp(mu), math.exp(mu - t * se), math.exp(mu + t * se)
print('| test | size | rounds | plugin GB/s | NCCL sockets GB/s | plugin / sockets (95% interval) |')
print('|---|---:|---:|---:|---:|---|')
for (test, size), rows in sorted(data.items()):
    g = lambda xs: math.exp(st.mean(math.log(x) for x in xs))
    r, lo, hi = interval([math.log(a / b) for a, b in rows])
    print(f'| {test} | {size >> 20} MiB | {len(rows)} | {g(a for a, _ in rows):.2f} | {g(b for _, b in rows):.2f} | {r:.3f} ({lo:.3f}–{hi:.3f}) |')
print()
print('| test | rounds | plugin / sockets, geometric mean over the sizes (95% interval) | rounds\' range |')
print('|---|---:|---|---|')
for test, rounds in sorted(by_round.items()):
    logs = [st.mean(v) for v in rounds.values()]
    r, lo, hi = interval(logs)
    print(f'| {test} | {len(logs)} | {r:.3f} ({lo:.3f}–{hi:.3f}) | {math.exp(min(logs)):.2f}–{math.exp(max(logs)):.2f} |')
