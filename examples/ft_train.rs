//! A training loop that survives a dead rank: N ranks all-reduce a model-sized gradient
//! every step; with `--kill-rank R --kill-at-step S`, rank R SIGKILLs itself at step S.
//! The survivors' all_reduce fails naming it, they shrink it out of the communicator
//! (abort first, as NCCL_SHRINK_ABORT), redistribute its share of the batch, redo the step
//! and finish. The final checksum is checked against one computed directly, and the
//! detection and shrink times are printed.
//!
//! ```text
//! cargo run --release --example ft_train -- --nranks 4 --kill-rank 2 --kill-at-step 10
//! ```
//!
//! Without a launcher it starts its own ranks. Under a launcher it is one rank of the job,
//! but launchers end the whole job when a rank dies unless told not to (Slurm:
//! `srun --no-kill`; Open MPI 5 with ULFM: `mpirun --with-ft ulfm`).
//!
//! The batch of every step is `BATCH` samples; sample j of step s contributes h(s, j) to
//! every element (plus its index), so the reduced gradient — and the running checksum — do
//! not depend on how the samples are divided among the ranks: the survivors must produce
//! exactly the checksum of a run that lost no rank.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use oxccl::bootstrap::{config::process_env, log, spawn, Config};
use oxccl::runtime::{Communicator, Error, ReduceOp};

const BATCH: u64 = 64;

struct Args {
    nranks: u32,
    steps: u64,
    mib: usize,
    kill_rank: Option<usize>,
    kill_at_step: u64,
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
    if !spawn::launched(&process_env()) {
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

    let mut comm = Communicator::from_env(&config)?;
    let me = comm.rank(); // this rank's name in the original job, for messages
    let len = args.mib * (1 << 20) / 8;
    let mut grad = vec![0u64; len];
    let mut checksum = 0u64;
    let mut step = 0;
    while step < args.steps {
        if args.kill_rank == Some(comm.rank()) && step == args.kill_at_step && comm.nranks() == args.nranks as usize {
            // SAFETY: raising a signal at ourselves has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
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
                checksum = grad.iter().fold(checksum, |a, &g| a.wrapping_add(g));
                step += 1;
            }
            Err(Error::PeerFailed { rank: dead, reason, .. }) => {
                let detected = started.elapsed();
                let shrink_start = Instant::now();
                let survivors = comm.shrink(&[dead as usize], true)?;
                let shrunk = shrink_start.elapsed();
                println!(
                    "rank {me}: step {step}: rank {dead} failed ({reason}); noticed in {:.1} ms, shrunk to {} ranks in {:.1} ms; redoing the step",
                    detected.as_secs_f64() * 1e3,
                    survivors.nranks(),
                    shrunk.as_secs_f64() * 1e3
                );
                comm = survivors;
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
    Ok(ExitCode::SUCCESS)
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
    let mut args = Args { nranks: 4, steps: 30, mib: 8, kill_rank: None, kill_at_step: 10 };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> { it.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number")) };
        match flag.as_str() {
            "--nranks" => args.nranks = value("--nranks")? as u32,
            "--steps" => args.steps = value("--steps")?,
            "--mib" => args.mib = value("--mib")? as usize,
            "--kill-rank" => args.kill_rank = Some(value("--kill-rank")? as usize),
            "--kill-at-step" => args.kill_at_step = value("--kill-at-step")?,
            other => return Err(format!("unknown argument {other:?} (expected --nranks, --steps, --mib, --kill-rank, --kill-at-step)")),
        }
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
