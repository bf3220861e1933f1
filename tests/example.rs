//! The README's main example: 4 ranks it starts itself, a checked all_reduce, busbw printed.

use std::process::Command;
use std::time::{Duration, Instant};

/// The example binary next to this test's (cargo builds examples with the tests); built
/// on demand if missing.
fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples").join("allreduce");
    if !path.exists() {
        let profile = if dir.ends_with("release") { vec!["--release"] } else { vec![] };
        let status = Command::new(env!("CARGO")).args(["build", "--example", "allreduce"]).args(profile).status().unwrap();
        assert!(status.success());
    }
    path
}

#[test]
fn four_ranks_all_reduce_and_print_busbw() {
    let start = Instant::now();
    let out = Command::new(example()).args(["--mib", "8", "--iters", "2"]).env("NCCL_SOCKET_IFNAME", "lo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all_reduce of 8 MiB of f32 on 4 ranks") && stdout.contains("busbw") && stdout.contains("result checked on every rank"), "{stdout}");
    assert!(stdout.contains("all 4 ranks passed"), "{stdout}");
    assert!(start.elapsed() < Duration::from_secs(120));
}

#[test]
fn bad_arguments_are_named() {
    let out = Command::new(example()).args(["--mib", "zero"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mib needs a positive number"));
}
