//! The main example: a 4-rank job on one machine with no launcher and no GPU.
//!
//! Without a launcher it starts its own 4 ranks (processes); under mpirun, srun or a
//! torchrun-style environment it is one rank of the launcher's job. Each rank all-gathers
//! its host name and pid through the bootstrap, checks every record and rank 0 prints them.
//!
//! ```text
//! cargo run --release --example allreduce                 # 4 local ranks
//! cargo run --release --example allreduce -- --nranks 8
//! mpirun -np 4 target/release/examples/allreduce           # one rank per MPI process
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use oxccl::bootstrap::{config::process_env, log, spawn, Bootstrap, Config};

const RECORD: usize = 72;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("allreduce example: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    log::init(&config);
    if !spawn::launched(&process_env()) {
        let nranks = nranks_argument()?;
        let start = Instant::now();
        let args: Vec<String> = std::env::args().skip(1).collect();
        spawn::spawn_self(nranks, &config, &args)?.wait(Duration::from_secs(300), Duration::from_secs(10))?;
        println!("all {nranks} ranks passed in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
        return Ok(());
    }
    let boot = Bootstrap::from_env(&config)?;
    let host = oxccl::bootstrap::host_name();
    let mut record = [0u8; RECORD];
    record[..4].copy_from_slice(&boot.rank().to_le_bytes());
    record[4..8].copy_from_slice(&std::process::id().to_le_bytes());
    let h = &host.as_bytes()[..host.len().min(RECORD - 8)];
    record[8..8 + h.len()].copy_from_slice(h);

    let all = boot.allgather(&record)?;
    let mut pids = Vec::new();
    for (r, rec) in all.chunks_exact(RECORD).enumerate() {
        let rank = u32::from_le_bytes(rec[..4].try_into()?);
        let pid = u32::from_le_bytes(rec[4..8].try_into()?);
        let host = String::from_utf8_lossy(&rec[8..]).trim_end_matches('\0').to_string();
        if rank != r as u32 || pid == 0 || host.is_empty() {
            return Err(format!("record {r} is wrong: rank {rank}, pid {pid}, host {host:?}").into());
        }
        pids.push((pid, host));
    }
    let mut distinct = pids.clone();
    distinct.sort();
    distinct.dedup();
    if distinct.len() != pids.len() {
        return Err("two ranks reported the same host and pid".into());
    }
    boot.barrier()?;
    if boot.rank() == 0 {
        println!("{} ranks bootstrapped:", boot.nranks());
        for (r, (pid, host)) in pids.iter().enumerate() {
            println!("  rank {r}: host {host} pid {pid}");
        }
    }
    Ok(())
}

fn nranks_argument() -> Result<u32, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--nranks") {
        None => Ok(4),
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).filter(|&n| n > 0).ok_or_else(|| "--nranks needs a positive number".into()),
    }
}
