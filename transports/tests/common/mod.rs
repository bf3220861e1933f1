//! Helpers for tests that run their other half in a child process: the test binary itself,
//! started again with one test selected and a role in the environment.

#![allow(dead_code)] // each test file uses its own part of this

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const ROLE_VAR: &str = "OXCCL_TRANSPORTS_TEST_ROLE";

/// The role this process plays, if it is a child started by [`ChildProcess::start`].
pub fn child_role() -> Option<String> {
    std::env::var(ROLE_VAR).ok()
}

/// A child process that is killed (and reaped) when dropped, so a failing parent leaves no
/// orphan behind.
pub struct ChildProcess {
    child: std::process::Child,
    lines: Receiver<String>,
    reaped: bool,
}

impl ChildProcess {
    /// Runs `test` of this binary in a child, as `role`, with `env` set.
    pub fn start(test: &str, role: &str, env: &[(&str, String)]) -> ChildProcess {
        let mut command = Command::new(std::env::current_exe().expect("test binary path"));
        command.args(["--exact", test, "--nocapture", "--test-threads=1"]).env(ROLE_VAR, role).stdout(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("starting the child test process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProcess { child, lines, reaped: false }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// What follows `prefix` on the first line of the child's stdout that has it (libtest
    /// prints "test child ... " before the child's first line, so it is searched for).
    pub fn read_tagged_line(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|e| panic!("no {prefix:?} line from the child within {timeout:?}: {e}"));
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_string();
            }
        }
    }

    /// Waits for the child to exit successfully; kills it and fails after `timeout`.
    pub fn wait_success(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the child") {
                self.reaped = true;
                assert!(status.success(), "child exited with {status}");
                return;
            }
            if Instant::now() > deadline {
                self.kill_and_reap();
                panic!("child still running after {timeout:?}: killed");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL without reaping: the child stays a zombie until [`reap`](Self::reap).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    pub fn reap(&mut self) {
        let _ = self.child.wait();
        self.reaped = true;
    }

    pub fn kill_and_reap(&mut self) {
        self.kill();
        self.reap();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_and_reap();
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits")).collect()
}

/// Names under /dev/shm that segments of process `pid` would have.
pub fn segments_of(pid: u32) -> Vec<String> {
    let prefix = format!("oxccl-{pid}-");
    std::fs::read_dir("/dev/shm")
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(&prefix)).collect())
        .unwrap_or_default()
}

/// The value of word `i` of a test stream: distinct per position, cheap to check.
pub fn word(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

/// `bytes` bytes of the test stream.
pub fn stream(bytes: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(bytes);
    for i in 0..bytes.div_ceil(8) {
        data.extend_from_slice(&word(i).to_le_bytes());
    }
    data.truncate(bytes);
    data
}

/// Throughput in GB/s (10^9 bytes per second), as nccl-tests reports it.
pub fn gigabytes_per_second(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e9
}
