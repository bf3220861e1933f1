//! Helpers for the multi-process tests: run commands under a hard timeout and collect
//! their output, so that a hang fails the test instead of stalling CI.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The bootstrap check program built with this crate.
pub fn check_program() -> &'static str {
    env!("CARGO_BIN_EXE_oxccl-bootstrap-check")
}

/// What one process did.
#[derive(Debug)]
pub struct Finished {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Starts every command, waits for all of them at most `timeout` (then kills the rest, whose
/// status is `None`), and returns what each printed.
pub fn run_all(commands: Vec<Command>, timeout: Duration) -> Vec<Finished> {
    let mut children: Vec<Child> = commands
        .into_iter()
        .map(|mut c| c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn"))
        .collect();
    // Drain pipes on threads so that a chatty process cannot block on a full pipe.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let (mut out, mut err) = (c.stdout.take().unwrap(), c.stderr.take().unwrap());
            std::thread::spawn(move || {
                let (mut o, mut e) = (String::new(), String::new());
                let t = std::thread::spawn(move || {
                    let _ = err.read_to_string(&mut e);
                    e
                });
                let _ = out.read_to_string(&mut o);
                (o, t.join().unwrap_or_default())
            })
        })
        .collect();
    let start = Instant::now();
    let mut status: Vec<Option<ExitStatus>> = vec![None; children.len()];
    while status.iter().any(Option::is_none) && start.elapsed() < timeout {
        for (i, c) in children.iter_mut().enumerate() {
            if status[i].is_none() {
                status[i] = c.try_wait().expect("try_wait");
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for (i, c) in children.iter_mut().enumerate() {
        if status[i].is_none() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    readers
        .into_iter()
        .zip(status)
        .map(|(r, status)| {
            let (stdout, stderr) = r.join().unwrap_or_default();
            Finished { status, stdout, stderr }
        })
        .collect()
}

/// Runs one command under a hard timeout.
pub fn run(command: Command, timeout: Duration) -> Finished {
    run_all(vec![command], timeout).pop().expect("one command")
}

/// [`oxccl_testkit::clean_command`] with a 20 s bootstrap timeout.
pub fn clean_command(program: &str) -> Command {
    let mut c = oxccl_testkit::clean_command(program);
    c.env("OXCCL_BOOTSTRAP_TIMEOUT_MS", "20000");
    c
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Asserts that every process succeeded, printing everything they said otherwise.
pub fn assert_all_ok(results: &[Finished]) {
    for (i, r) in results.iter().enumerate() {
        assert!(r.succeeded(), "process {i} failed ({:?}):\nstdout:\n{}\nstderr:\n{}", r.status, r.stdout, r.stderr);
    }
}

/// Whether a program is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {program}")).output().is_ok_and(|o| o.status.success())
}
