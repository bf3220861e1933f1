//! Starting the ranks of a job on this machine, for programs that run without a launcher
//! (the examples, the benchmarks, the tests): the parent creates the id and serves its root,
//! each child gets `OXCCL_RANK`, `OXCCL_NRANKS`, `OXCCL_LOCAL_RANK` and `OXCCL_UNIQUE_ID`.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::config::{Config, Env};
use crate::error::{Error, Result};
use crate::Bootstrap;

/// Whether some launcher (or our own spawner) started this process as one rank of a job.
pub fn launched(env: &Env) -> bool {
    matches!(crate::launcher::detect(env), Ok(Some(_)) | Err(_))
}

/// Ranks started by [`spawn`]; killed when dropped unless waited for.
pub struct LocalJob {
    children: Vec<Child>,
}

/// Starts `nranks` copies of `command` (program, arguments and environment as the caller
/// set them), each told its rank through the environment. The parent serves the root: keep
/// it alive until the children have bootstrapped (waiting for them does that).
pub fn spawn(nranks: u32, config: &Config, command: impl Fn(u32) -> Command) -> Result<LocalJob> {
    if nranks == 0 {
        return Err(Error::invalid("a job needs at least one rank"));
    }
    let id = Bootstrap::create_local_id(config)?;
    let mut job = LocalJob { children: Vec::with_capacity(nranks as usize) };
    for rank in 0..nranks {
        let mut cmd = command(rank);
        cmd.env("OXCCL_RANK", rank.to_string())
            .env("OXCCL_NRANKS", nranks.to_string())
            .env("OXCCL_LOCAL_RANK", rank.to_string())
            .env("OXCCL_UNIQUE_ID", id.to_hex());
        let child = cmd.spawn().map_err(|e| Error::io(format!("starting rank {rank} ({cmd:?})"), e))?;
        job.children.push(child);
    }
    Ok(job)
}

/// Re-runs the current executable with `args` as every rank.
pub fn spawn_self(nranks: u32, config: &Config, args: &[String]) -> Result<LocalJob> {
    let exe = std::env::current_exe().map_err(|e| Error::io("finding the current executable", e))?;
    spawn(nranks, config, |_| {
        let mut cmd = Command::new(&exe);
        cmd.args(args);
        cmd
    })
}

impl LocalJob {
    /// Process ids of the ranks, in rank order.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits for every rank to exit, at most `timeout`. When a rank fails, the others get
    /// `grace` to fail on their own (they learn of the failure through the bootstrap) before
    /// they are killed. The error names every rank that failed and how.
    pub fn wait(mut self, timeout: Duration, grace: Duration) -> Result<()> {
        let start = Instant::now();
        let mut status: Vec<Option<ExitStatus>> = vec![None; self.children.len()];
        let mut first_failure: Option<Instant> = None;
        loop {
            for (rank, child) in self.children.iter_mut().enumerate() {
                if status[rank].is_none() {
                    status[rank] = child.try_wait().map_err(|e| Error::io(format!("waiting for rank {rank}"), e))?;
                    if status[rank].is_some_and(|s| !s.success()) && first_failure.is_none() {
                        first_failure = Some(Instant::now());
                    }
                }
            }
            if status.iter().all(Option::is_some) {
                break;
            }
            let out_of_time = start.elapsed() >= timeout || first_failure.is_some_and(|t| t.elapsed() >= grace);
            if out_of_time {
                self.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let failed: Vec<String> = status
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_some_and(|s| s.success()))
            .map(|(rank, s)| match s {
                Some(s) => format!("rank {rank} {s}"),
                None => format!("rank {rank} killed after {:?}", start.elapsed()),
            })
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Error::Aborted { reason: format!("local job failed: {}", failed.join(", ")) })
        }
    }

    /// Waits for every rank to exit, at most `timeout` (then kills the rest), and returns
    /// each rank's exit status and what it wrote to stdout (empty unless the command piped
    /// it). Unlike [`LocalJob::wait`], a failing rank is not an error: the caller looks.
    pub fn wait_with_output(mut self, timeout: Duration) -> Result<Vec<(ExitStatus, String)>> {
        use std::io::Read;
        let readers: Vec<_> = self
            .children
            .iter_mut()
            .map(|c| {
                let out = c.stdout.take();
                std::thread::spawn(move || {
                    let mut text = String::new();
                    if let Some(mut out) = out {
                        let _ = out.read_to_string(&mut text);
                    }
                    text
                })
            })
            .collect();
        let start = Instant::now();
        let mut status: Vec<Option<ExitStatus>> = vec![None; self.children.len()];
        while status.iter().any(Option::is_none) && start.elapsed() < timeout {
            for (rank, child) in self.children.iter_mut().enumerate() {
                if status[rank].is_none() {
                    status[rank] = child.try_wait().map_err(|e| Error::io(format!("waiting for rank {rank}"), e))?;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        let mut results = Vec::new();
        for ((rank, child), reader) in self.children.iter_mut().enumerate().zip(readers) {
            let s = match status[rank] {
                Some(s) => s,
                None => child.wait().map_err(|e| Error::io(format!("waiting for rank {rank}"), e))?,
            };
            results.push((s, reader.join().unwrap_or_default()));
        }
        Ok(results)
    }

    fn kill(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LocalJob {
    fn drop(&mut self) {
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
