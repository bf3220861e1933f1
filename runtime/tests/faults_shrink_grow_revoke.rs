//! Communicators changing their members: survivors of a killed rank shrink it out (by
//! list, or agreeing on who failed) and carry on; a shrink keeps who shares a host; revoke
//! ends collectives waiting on every rank; a job grows by a new process.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{checked_all_reduce, start_job};
use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

/// One rank of a job (does nothing when run as an ordinary test): all_reduces until the
/// victim's death fails them, then shrinks (mode "shrink"); or grows the job by one (mode
/// "grow"); or is the new rank of a grow (OXCCL_TEST_GROW_ID).
#[test]
fn child() {
    if let Ok(id) = std::env::var("OXCCL_TEST_GROW_ID") {
        return newcomer(&id);
    }
    let Some(victim) = common::victim() else { return };
    let config = Config::from_env().unwrap();
    let comm = Communicator::from_env(&config).unwrap();
    if common::mode() == "grow" {
        grow_by_one(&comm);
        return;
    }
    common::all_reduce_until_failure(comm, victim);
}

/// The job's ranks all-reduce, then grow by one: rank 0 makes the id, broadcasts it on
/// the old communicator and starts the new process (this binary's `child` as a
/// newcomer); all run a checked all_reduce on the grown communicator.
fn grow_by_one(comm: &Communicator) {
    let n = comm.nranks();
    let mut id = if comm.rank() == 0 { comm.grow_id().unwrap().to_bytes().to_vec() } else { vec![0u8; 128] };
    comm.broadcast(&mut id, 0).unwrap();
    let id = oxccl_runtime::bootstrap::UniqueId::from_bytes(&id).unwrap();
    let newcomer = (comm.rank() == 0).then(|| {
        Command::new(std::env::current_exe().unwrap())
            .args(["child", "--exact", "--nocapture", "--test-threads", "1"])
            .env("OXCCL_TEST_GROW_ID", id.to_hex())
            .env("OXCCL_TEST_GROW_RANK", n.to_string())
            .env("OXCCL_TEST_GROW_NRANKS", (n + 1).to_string())
            .env_remove("OXCCL_RANK")
            .env_remove("OXCCL_TEST_FAULT_VICTIM")
            .spawn()
            .unwrap()
    });
    let start = Instant::now();
    let grown = comm.grow(n + 1, &id).unwrap();
    let grow_ms = start.elapsed().as_secs_f64() * 1e3;
    assert_eq!((grown.rank(), grown.nranks()), (comm.rank(), n + 1));
    checked_all_reduce(&grown);
    grown.finalize().unwrap();
    println!("rank {} of {}: grown in {grow_ms:.1} ms, all_reduce checked", grown.rank(), grown.nranks());
    if let Some(mut newcomer) = newcomer {
        assert!(newcomer.wait().unwrap().success(), "the new rank failed");
    }
    drop(grown);
    std::process::exit(6);
}

/// The new process of [`grow_by_one`]: joins the grown communicator at its rank.
fn newcomer(id: &str) {
    let id = oxccl_runtime::bootstrap::UniqueId::from_hex(id).unwrap();
    let var = |name: &str| std::env::var(name).unwrap().parse::<u32>().unwrap();
    let config = Config::from_env().unwrap();
    let comm = Communicator::init(&id, var("OXCCL_TEST_GROW_RANK"), var("OXCCL_TEST_GROW_NRANKS"), &config).unwrap();
    checked_all_reduce(&comm);
    comm.finalize().unwrap();
    println!("new rank {} of {}: joined, all_reduce checked", comm.rank(), comm.nranks());
}

/// After a rank is killed, the survivors shrink it out (NCCL_SHRINK_ABORT) and carry on:
/// an all_reduce on the new communicator is checked.
#[test]
fn survivors_shrink_and_carry_on() {
    for env in [&[][..], &[("NCCL_SHM_DISABLE", "1")][..]] {
        let (n, victim) = (4, 2);
        let job = start_job(n, victim, &[&[("OXCCL_TEST_FAULT_MODE", "shrink")], env].concat());
        let outputs = job.wait_with_output(Duration::from_secs(60)).unwrap();
        for (rank, (status, stdout)) in outputs.iter().enumerate().filter(|(r, _)| *r != victim) {
            assert_eq!(status.code(), Some(5), "rank {rank}: {status:?}\n{stdout}");
            assert!(stdout.contains("of 3: shrunk in"), "rank {rank}: {stdout}");
        }
        let reports: Vec<&str> = outputs.iter().flat_map(|(_, out)| out.lines()).filter(|l| l.contains("shrunk")).collect();
        eprintln!("{env:?}:\n{}", reports.join("\n"));
    }
}

/// Survivors of a killed rank (of 4, then of 8) shrink without naming it: they agree on
/// the failed ranks (every one must exclude exactly the victim) and run a checked
/// all_reduce on the same new communicator.
#[test]
fn survivors_shrink_without_a_list() {
    for (n, victim, env) in [(4, 1, &[][..]), (8, 5, &[("NCCL_SHM_DISABLE", "1")][..])] {
        let job = start_job(n, victim, &[&[("OXCCL_TEST_FAULT_MODE", "shrink"), ("OXCCL_TEST_FAULT_SHRINK", "agreed")], env].concat());
        let outputs = job.wait_with_output(Duration::from_secs(60)).unwrap();
        for (rank, (status, stdout)) in outputs.iter().enumerate().filter(|(r, _)| *r != victim) {
            assert_eq!(status.code(), Some(5), "rank {rank}: {status:?}\n{stdout}");
            assert!(stdout.contains(&format!("of {}: shrunk in", n - 1)), "rank {rank}: {stdout}");
        }
        let reports: Vec<&str> = outputs.iter().flat_map(|(_, out)| out.lines()).filter(|l| l.contains("shrunk")).collect();
        eprintln!("{n} ranks, rank {victim} killed, agreed shrink {env:?}:\n{}", reports.join("\n"));
    }
}

/// A shrink knows who shares each rank's host from its parent (no exchange): with ranks 0
/// and 1 on "host a" and 2, 3 and 4 on "host b" (NCCL_HOSTID), shrinking out rank 1 (by
/// list; then by agreement, once rank 1 has left) leaves each survivor the right local
/// ranks, and a checked all_reduce runs on each result.
#[test]
fn a_shrink_keeps_who_shares_a_host() {
    let id = oxccl_runtime::bootstrap::Bootstrap::create_local_id(&Config::defaults()).unwrap();
    let hosts = ["a", "a", "b", "b", "b"];
    let comms: Vec<Communicator> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..5u32)
            .map(|rank| {
                s.spawn(move || {
                    let mut config = Config::defaults();
                    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
                    config.set("NCCL_HOSTID", hosts[rank as usize]).unwrap();
                    Communicator::init(&id, rank, 5, &config).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(comms[0].local_ranks(), vec![0, 1]);
    assert_eq!(comms[3].local_ranks(), vec![2, 3, 4]);
    let shrunk: Vec<Communicator> = std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().filter(|c| c.rank() != 1).map(|c| s.spawn(move || c.shrink(&[1], false).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Old ranks 0, 2, 3, 4 are now 0, 1, 2, 3.
    let expected: [&[usize]; 4] = [&[0], &[1, 2, 3], &[1, 2, 3], &[1, 2, 3]];
    for (c, want) in shrunk.iter().zip(expected) {
        assert_eq!(c.local_ranks(), want, "rank {} of the shrunk communicator", c.rank());
    }
    std::thread::scope(|s| {
        for c in &shrunk {
            s.spawn(move || checked_all_reduce(c));
        }
    });
    // By agreement: rank 1 leaves (its communicator destroyed); the others agree it is gone.
    let mut comms = comms;
    drop(comms.remove(1));
    let agreed: Vec<(Communicator, Vec<usize>)> = std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().map(|c| s.spawn(move || c.shrink_failed(false).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((c, excluded), want) in agreed.iter().zip(expected) {
        assert_eq!(excluded, &vec![1]);
        assert_eq!(c.local_ranks(), want, "rank {} of the agreed shrink", c.rank());
    }
    std::thread::scope(|s| {
        for (c, _) in &agreed {
            s.spawn(move || checked_all_reduce(c));
        }
    });
}

/// Rank 3 revokes the communicator while ranks 0-2 wait in an all_reduce for it: their
/// calls end promptly with an error naming the revocation; the communicator then refuses
/// collectives and finalize, and split still makes a working one of all four.
#[test]
fn revoke_stops_waiting_collectives_on_every_rank() {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    let comms = Communicator::init_all(4, &config).unwrap();
    let revoked_at = Instant::now() + Duration::from_millis(300);
    let results: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let mut data = vec![1.0f32; 1 << 16];
                    let report = if comm.rank() == 3 {
                        std::thread::sleep(revoked_at - Instant::now());
                        comm.revoke().unwrap();
                        "revoked".to_string()
                    } else {
                        let e = comm.all_reduce_in_place(&mut data, ReduceOp::Sum).unwrap_err();
                        let late = Instant::now().saturating_duration_since(revoked_at);
                        assert!(e.to_string().contains("revoked by rank 3"), "rank {}: {e}", comm.rank());
                        assert!(late < Duration::from_secs(1), "rank {} returned {late:?} after the revocation", comm.rank());
                        format!("returned {:.2} ms after the revocation", late.as_secs_f64() * 1e3)
                    };
                    let refused = comm.all_reduce_in_place(&mut data, ReduceOp::Sum).unwrap_err();
                    assert!(matches!(refused, oxccl_runtime::Error::InvalidUsage { .. }), "{refused}");
                    assert!(comm.finalize().is_err());
                    let child = comm.split(0, comm.rank() as i32).unwrap().unwrap();
                    let mut x = vec![comm.rank() as u64 + 1; 10_001];
                    child.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                    assert!(x.iter().all(|&v| v == 10), "{}", x[0]);
                    format!("rank {}: {report}, split and all_reduce checked", comm.rank())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("{}", results.join("\n"));
}

/// Three ranks grow to four with a new process: the existing ranks keep their ranks and a
/// checked all_reduce runs on the grown communicator.
#[test]
fn three_ranks_grow_to_four() {
    let job = start_job(3, usize::MAX, &[("OXCCL_TEST_FAULT_MODE", "grow")]);
    let outputs = job.wait_with_output(Duration::from_secs(60)).unwrap();
    for (rank, (status, stdout)) in outputs.iter().enumerate() {
        assert_eq!(status.code(), Some(6), "rank {rank}: {status:?}\n{stdout}");
        assert!(stdout.contains(&format!("rank {rank} of 4: grown in")), "rank {rank}: {stdout}");
    }
    assert!(outputs[0].1.contains("new rank 3 of 4: joined, all_reduce checked"), "{}", outputs[0].1);
    eprintln!("{}", outputs.iter().map(|(_, o)| o.trim()).collect::<Vec<_>>().join("\n"));
}

