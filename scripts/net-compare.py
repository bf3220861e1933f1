#!/usr/bin/env python3
"""Compares the nccl-tests tables of one gpu-net-bench.sh run (net-<tag>-<test>-<lib>.txt in DIR):
per size, each library's median time over the table's cycles (nccl-tests `-N`: each cycle
prints every size again; NET_CYCLES), out-of-place / in-place; then, for each library, the
geometric mean over a range of sizes of its time over the base library's (both
placements; below 1: faster than the base). A median over cycles is what one cycle's stall
(a few in a run of small calls, 2-3x the usual time) does not move; a table of one cycle
gives its rows as they are.

Usage: net-compare.py [--ranges 0-128,512-32K,1M-] DIR TAG TEST BASE LIB...
TAG is the tables' rank tag (2r; 4r2h with 2 ranks to a posed host). A range is LOW-HIGH
in bytes (K, M, G suffixes; HIGH may be left out). Exits 1 when a table is missing or has
no rows."""

import math
import re
import statistics
import sys


def size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        raise SystemExit(f"net-compare.py: '{text}' is not a size (digits, then K, M or G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def ranges(text):
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.append((part, size(low), size(high) if high.strip() else None))
    return out


def medians(path):
    """{bytes: (out-of-place µs, in-place µs or None, cycles)} from one nccl-tests table."""
    times = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        raise SystemExit(f"net-compare.py: {path}: {e.strerror}")
    for line in lines:
        f = line.split()
        # A row: size count type redop root time algbw busbw #wrong time algbw busbw #wrong.
        if len(f) >= 13 and f[0].isdigit() and f[1].isdigit():
            try:
                out = float(f[5])
            except ValueError:
                continue
            try:
                inp = float(f[9])
            except ValueError:
                inp = None
            times.setdefault(int(f[0]), []).append((out, inp))
    if not times:
        raise SystemExit(f"net-compare.py: {path}: no rows")
    result = {}
    for bytes_, rows in times.items():
        ins = [i for _, i in rows if i is not None]
        result[bytes_] = (statistics.median(o for o, _ in rows), statistics.median(ins) if ins else None, len(rows))
    return result


def ratio(lib, base, low, high):
    logs = []
    for bytes_, (out, inp, _) in lib.items():
        if bytes_ == 0 or bytes_ < low or (high is not None and bytes_ > high) or bytes_ not in base:
            continue
        b_out, b_in, _ = base[bytes_]
        if b_out > 0:
            logs.append(math.log(out / b_out))
        if inp is not None and b_in:
            logs.append(math.log(inp / b_in))
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else (None, 0)


def main(argv):
    spans = ranges("0-128,512-32K,1M-")
    if argv[:1] == ["--ranges"]:
        spans, argv = ranges(argv[1]), argv[2:]
    if len(argv) < 5:
        raise SystemExit(__doc__)
    directory, tag, test, base, libs = argv[0], argv[1], argv[2], argv[3], argv[4:]
    tables = {lib: medians(f"{directory}/net-{tag}-{test}-{lib}.txt") for lib in [base] + libs}
    names = [base] + libs
    cycles = max(c for t in tables.values() for _, _, c in t.values())
    print(f"# {test}, {tag}: µs per call, out-of-place / in-place, median of {cycles} cycle(s) per size")
    print(f"{'bytes':>10} " + " ".join(f"{n[-17:]:>17}" for n in names))
    for bytes_ in sorted(tables[base]):
        cells = []
        for n in names:
            row = tables[n].get(bytes_)
            cells.append(f"{row[0]:8.2f}/{row[1]:8.2f}" if row and row[1] is not None else f"{row[0]:8.2f}/{'N/A':>8}" if row else " " * 17)
        print(f"{bytes_:>10} " + " ".join(cells))
    print(f"# time / {base}'s, geometric mean over both placements (cells)")
    for lib in libs:
        parts = []
        for name, low, high in spans:
            r, n = ratio(tables[lib], tables[base], low, high)
            parts.append(f"{name} B: " + (f"x{r:.3f} ({n})" if r is not None else "no sizes"))
        print(f"{lib}/{base}: " + ", ".join(parts))


if __name__ == "__main__":
    main(sys.argv[1:])
