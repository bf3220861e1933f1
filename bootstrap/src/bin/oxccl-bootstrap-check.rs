//! Joins a job through the launcher's environment and checks every bootstrap operation:
//! allgather, broadcast from every root, barrier, point-to-point around the ring, and a
//! split. Prints one line per rank; exits non-zero on any failure. Use it to check that a
//! launcher setup (mpirun, srun, torchrun, NCCL_COMM_ID) works before running a real job.
//!
//! `--die-after-bootstrap R`: rank R kills itself (SIGKILL) right after joining; the other
//! ranks must then report its failure by name (exit code 3 when they do).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use oxccl_bootstrap::{log, AbortFlag, Bootstrap, Config, Error, NOCOLOR};

fn main() -> ExitCode {
    let die: Option<u32> = std::env::args().skip_while(|a| a != "--die-after-bootstrap").nth(1).and_then(|r| r.parse().ok());
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("oxccl-bootstrap-check: {e}");
            return ExitCode::from(2);
        }
    };
    log::init(&config);
    let boot = match Bootstrap::from_env(&config) {
        Ok(b) => b,
        // The dying rank may die while a slower rank is still joining: that rank's own
        // bootstrap then fails, naming it.
        Err(Error::PeerFailed { rank, phase, reason }) if die.is_some() => {
            println!("a joining rank detected failure of rank {rank} during {phase}: {reason}");
            return ExitCode::from(3);
        }
        Err(e) => {
            eprintln!("oxccl-bootstrap-check: bootstrap failed: {e}");
            return ExitCode::from(2);
        }
    };
    if die == Some(boot.rank()) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    match check(&boot) {
        Ok(summary) => {
            println!("rank {}/{} ok: {summary}", boot.rank(), boot.nranks());
            ExitCode::SUCCESS
        }
        Err(Error::PeerFailed { rank, phase, reason }) if die.is_some() => {
            println!("rank {}/{} detected failure of rank {rank} during {phase}: {reason}", boot.rank(), boot.nranks());
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("rank {}/{} check failed: {e}", boot.rank(), boot.nranks());
            ExitCode::FAILURE
        }
    }
}

fn check(boot: &Bootstrap) -> Result<String, Error> {
    let (rank, n) = (boot.rank(), boot.nranks());
    // Allgather (rank, pid, host) records and check every slot.
    let record = encode(rank, std::process::id(), &oxccl_bootstrap::host_name());
    let all = boot.allgather(&record)?;
    let mut pids = Vec::new();
    for (r, rec) in all.chunks_exact(RECORD).enumerate() {
        let (got, pid, _host) = decode(rec);
        if got != r as u32 {
            return Err(Error::InvalidArgument { what: format!("allgather slot {r} holds rank {got}") });
        }
        pids.push(pid);
    }
    // Broadcast from every root.
    for root in 0..n {
        let mut data = if rank == root { format!("from {root}").into_bytes() } else { Vec::new() };
        boot.broadcast(root, &mut data)?;
        if data != format!("from {root}").into_bytes() {
            return Err(Error::InvalidArgument { what: format!("broadcast from {root} gave {data:?}") });
        }
    }
    boot.barrier()?;
    // Point-to-point around the ring, both directions.
    if n > 1 {
        boot.send((rank + 1) % n, 7, &rank.to_le_bytes())?;
        boot.send((rank + n - 1) % n, 8, &rank.to_le_bytes())?;
        let from_prev = boot.recv((rank + n - 1) % n, 7)?;
        let from_next = boot.recv((rank + 1) % n, 8)?;
        if from_prev != ((rank + n - 1) % n).to_le_bytes() || from_next != ((rank + 1) % n).to_le_bytes() {
            return Err(Error::InvalidArgument { what: "point-to-point payloads misrouted".into() });
        }
    }
    // Split: even and odd ranks, keys reversed; the last rank opts out when n > 2.
    let color = if n > 2 && rank == n - 1 { NOCOLOR } else { (rank % 2) as i32 };
    let sub = boot.split(color, -(rank as i32), AbortFlag::new())?;
    if let Some(sub) = &sub {
        let members = boot_members(n, color);
        let expected_rank = members.iter().rev().position(|&r| r == rank).expect("member") as u32;
        if sub.rank() != expected_rank || sub.nranks() != members.len() as u32 {
            return Err(Error::InvalidArgument { what: format!("split gave {}/{}, expected {expected_rank}/{}", sub.rank(), sub.nranks(), members.len()) });
        }
        let gathered = sub.allgather(&rank.to_le_bytes())?;
        let expected: Vec<u8> = members.iter().rev().flat_map(|r| r.to_le_bytes()).collect();
        if gathered != expected {
            return Err(Error::InvalidArgument { what: "split allgather out of order".into() });
        }
        sub.barrier()?;
    }
    boot.barrier()?;
    Ok(format!("pid {} host {} pids {:?}", std::process::id(), oxccl_bootstrap::host_name(), pids))
}

fn boot_members(n: u32, color: i32) -> Vec<u32> {
    (0..n).filter(|&r| !(n > 2 && r == n - 1) && (r % 2) as i32 == color).collect()
}

const RECORD: usize = 72;

fn encode(rank: u32, pid: u32, host: &str) -> [u8; RECORD] {
    let mut rec = [0u8; RECORD];
    rec[..4].copy_from_slice(&rank.to_le_bytes());
    rec[4..8].copy_from_slice(&pid.to_le_bytes());
    let h = &host.as_bytes()[..host.len().min(RECORD - 8)];
    rec[8..8 + h.len()].copy_from_slice(h);
    rec
}

fn decode(rec: &[u8]) -> (u32, u32, String) {
    let rank = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes"));
    let pid = u32::from_le_bytes(rec[4..8].try_into().expect("4 bytes"));
    let host = String::from_utf8_lossy(&rec[8..]).trim_end_matches('\0').to_string();
    (rank, pid, host)
}
