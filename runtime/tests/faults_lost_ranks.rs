//! A rank lost in the middle of collectives: one that dies (SIGKILL) fails every
//! survivor's collective within the bound with an error naming it (no hang), over shared
//! memory and over the Net; abort from another thread ends a collective stuck on a stopped
//! (SIGSTOP) peer, and the heartbeats find one; a rank that left normally, or one a
//! receive waits for that never sent, is not waited for until the collective timeout.

mod common;

use std::time::{Duration, Instant};

use common::{reap_when_survivors_exit, start_job};
use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

/// One rank of a job (does nothing when run as an ordinary test): all_reduces until the
/// victim's fault fails them, or (mode "stop") with a watchdog that aborts.
#[test]
fn child() {
    let Some(victim) = common::victim() else { return };
    let config = Config::from_env().unwrap();
    let comm = Communicator::from_env(&config).unwrap();
    if common::mode() == "stop" {
        stopped_peer(&comm, victim);
        return;
    }
    common::all_reduce_until_failure(comm, victim);
}

/// The victim stops (SIGSTOP: a hung process, which no socket notices); each survivor's
/// watchdog thread aborts the communicator after 300 ms without progress, and the stuck
/// collective must return within a second of the abort.
fn stopped_peer(comm: &Communicator, victim: usize) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let epoch = Instant::now();
    let progress = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let aborted_at = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let idle = epoch.elapsed().as_millis() as u64 - progress.load(Ordering::Acquire);
                if idle > 300 && aborted_at.load(Ordering::Acquire) == 0 {
                    aborted_at.store(epoch.elapsed().as_micros() as u64, Ordering::Release);
                    comm.abort();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut data = vec![1.0f32; 1 << 16];
        for step in 0.. {
            if comm.rank() == victim && step == 20 {
                // SAFETY: raise(3) reads and writes no memory of this process; stopping
                // here is the point.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            progress.store(epoch.elapsed().as_millis() as u64, Ordering::Release);
            if let Err(e) = comm.all_reduce_in_place(&mut data, ReduceOp::Sum) {
                // A survivor may hear of another survivor's exit before its own watchdog fires.
                let at = aborted_at.load(Ordering::Acquire);
                let since_abort = if at == 0 { 0 } else { (epoch.elapsed().as_micros() as u64).saturating_sub(at) };
                println!("rank {} step {step}: returned {} us after abort{}: {e}", comm.rank(), since_abort, if at == 0 { " (before its own)" } else { "" });
                done.store(true, Ordering::Release);
                std::process::exit(4);
            }
        }
    });
}

/// Starts `n` ranks, `victim` SIGKILLed at step 20 (the job's `env` added), and checks that
/// every survivor's collective failed within 5 s naming it.
fn killed_rank(n: u32, victim: usize, env: &[(&str, &str)]) {
    let start = Instant::now();
    let job = start_job(n, victim, env);
    let outputs = job.wait_with_output(Duration::from_secs(60)).unwrap();
    let elapsed = start.elapsed();
    for (rank, (status, stdout)) in outputs.iter().enumerate() {
        if rank == victim {
            continue;
        }
        assert_eq!(status.code(), Some(3), "rank {rank} did not report the failure: {status:?}\n{stdout}");
        assert!(stdout.contains(&format!("rank {victim}")), "rank {rank}'s error does not name rank {victim}: {stdout}");
        let ms: u64 = stdout.split("failed after ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).unwrap();
        assert!(ms < 5_000, "rank {rank} took {ms} ms to notice: {stdout}");
    }
    let reports: Vec<&str> = outputs.iter().map(|(_, out)| out.trim()).filter(|o| o.contains("failed after")).collect();
    eprintln!("{n} ranks, rank {victim} killed, {env:?}: every survivor failed naming it; job over in {elapsed:?}:\n{}", reports.join("\n"));
}

#[test]
fn a_killed_rank_fails_every_survivor_over_shared_memory() {
    killed_rank(4, 2, &[]);
}

#[test]
fn a_killed_rank_fails_every_survivor_over_the_net() {
    killed_rank(4, 1, &[("NCCL_SHM_DISABLE", "1")]);
}

#[test]
fn abort_ends_collectives_stuck_on_a_stopped_rank() {
    let (n, victim) = (4, 3);
    let job = start_job(n, victim, &[("OXCCL_TEST_FAULT_MODE", "stop"), ("OXCCL_COLL_TIMEOUT_MS", "60000")]);
    // The stopped rank never exits by itself: it is killed once the survivors have exited.
    let reaper = reap_when_survivors_exit(job.pids(), victim);
    let outputs = job.wait_with_output(Duration::from_secs(20)).unwrap();
    reaper.join().unwrap();
    for (rank, (status, stdout)) in outputs.iter().enumerate().filter(|(r, _)| *r != victim) {
        assert_eq!(status.code(), Some(4), "rank {rank}: {status:?}\n{stdout}");
        let us: u64 = stdout.split("returned ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
        assert!(us < 1_000_000, "rank {rank} returned {us} us after its abort: {stdout}");
        // Its own abort, or a survivor that aborted and exited first: either way the
        // error names no fault of the stopped rank's that the survivor could not see.
        let survivor_left = (0..n as usize).filter(|&r| r != victim && r != rank).any(|r| stdout.contains(&format!("rank {r} failed")));
        assert!(stdout.contains("aborted") || stdout.contains("(before its own)") || survivor_left, "{stdout}");
    }
    let reports: Vec<&str> = outputs.iter().map(|(_, out)| out.trim()).filter(|o| o.contains("after abort")).collect();
    eprintln!("stopped rank {victim}:\n{}", reports.join("\n"));
}

/// A stopped rank closes no socket: the heartbeats find it. With a 1 s heartbeat timeout
/// every survivor's collective fails within a few seconds, naming it.
#[test]
fn heartbeats_find_a_stopped_rank() {
    let (n, victim) = (4, 1);
    let start = Instant::now();
    let job = start_job(n, victim, &[("OXCCL_TEST_FAULT_MODE", "stop-detect"), ("OXCCL_HEARTBEAT_TIMEOUT_MS", "1000"), ("OXCCL_COLL_TIMEOUT_MS", "60000")]);
    let pids = job.pids();
    let reaper = reap_when_survivors_exit(pids, victim);
    let outputs = job.wait_with_output(Duration::from_secs(30)).unwrap();
    reaper.join().unwrap();
    for (rank, (status, stdout)) in outputs.iter().enumerate().filter(|(r, _)| *r != victim) {
        assert_eq!(status.code(), Some(3), "rank {rank}: {status:?}\n{stdout}");
        assert!(stdout.contains(&format!("rank {victim} stopped answering")) || stdout.contains(&format!("rank {victim} failed")), "rank {rank}: {stdout}");
        let ms: u64 = stdout.split("failed after ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).unwrap();
        assert!(ms < 5_000, "rank {rank} took {ms} ms: {stdout}");
    }
    let reports: Vec<&str> = outputs.iter().map(|(_, out)| out.trim()).filter(|o| o.contains("failed after")).collect();
    eprintln!("stopped rank {victim} found by heartbeats in {:?}:\n{}", start.elapsed(), reports.join("\n"));
}

/// Configurations for ranks linked by shared memory and by the Net (`true`), each with a
/// collective timeout (60 s) far above what the tests allow for a failure to show.
fn shm_and_net() -> [(bool, Config); 2] {
    [false, true].map(|net| {
        let mut config = Config::defaults();
        config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
        config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
        config.set("NCCL_SHM_DISABLE", if net { "1" } else { "0" }).unwrap();
        (net, config)
    })
}

/// A rank that leaves normally while the others still wait for it — its program made one
/// all_reduce fewer — ends their waits with an error naming it within about a second,
/// not at OXCCL_COLL_TIMEOUT_MS (60 s here): over shared memory the rank waiting on it
/// sees it gone from the job (and tells the others), over the network the proxy sees its
/// connection end.
#[test]
fn a_rank_that_left_is_not_waited_for() {
    use oxccl_runtime::Error;
    for (net, config) in shm_and_net() {
        let comms = Communicator::init_all(3, &config).unwrap();
        let outcomes: Vec<Option<(Error, Duration)>> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .map(|comm| {
                    s.spawn(move || {
                        let mut data = vec![1.0f32; 4096];
                        comm.all_reduce_in_place(&mut data, ReduceOp::Sum).unwrap();
                        if comm.rank() == 2 {
                            return None; // leaves: the communicator is dropped
                        }
                        let start = Instant::now();
                        let e = comm.all_reduce_in_place(&mut data, ReduceOp::Sum).expect_err("rank 2 left");
                        Some((e, start.elapsed()))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut said_left = false;
        for (rank, (e, took)) in outcomes.into_iter().flatten().enumerate() {
            assert!(matches!(e, Error::PeerFailed { rank: 2, .. }), "net {net}, rank {rank}: {e}");
            assert!(took < Duration::from_secs(5), "net {net}, rank {rank}: failed after {took:?}");
            said_left |= e.to_string().contains("left the job");
            eprintln!("net {net}, rank {rank}: failed after {:.1} ms: {e}", took.as_secs_f64() * 1e3);
        }
        assert!(said_left || net, "no rank said that rank 2 left");
    }
}

/// A receive from a rank that leaves without ever sending (the link was never connected,
/// so no connection ends to tell the proxy) fails naming that rank instead of waiting for
/// the collective timeout: over shared memory and over the Net.
#[test]
fn a_receive_from_a_rank_that_left_is_not_waited_for() {
    use oxccl_runtime::Error;
    for (net, config) in shm_and_net() {
        let mut comms = Communicator::init_all(2, &config).unwrap().into_iter();
        let (comm, leaver) = (comms.next().unwrap(), comms.next().unwrap());
        let (result, took) = std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(leaver);
            });
            let start = Instant::now();
            let mut data = vec![0u8; 1 << 16];
            (comm.recv(&mut data, 1), start.elapsed())
        });
        let e = result.expect_err("rank 1 never sends");
        eprintln!("net {net}: the receive failed after {:.1} ms: {e}", took.as_secs_f64() * 1e3);
        assert!(matches!(e, Error::PeerFailed { rank: 1, .. }), "net {net}: {e}");
        assert!(took < Duration::from_secs(5), "net {net}: failed after {took:?}");
    }
}
