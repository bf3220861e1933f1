//! scripts/net-compare.py, which gpu-net-bench.sh runs after each test: per size the median
//! time over nccl-tests' `-N` cycles, and each library's time over the base's.

use std::path::Path;
use std::process::Command;

/// An nccl-tests table of `cycles` passes, each row `(bytes, out-of-place µs, in-place µs)`.
fn table(cycles: &[&[(u64, f64, f64)]]) -> String {
    let mut text = String::from("# nccl-tests version 2.19.6\n#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n");
    for cycle in cycles {
        for (bytes, out, inp) in *cycle {
            text += &format!("  {bytes}  {}  float  none  -1  {out}  0.00  0.00  0  {inp}  0.00  0.00  0\n", bytes / 4);
        }
    }
    text + "# Avg bus bandwidth    : 0.0\n"
}

fn run(dir: &Path, args: &[&str]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/net-compare.py");
    let out = Command::new("python3").arg(script).args(args).current_dir(dir).output().expect("python3 runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn sizes_are_compared_at_their_median_over_cycles() {
    let dir = std::env::temp_dir().join(format!("oxccl-net-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // NCCL: 20 µs at 32 B and 40 at 1 MiB; oxccl half of that, but its second cycle stalls.
    let nccl: &[(u64, f64, f64)] = &[(32, 20.0, 20.0), (1 << 20, 40.0, 40.0)];
    let stalled: &[(u64, f64, f64)] = &[(32, 90.0, 95.0), (1 << 20, 400.0, 20.0)];
    let fast: &[(u64, f64, f64)] = &[(32, 10.0, 10.0), (1 << 20, 20.0, 20.0)];
    std::fs::write(dir.join("net-2r-all_gather-nccl.txt"), table(&[nccl, nccl, nccl])).unwrap();
    std::fs::write(dir.join("net-2r-all_gather-oxccl.txt"), table(&[fast, stalled, fast])).unwrap();
    let (ok, text) = run(&dir, &[".", "2r", "all_gather", "nccl", "oxccl"]);
    assert!(ok, "{text}");
    assert!(text.contains("median of 3 cycle(s) per size"), "{text}");
    assert!(text.contains("        32    20.00/   20.00    10.00/   10.00"), "{text}");
    assert!(text.contains("oxccl/nccl: 0-128 B: x0.500 (2), 512-32K B: no sizes, 1M- B: x0.500 (2)"), "{text}");
    let (ok, text) = run(&dir, &["--ranges", "0-2M", ".", "2r", "all_gather", "nccl", "oxccl"]);
    assert!(ok && text.contains("oxccl/nccl: 0-2M B: x0.500 (4)"), "{text}");
    // A missing table is named.
    let (ok, text) = run(&dir, &[".", "2r", "all_gather", "nccl", "mpi"]);
    assert!(!ok && text.contains("net-2r-all_gather-mpi.txt"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
