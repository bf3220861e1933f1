//! Helpers the fault tests (faults_*.rs) share: jobs whose ranks are processes of the test
//! binary itself, re-run with its `child` test as the filter and the fault to play in the
//! environment, the loop of all_reduces such a rank runs until a peer's fault reaches it,
//! and a checked all_reduce. And what this process's proxy threads did (the tests of
//! their sleep, net_grouping.rs and gpu_collectives/).

#![allow(dead_code)] // each test file uses its own part of this

use std::process::Command;
use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

/// The rank a fault hits, when this process is a rank of a job [`start_job`] started
/// (`None` when the `child` test runs as an ordinary test).
pub fn victim() -> Option<usize> {
    let victim = std::env::var("OXCCL_TEST_FAULT_VICTIM").ok()?;
    Some(victim.parse().unwrap())
}

/// The fault mode of this rank's job (OXCCL_TEST_FAULT_MODE): "shrink", "stop",
/// "stop-detect", "grow"; empty for the plain kill.
pub fn mode() -> String {
    std::env::var("OXCCL_TEST_FAULT_MODE").unwrap_or_default()
}

/// Starts `n` ranks of this binary's `child`, the fault hitting `victim`, on loopback with a
/// 20 s collective timeout; `env` adds to or overrides that.
pub fn start_job(n: u32, victim: usize, env: &[(&str, &str)]) -> oxccl_runtime::bootstrap::spawn::LocalJob {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    // The root is served here: it takes the job's knobs (its timeouts) too.
    for (name, value) in env.iter().filter(|(name, _)| !name.starts_with("OXCCL_TEST_")) {
        config.set(name, value).unwrap();
    }
    oxccl_runtime::bootstrap::spawn::spawn(n, &config, |_| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["child", "--exact", "--nocapture", "--test-threads", "1"])
            .env("OXCCL_TEST_FAULT_VICTIM", victim.to_string())
            .env("NCCL_SOCKET_IFNAME", "lo")
            .env("OXCCL_COLL_TIMEOUT_MS", "20000")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped());
        cmd
    })
    .unwrap()
}

/// Kills `victim` (stopped, it never exits) once every other rank has exited.
pub fn reap_when_survivors_exit(pids: Vec<u32>, victim: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let exited = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')));
        let deadline = Instant::now() + Duration::from_secs(25);
        while Instant::now() < deadline && !pids.iter().enumerate().all(|(r, &p)| r == victim || exited(p)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: kill(2) reads and writes no memory of this process. The pid is the
        // victim's, a child of this process that is stopped: it has not exited, so it has
        // not been reaped and its number names no other process.
        unsafe { libc::kill(pids[victim] as i32, libc::SIGKILL) };
    })
}

/// A rank of a job: all-reduces until a collective fails, the victim dying at step
/// OXCCL_TEST_FAULT_STEP (default 20) without any goodbye (SIGKILL), or hanging (SIGSTOP)
/// in mode "stop-detect". A survivor prints how long its failing call took and exits 3;
/// in mode "shrink" it shrinks the dead rank out first (by the error's rank, or by
/// agreement with OXCCL_TEST_FAULT_SHRINK=agreed), checks an all_reduce on the survivors'
/// communicator and exits 5.
pub fn all_reduce_until_failure(comm: Communicator, victim: usize) {
    let stop = mode() == "stop-detect";
    let kill_step: u64 = std::env::var("OXCCL_TEST_FAULT_STEP").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut data = vec![1.0f32; 1 << 16];
    for step in 0u64.. {
        if comm.rank() == victim && step == kill_step {
            // Die without any goodbye, as a crashed node does; or hang, as a stopped one.
            // SAFETY: kill(2) of this very process reads and writes no memory; dying (or
            // stopping) here is the point.
            unsafe { libc::kill(libc::getpid(), if stop { libc::SIGSTOP } else { libc::SIGKILL }) };
        }
        let start = Instant::now();
        if let Err(e) = comm.all_reduce_in_place(&mut data, ReduceOp::Sum) {
            println!("rank {} step {step}: failed after {} ms: {e}", comm.rank(), start.elapsed().as_millis());
            if mode() == "shrink" {
                let oxccl_runtime::Error::PeerFailed { rank: dead, .. } = e else { panic!("not a peer failure: {e}") };
                let start = Instant::now();
                let survivors = if std::env::var("OXCCL_TEST_FAULT_SHRINK").as_deref() == Ok("agreed") {
                    // No list: the survivors agree on who failed.
                    let (survivors, excluded) = comm.shrink_failed(true).unwrap();
                    assert_eq!(excluded, vec![dead as usize], "rank {}: agreed on {excluded:?}, the error named rank {dead}", comm.rank());
                    survivors
                } else {
                    comm.shrink(&[dead as usize], true).unwrap()
                };
                let shrink_ms = start.elapsed().as_secs_f64() * 1e3;
                let mut x = vec![comm.rank() as u64 + 1; 100_003];
                survivors.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                let expected: u64 = (0..comm.nranks() as u64).filter(|&r| r != dead as u64).map(|r| r + 1).sum();
                assert!(x.iter().all(|&v| v == expected), "after shrink: {} expected {expected}", x[0]);
                survivors.finalize().unwrap();
                println!("rank {} now rank {} of {}: shrunk in {shrink_ms:.2} ms, all_reduce checked", comm.rank(), survivors.rank(), survivors.nranks());
                // Leave with a goodbye (destroying both communicators), as a finished rank
                // does: exiting without one looks like a crash to the ranks still working.
                drop(survivors);
                drop(comm);
                std::process::exit(5);
            }
            std::process::exit(3);
        }
        data.fill(1.0);
    }
}

/// All-reduces `rank + 1` and checks the sum.
pub fn checked_all_reduce(comm: &Communicator) {
    let n = comm.nranks() as u64;
    let mut x = vec![comm.rank() as u64 + 1; 100_003];
    comm.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
    assert!(x.iter().all(|&v| v == n * (n + 1) / 2), "rank {}: {} expected {}", comm.rank(), x[0], n * (n + 1) / 2);
}

/// What this process's proxy threads do in 500 ms with nothing to do, measured once 100 ms
/// have passed for their last polls to end: their voluntary context switches (each sleep is
/// one) and their CPU time in clock ticks. The sleeps are the measurement's window, not a
/// wait for a condition.
pub fn proxy_threads_idle() -> (u64, u64) {
    std::thread::sleep(Duration::from_millis(100));
    let (switches, ticks) = proxy_threads();
    std::thread::sleep(Duration::from_millis(500));
    let (later_switches, later_ticks) = proxy_threads();
    (later_switches - switches, later_ticks - ticks)
}

/// This process's proxy threads (`oxccl-proxy-*`) so far: their voluntary context switches
/// (each sleep is one) and their CPU time in clock ticks (user and system).
fn proxy_threads() -> (u64, u64) {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .filter_map(|t| t.ok())
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("oxccl-proxy")))
        .map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let sleeps = status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
            // Fields 14 and 15 of stat, counted after the command's closing parenthesis.
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let fields: Vec<u64> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect());
            (sleeps, fields.iter().sum::<u64>())
        })
        .fold((0, 0), |(a, b), (s, c)| (a + s, b + c))
}
