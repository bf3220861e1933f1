//! A training loop that survives a dead rank: N ranks all-reduce a model-sized gradient
//! every step; with `--kill-rank R --kill-at-step S`, rank R SIGKILLs itself at step S.
//! The survivors' all_reduce fails naming it, they shrink it out of the communicator
//! (abort first, as NCCL_SHRINK_ABORT), agree on the step to go on from (the failed
//! all_reduce may have finished on some of them: those take that step back), redistribute
//! the dead rank's share of the batch and finish. The final checksum is checked against one computed directly, and the
//! detection and shrink times are printed.
//!
//! ```text
//! cargo run --release --example ft_train -- --nranks 4 --kill-rank 2 --kill-at-step 10
//! ```
//!
//! With `--grow`, the survivors then start a replacement process and admit it with
//! `Communicator::grow` (rank 0 makes the id and broadcasts it; the replacement gets it,
//! its rank, the step and the running checksum on its command line), so that the run
//! finishes at N ranks, every one verifying the checksum.
//!
//! Without a launcher it starts its own ranks. Under a launcher it is one rank of the job,
//! but launchers end the whole job when a rank dies unless told not to (Slurm:
//! `srun --no-kill`; Open MPI 5 with ULFM: `mpirun --with-ft ulfm`).
//!
//! The batch of every step is `BATCH` samples; sample j of step s contributes h(s, j) to
//! every element (plus its index), so the reduced gradient — and the running checksum — do
//! not depend on how the samples are divided among the ranks: the survivors must produce
//! exactly the checksum of a run that lost no rank.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use oxccl::bootstrap::{config::process_env, log, spawn, Config, UniqueId};
use oxccl::runtime::{Communicator, Error, ReduceOp};

const BATCH: u64 = 64;

struct Args {
    nranks: u32,
    steps: u64,
    mib: usize,
    kill_rank: Option<usize>,
    kill_at_step: u64,
    grow: bool,
    /// Set for a replacement process: where it joins.
    join: Option<Join>,
}

/// What a replacement process needs to join a grown run.
struct Join {
    id: String,
    rank: u32,
    step: u64,
    checksum: u64,
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ft_train: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let config = Config::from_env()?;
    log::init(&config);
    if args.join.is_none() && !spawn::launched(&process_env()) {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let start = Instant::now();
        let job = spawn::spawn_self(args.nranks, &config, &argv)?;
        let results = job.wait_with_output(Duration::from_secs(600))?;
        let mut ok = true;
        for (rank, (status, _)) in results.iter().enumerate() {
            let killed = Some(rank) == args.kill_rank;
            if killed && status.code().is_none() {
                continue; // SIGKILLed, as asked
            }
            if !status.success() {
                eprintln!("ft_train: rank {rank} ended with {status}");
                ok = false;
            }
        }
        println!("job of {} ranks finished in {:.2} s", args.nranks, start.elapsed().as_secs_f64());
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }

    let (comm, step, checksum) = match &args.join {
        Some(join) => {
            let id = UniqueId::from_hex(&join.id)?;
            (Communicator::init(&id, join.rank, args.nranks, &config)?, join.step, join.checksum)
        }
        None => (Communicator::from_env(&config)?, 0, 0),
    };
    train(comm, &args, step, checksum)
}

/// Runs the steps from `step` on, with the running checksum so far.
fn train(mut comm: Communicator, args: &Args, mut step: u64, mut checksum: u64) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let me = comm.rank(); // this rank's name in the original job (or as it joined), for messages
    let len = args.mib * (1 << 20) / 8;
    let mut grad = vec![0u64; len];
    let mut lost_one = args.join.is_some();
    let mut replacement: Option<std::process::Child> = None;
    // The checksum before the last step this rank finished, to take that step back.
    let mut before_last = checksum;
    while step < args.steps {
        if args.kill_rank == Some(me) && step == args.kill_at_step && !lost_one {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        // This rank's share of the batch: samples j with j % nranks == rank.
        let (n, r) = (comm.nranks() as u64, comm.rank() as u64);
        let mine: Vec<u64> = (0..BATCH).filter(|j| j % n == r).collect();
        let sum: u64 = mine.iter().fold(0u64, |a, &j| a.wrapping_add(sample(step, j)));
        let count = mine.len() as u64;
        for (e, g) in grad.iter_mut().enumerate() {
            *g = sum.wrapping_add((e as u64).wrapping_mul(count));
        }
        let started = Instant::now();
        match comm.all_reduce_in_place(&mut grad, ReduceOp::Sum) {
            Ok(()) => {
                before_last = checksum;
                checksum = grad.iter().fold(checksum, |a, &g| a.wrapping_add(g));
                step += 1;
            }
            Err(Error::PeerFailed { rank: dead, reason, .. }) => {
                lost_one = true;
                let detected = started.elapsed();
                let shrink_start = Instant::now();
                // No list: the survivors agree on who failed.
                let (survivors, excluded) = comm.shrink_failed(true)?;
                let shrunk = shrink_start.elapsed();
                comm = survivors;
                // A collective is not atomic under a failure: the one that failed here
                // may have finished on other survivors, which are then a step ahead
                // (their next one failed). All go on from the earliest step; a rank
                // ahead takes its last step back.
                let failed_at = step;
                let mut earliest = [step];
                comm.all_reduce_in_place(&mut earliest, ReduceOp::Min)?;
                if earliest[0] < step {
                    (step, checksum) = (earliest[0], before_last);
                }
                println!(
                    "rank {me}: step {failed_at}: rank {dead} failed ({reason}); noticed in {:.1} ms, agreed on {excluded:?} and shrunk to {} ranks in {:.1} ms; going on from step {step}",
                    detected.as_secs_f64() * 1e3,
                    comm.nranks(),
                    shrunk.as_secs_f64() * 1e3
                );
                if args.grow {
                    let grow_start = Instant::now();
                    let (grown, child) = admit_replacement(&comm, args, step, checksum)?;
                    println!("rank {me}: grew back to {} ranks in {:.1} ms", grown.nranks(), grow_start.elapsed().as_secs_f64() * 1e3);
                    comm = grown;
                    replacement = child;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    comm.finalize()?;
    let expected = expected_checksum(args.steps, len);
    if checksum != expected {
        return Err(format!("rank {me}: checksum {checksum:#x}, expected {expected:#x}").into());
    }
    println!("rank {me} (now {} of {}): {} steps done, checksum {checksum:#018x} verified", comm.rank(), comm.nranks(), args.steps);
    if let Some(mut child) = replacement {
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("rank {me}: the replacement process ended with {status}").into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Grows the survivors back to `args.nranks`: rank 0 makes the id, broadcasts it and starts
/// the replacement processes (this program, told where to join); returns the grown
/// communicator and, on rank 0, the replacement to wait for.
fn admit_replacement(comm: &Communicator, args: &Args, step: u64, checksum: u64) -> Result<(Communicator, Option<std::process::Child>), Box<dyn std::error::Error>> {
    let mut id = if comm.rank() == 0 { comm.grow_id()?.to_bytes().to_vec() } else { vec![0u8; 128] };
    comm.broadcast(&mut id, 0)?;
    let id = UniqueId::from_bytes(&id)?;
    let mut child = None;
    if comm.rank() == 0 {
        // One process per missing rank; this example loses one.
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let spawned = std::process::Command::new(std::env::current_exe()?)
            .args(&argv)
            .args(["--join-id", &id.to_hex(), "--join-rank", &comm.nranks().to_string(), "--join-step", &step.to_string(), "--join-checksum", &checksum.to_string()])
            .spawn()?;
        child = Some(spawned);
    }
    Ok((comm.grow(args.nranks as usize, &id)?, child))
}

/// Sample j's contribution at step s (splitmix64).
fn sample(step: u64, j: u64) -> u64 {
    let mut z = step.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ j.wrapping_add(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The checksum of a run that divided every batch in any way: element e of step s is
/// Σ_j h(s, j) + e · BATCH.
fn expected_checksum(steps: u64, len: usize) -> u64 {
    let mut checksum = 0u64;
    for s in 0..steps {
        let total = (0..BATCH).fold(0u64, |a, j| a.wrapping_add(sample(s, j)));
        for e in 0..len as u64 {
            checksum = checksum.wrapping_add(total.wrapping_add(e.wrapping_mul(BATCH)));
        }
    }
    checksum
}

fn parse_args() -> Result<Args, String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut args = Args { nranks: 4, steps: 30, mib: 8, kill_rank: None, kill_at_step: 10, grow: false, join: None };
    let mut join_id = None;
    let (mut join_rank, mut join_step, mut join_checksum) = (None, None, None);
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        if flag == "--grow" {
            args.grow = true;
            continue;
        }
        if flag == "--join-id" {
            join_id = Some(it.next().ok_or("--join-id needs an id")?.clone());
            continue;
        }
        let mut value = |name: &str| -> Result<u64, String> { it.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number")) };
        match flag.as_str() {
            "--join-rank" => join_rank = Some(value("--join-rank")? as u32),
            "--join-step" => join_step = Some(value("--join-step")?),
            "--join-checksum" => join_checksum = Some(value("--join-checksum")?),
            "--nranks" => args.nranks = value("--nranks")? as u32,
            "--steps" => args.steps = value("--steps")?,
            "--mib" => args.mib = value("--mib")? as usize,
            "--kill-rank" => args.kill_rank = Some(value("--kill-rank")? as usize),
            "--kill-at-step" => args.kill_at_step = value("--kill-at-step")?,
            other => return Err(format!("unknown argument {other:?} (expected --nranks, --steps, --mib, --kill-rank, --kill-at-step, --grow)")),
        }
    }
    if let Some(id) = join_id {
        let missing = || "--join-id needs --join-rank, --join-step and --join-checksum".to_string();
        args.join = Some(Join { id, rank: join_rank.ok_or_else(missing)?, step: join_step.ok_or_else(missing)?, checksum: join_checksum.ok_or_else(missing)? });
    }
    if args.grow && args.kill_rank.is_none() {
        return Err("--grow replaces a killed rank: give --kill-rank too".into());
    }
    if args.nranks < 2 && args.kill_rank.is_some() {
        return Err("--kill-rank needs at least 2 ranks".into());
    }
    if args.kill_rank.is_some_and(|r| r >= args.nranks as usize) {
        return Err(format!("--kill-rank must be below --nranks {}", args.nranks));
    }
    if args.mib == 0 || args.steps == 0 {
        return Err("--mib and --steps must be positive".into());
    }
    Ok(args)
}
