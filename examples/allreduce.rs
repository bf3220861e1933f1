//! The main example: all_reduce of 64 MiB of f32 on 4 ranks, on one machine with no
//! launcher and no GPU.
//!
//! Without a launcher it starts its own ranks (processes); under mpirun, srun or a
//! torchrun-style environment it is one rank of the launcher's job. Every rank checks the
//! whole result against values computed directly, and rank 0 prints the time and the bus
//! bandwidth (nccl-tests' busbw: algbw × 2(n-1)/n).
//!
//! ```text
//! cargo run --release --example allreduce                  # 4 local ranks, 64 MiB
//! cargo run --release --example allreduce -- --nranks 8 --mib 16 --iters 10
//! mpirun -np 4 target/release/examples/allreduce            # one rank per MPI process
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use oxccl::bootstrap::{config::process_env, log, spawn, Config};
use oxccl::runtime::{Communicator, ReduceOp};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("allreduce example: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Args {
    nranks: u32,
    mib: usize,
    iters: usize,
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let config = Config::from_env()?;
    log::init(&config);
    if !spawn::launched(&process_env()) {
        let start = Instant::now();
        let argv: Vec<String> = std::env::args().skip(1).collect();
        spawn::spawn_self(args.nranks, &config, &argv)?.wait(Duration::from_secs(600), Duration::from_secs(30))?;
        println!("all {} ranks passed in {:.2} s", args.nranks, start.elapsed().as_secs_f64());
        return Ok(());
    }
    let comm = Communicator::from_env(&config)?;
    let (n, rank) = (comm.nranks(), comm.rank());
    let count = args.mib * (1 << 20) / std::mem::size_of::<f32>();
    // Rank r contributes (r + 1) * (i % 1024): every sum is an integer below 2^24, exact in
    // f32 whatever order the ranks are added in.
    let send: Vec<f32> = (0..count).map(|i| ((rank + 1) * (i % 1024)) as f32).collect();
    let mut recv = vec![0f32; count];

    // One warm-up call sets up the connections; then the timed ones.
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
    let start = Instant::now();
    for _ in 0..args.iters {
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
    }
    let seconds = start.elapsed().as_secs_f64() / args.iters as f64;

    let ranks_sum = (n * (n + 1) / 2) as f32;
    if let Some((i, got)) = recv.iter().enumerate().find(|&(i, &x)| x != ranks_sum * (i % 1024) as f32) {
        return Err(format!("rank {rank}: element {i} is {got}, expected {}", ranks_sum * (i % 1024) as f32).into());
    }
    comm.finalize()?;
    if rank == 0 {
        let bytes = (count * 4) as f64;
        let algbw = bytes / seconds / 1e9;
        let busbw = algbw * 2.0 * (n - 1) as f64 / n as f64;
        println!(
            "all_reduce of {} MiB of f32 on {n} ranks: {:.2} ms per call ({} calls), algbw {algbw:.2} GB/s, busbw {busbw:.2} GB/s; result checked on every rank",
            args.mib,
            seconds * 1e3,
            args.iters
        );
    }
    Ok(())
}

fn parse_args() -> Result<Args, String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut args = Args { nranks: 4, mib: 64, iters: 5 };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next().and_then(|v| v.parse().ok()).filter(|&v: &usize| v > 0).ok_or_else(|| format!("{name} needs a positive number"))
        };
        match flag.as_str() {
            "--nranks" => args.nranks = value("--nranks")? as u32,
            "--mib" => args.mib = value("--mib")?,
            "--iters" => args.iters = value("--iters")?,
            other => return Err(format!("unknown argument {other:?} (expected --nranks N, --mib M, --iters K)")),
        }
    }
    Ok(args)
}
