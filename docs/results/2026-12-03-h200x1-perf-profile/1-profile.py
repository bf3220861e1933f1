"""Where each rank's core went in 1-profile (perf-report.sh's tables): per run and rank, CPU
ms of the whole process, of NCCL's proxy thread ("NCCL Progress"), of the proxy in the
kernel's two copies (_copy_from_iter: send, _copy_to_iter: receive), in the rest of the
kernel, and in user mode (NCCL, the plugin, libc), and of every other thread (nccl-tests'
own, which polls its stream, and NCCL's service threads). Samples are cpu-clock at 4999 Hz
over the process's whole life, its initialization included.
    python3 1-profile.py [1-profile]"""
import collections, glob, re, sys

def rows(path, symbols):
    total, out = None, []
    for line in open(path):
        m = re.search(r"Event count \(approx.\): (\d+)", line)
        if m:
            total = int(m.group(1)) / 1e6
        if line.startswith("#") or not line.strip():
            continue
        pattern = r"\s+([\d.]+)%\s+(NCCL Progress\s*\d+|.+?)\s{2,}(\S+)" + (r"\s+\[.\]\s+(.*?)\s*$" if symbols else r"\s*$")
        m = re.match(pattern, line)
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3), m.group(4) if symbols else None))
    return total, [(p * total / 100, comm, dso, sym) for p, comm, dso, sym in out]

folder = sys.argv[1] if len(sys.argv) > 1 else "1-profile"
print("| run | rank | process ms | proxy ms | copies ms | other kernel ms | user ms | other threads ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(f"{folder}/perf-*/*.threads.txt")):
    total, threads = rows(path, False)
    _, symbols = rows(path.replace(".threads.txt", ".symbols.txt"), True)
    proxy = [(ms, dso) for ms, comm, dso, _ in threads if comm.startswith("NCCL Progress")]
    kernel = sum(ms for ms, dso in proxy if "kernel" in dso)
    user = sum(ms for ms, dso in proxy if "kernel" not in dso)
    copies = sum(ms for ms, comm, _, sym in symbols if comm.startswith("NCCL Progress") and sym in ("_copy_to_iter", "_copy_from_iter"))
    m = re.search(r"perf-(\w+)-(\d)/default-(\w+)-(plugin|socket)-1-(\d)", path)
    size, call_round, test, net, rank = m.groups()
    print(f"| {test} {size} {net} (round {call_round}) | {rank} | {total:.0f} | {kernel + user:.0f} | {copies:.0f} | {kernel - copies:.0f} | {user:.0f} | {total - kernel - user:.0f} |")
