//! Helpers the test suites of several crates share (a dev-dependency only): running a
//! process under a hard timeout, so that a hang fails a test instead of stalling CI, and
//! `mpirun` set up for loopback, and the skip rule of the GPU tests.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command with the environment a test job needs and nothing inherited that could
/// change its behaviour (launcher variables of an outer job, say): PATH, HOME,
/// LD_LIBRARY_PATH and TMPDIR, and `NCCL_SOCKET_IFNAME=lo`.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env_clear();
    for keep in ["PATH", "HOME", "LD_LIBRARY_PATH", "TMPDIR"] {
        if let Ok(v) = std::env::var(keep) {
            c.env(keep, v);
        }
    }
    c.env("NCCL_SOCKET_IFNAME", "lo");
    c
}

/// The GPUs a GPU test runs on, given how many the driver shows: `None` (the test says
/// "skipped" and passes) when there are none — unless OXCCL_TEST_GPU=1 (the GPU machine's
/// runner sets it), which turns a missing GPU into a failure.
pub fn gpus_or_skip(visible: usize) -> Option<usize> {
    if visible == 0 {
        assert!(std::env::var("OXCCL_TEST_GPU").as_deref() != Ok("1"), "OXCCL_TEST_GPU=1 but no GPU is visible");
        eprintln!("skipped: no GPU");
        return None;
    }
    Some(visible)
}

/// Runs `cmd` with stdout and stderr captured; kills it and panics after `timeout`.
pub fn run(mut cmd: Command, timeout: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let pid = child.id();
    let start = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if start.elapsed() > timeout {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().unwrap()
}

/// `mpirun -np n --oversubscribe` of `exe` on loopback (Open MPI's own traffic included),
/// as root if need be, exporting `NCCL_SOCKET_IFNAME=lo`, a 60 s collective timeout and the
/// variables of `env`.
pub fn mpirun(n: u32, exe: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("PMIX_MCA_ptl_tcp_if_include", "lo")
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("OXCCL_COLL_TIMEOUT_MS", "60000")
        .args(["-np", &n.to_string(), "--oversubscribe", "-x", "NCCL_SOCKET_IFNAME", "-x", "OXCCL_COLL_TIMEOUT_MS"]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(exe);
    cmd
}
