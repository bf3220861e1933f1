import sys, glob, re, os
# For each compare file: latency cells 8 B..32 KiB (oxccl time / best NCCL time, want <= 1)
# and bandwidth cells from 1 MiB (best NCCL time / oxccl time, want >= 1.2).
for d in sys.argv[1:]:
    for f in sorted(glob.glob(os.path.join(d, "compare-*.txt"))):
        rows = []
        for line in open(f):
            if line.startswith("#") or not line.strip() or line.strip().startswith("bytes"): continue
            parts = line.split()
            if not parts[0].isdigit(): continue
            rows.append((int(parts[0]), [tuple(map(float, p.split("/"))) for p in parts[1:]]))
        lat_bad, bw_bad, lat_n, bw_n, bws = [], [], 0, 0, []
        for size, cols in rows:
            ox, ncs = cols[0], cols[1:]
            for k, place in enumerate(("oop", "ip")):
                best = min(c[k] for c in ncs)
                if 8 <= size <= 32768:
                    lat_n += 1
                    if ox[k] > best: lat_bad.append(f"{size}{place} {ox[k]:.2f}/{best:.2f}")
                if size >= 1 << 20:
                    bw_n += 1
                    r = best / ox[k]; bws.append(r)
                    if r < 1.2: bw_bad.append(f"{size>>20}M{place} {r:.2f}")
        name = os.path.basename(f)[8:-4]
        print(f"{name:22} lat {lat_n-len(lat_bad)}/{lat_n} ok {lat_bad}  bw {bw_n-len(bw_bad)}/{bw_n} ok (min {min(bws) if bws else 0:.2f}) {bw_bad}")
