//! A rank that dies in the middle of collectives: every survivor's collective fails within
//! the bound with an error naming the dead rank (no hang), over shared memory and over the
//! Net; abort from another thread ends a collective stuck on a stopped (SIGSTOP) peer.

use std::process::Command;
use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

/// One rank of a job (does nothing when run as an ordinary test).
#[test]
fn child() {
    if let Ok(id) = std::env::var("OXCCL_TEST_GROW_ID") {
        return newcomer(&id);
    }
    let Ok(victim) = std::env::var("OXCCL_TEST_FAULT_VICTIM") else { return };
    let victim: usize = victim.parse().unwrap();
    if let Ok(phase) = std::env::var("OXCCL_TEST_FAULT_PHASE") {
        if std::env::var_os("OXCCL_TEST_GROW_NEWCOMER").is_some() {
            return grow_trial_newcomer(victim);
        }
        return phase_trial(&phase, victim);
    }
    let config = Config::from_env().unwrap();
    let comm = Communicator::from_env(&config).unwrap();
    if std::env::var("OXCCL_TEST_FAULT_MODE").as_deref() == Ok("grow") {
        grow_by_one(&comm);
        return;
    }
    if std::env::var("OXCCL_TEST_FAULT_MODE").as_deref() == Ok("stop") {
        stopped_peer(&comm, victim);
        return;
    }
    let stop = std::env::var("OXCCL_TEST_FAULT_MODE").as_deref() == Ok("stop-detect");
    let kill_step: u64 = std::env::var("OXCCL_TEST_FAULT_STEP").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut data = vec![1.0f32; 1 << 16];
    for step in 0u64.. {
        if comm.rank() == victim && step == kill_step {
            // Die without any goodbye, as a crashed node does; or hang, as a stopped one.
            unsafe { libc::kill(libc::getpid(), if stop { libc::SIGSTOP } else { libc::SIGKILL }) };
        }
        let start = Instant::now();
        if let Err(e) = comm.all_reduce_in_place(&mut data, ReduceOp::Sum) {
            println!("rank {} step {step}: failed after {} ms: {e}", comm.rank(), start.elapsed().as_millis());
            if std::env::var("OXCCL_TEST_FAULT_MODE").as_deref() == Ok("shrink") {
                let oxccl_runtime::Error::PeerFailed { rank: dead, .. } = e else { panic!("not a peer failure: {e}") };
                let start = Instant::now();
                let survivors = if std::env::var("OXCCL_TEST_FAULT_SHRINK").as_deref() == Ok("agreed") {
                    // No list: the survivors agree on who failed.
                    let (survivors, excluded) = comm.shrink_failed(true).unwrap();
                    assert_eq!(excluded, vec![dead as usize], "rank {}: agreed on {excluded:?}, the error named rank {dead}", comm.rank());
                    survivors
                } else {
                    comm.shrink(&[dead as usize], true).unwrap()
                };
                let shrink_ms = start.elapsed().as_secs_f64() * 1e3;
                let mut x = vec![comm.rank() as u64 + 1; 100_003];
                survivors.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                let expected: u64 = (0..comm.nranks() as u64).filter(|&r| r != dead as u64).map(|r| r + 1).sum();
                assert!(x.iter().all(|&v| v == expected), "after shrink: {} expected {expected}", x[0]);
                survivors.finalize().unwrap();
                println!("rank {} now rank {} of {}: shrunk in {shrink_ms:.2} ms, all_reduce checked", comm.rank(), survivors.rank(), survivors.nranks());
                // Leave with a goodbye (destroying both communicators), as a finished rank
                // does: exiting without one looks like a crash to the ranks still working.
                drop(survivors);
                drop(comm);
                std::process::exit(5);
            }
            std::process::exit(3);
        }
        data.fill(1.0);
    }
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

/// All-reduces `rank + 1` and checks the sum.
fn checked_all_reduce(comm: &Communicator) {
    let n = comm.nranks() as u64;
    let mut x = vec![comm.rank() as u64 + 1; 100_003];
    comm.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
    assert!(x.iter().all(|&v| v == n * (n + 1) / 2), "rank {}: {} expected {}", comm.rank(), x[0], n * (n + 1) / 2);
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
        assert!(stdout.contains("aborted") || stdout.contains("(before its own)"), "{stdout}");
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

/// Starts `n` ranks of this binary's `child`, the fault hitting `victim`, on loopback with a
/// 20 s collective timeout; `env` adds to or overrides that.
fn start_job(n: u32, victim: usize, env: &[(&str, &str)]) -> oxccl_runtime::bootstrap::spawn::LocalJob {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    // The root is served here: it takes the job's knobs (its timeouts) too.
    for (name, value) in env.iter().filter(|(name, _)| !name.starts_with("OXCCL_TEST_")) {
        config.set(name, value).unwrap();
    }
    oxccl_runtime::bootstrap::spawn::spawn(n, &config, |_| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["child", "--exact", "--nocapture", "--test-threads", "1"])
            .env("OXCCL_TEST_FAULT_VICTIM", victim.to_string())
            .env("NCCL_SOCKET_IFNAME", "lo")
            .env("OXCCL_COLL_TIMEOUT_MS", "20000")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped());
        cmd
    })
    .unwrap()
}

/// Starts the new rank of a grow trial (rank `n` of `n + 1`) with the job's `env`, under a
/// hard timeout (the thread panics if it hangs).
fn start_newcomer(n: u32, victim: usize, env: &[(&str, &str)]) -> std::thread::JoinHandle<std::process::Output> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("OXCCL_TEST_GROW_NEWCOMER", "1")
        .env("OXCCL_NRANKS", n.to_string())
        .env("OXCCL_TEST_FAULT_VICTIM", victim.to_string())
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("OXCCL_COLL_TIMEOUT_MS", "20000")
        .envs(env.iter().copied());
    std::thread::spawn(move || oxccl_testkit::run(cmd, Duration::from_secs(25)))
}

/// Kills `victim` (stopped, it never exits) once every other rank has exited.
fn reap_when_survivors_exit(pids: Vec<u32>, victim: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let exited = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')));
        let deadline = Instant::now() + Duration::from_secs(25);
        while Instant::now() < deadline && !pids.iter().enumerate().all(|(r, &p)| r == victim || exited(p)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        unsafe { libc::kill(pids[victim] as i32, libc::SIGKILL) };
    })
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

/// Seeded trials: a random rank of 4 or 8 is SIGKILLed at a random step of a loop of
/// all_reduces, over shared memory or the Net; in every trial every survivor must fail
/// (no hang: each trial runs under a hard timeout), shrink the victim out and run a checked
/// all_reduce on the survivors' communicator; every other trial shrinks without a list
/// (agreement on the failed ranks).
#[test]
fn seeded_kill_trials() {
    let mut seed = 0x5EED_u64;
    let mut random = move |bound: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % bound
    };
    let trials = 50;
    let start = Instant::now();
    for trial in 0..trials {
        let n: u32 = if trial % 5 == 4 { 8 } else { 4 };
        let victim = random(n as u64) as usize;
        let step = 1 + random(29);
        let net = trial % 2 == 1;
        let shrink = if trial % 4 < 2 { "agreed" } else { "listed" };
        let job = start_job(
            n,
            victim,
            &[("OXCCL_TEST_FAULT_STEP", step.to_string().as_str()), ("OXCCL_TEST_FAULT_MODE", "shrink"), ("OXCCL_TEST_FAULT_SHRINK", shrink), ("NCCL_SHM_DISABLE", if net { "1" } else { "0" })],
        );
        let outputs = job.wait_with_output(Duration::from_secs(30)).unwrap();
        for (rank, (status, stdout)) in outputs.iter().enumerate().filter(|(r, _)| *r != victim) {
            assert_eq!(
                status.code(),
                Some(5),
                "trial {trial} ({n} ranks, rank {victim} killed at step {step}, net {net}, {shrink} shrink): rank {rank} {status:?}\n{stdout}"
            );
            assert!(stdout.contains(&format!("of {}: shrunk in", n - 1)), "trial {trial}: rank {rank}: {stdout}");
        }
    }
    eprintln!("{trials} kill trials passed in {:.1} s", start.elapsed().as_secs_f64());
}

/// Polls `pending` until it is done (at most 30 s), counting the InProgress answers seen.
fn poll_done(pending: &oxccl_runtime::PendingCommunicator) -> (usize, Option<oxccl_runtime::Error>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut in_progress = 0;
    loop {
        match pending.async_error() {
            Some(oxccl_runtime::Error::InProgress { .. }) if Instant::now() < deadline => in_progress += 1,
            other => return (in_progress, other),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn local_comms(n: u32) -> Vec<Communicator> {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_COMM_BLOCKING", "0").unwrap();
    Communicator::init_all(n, &config).unwrap()
}

/// Non-blocking split (with a NOCOLOR rank), shrink and grow of 4 ranks (threads): each
/// call returns at once; the pending communicator and the parent report InProgress while
/// a rank that enters late holds the others back, then each works (checked all_reduce).
#[test]
fn nonblocking_split_shrink_and_grow() {
    use oxccl_runtime::{bootstrap::NOCOLOR, Error};
    let comms = local_comms(4);
    let grow_id = comms[0].grow_id().unwrap();
    let reports: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let rank = comm.rank();
                    let late = Duration::from_millis(300);
                    if rank == 3 {
                        std::thread::sleep(late);
                    }
                    // Split: ranks 0-2 by parity, rank 3 joins nothing.
                    let start = Instant::now();
                    let color = if rank == 3 { NOCOLOR } else { (rank % 2) as i32 };
                    let pending = comm.split_nonblocking(color, rank as i32).unwrap();
                    let returned = start.elapsed();
                    assert!(returned < Duration::from_millis(100), "split_nonblocking blocked {returned:?}");
                    let mut report = format!("rank {rank}: split returned in {:.2} ms", returned.as_secs_f64() * 1e3);
                    match pending {
                        None => {
                            assert_eq!(rank, 3);
                            // The parent reports the exchange still running, then nothing.
                            let deadline = Instant::now() + Duration::from_secs(30);
                            while matches!(comm.error(), Some(Error::InProgress { .. })) && Instant::now() < deadline {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            assert!(comm.error().is_none(), "{:?}", comm.error());
                        }
                        Some(p) => {
                            assert!(matches!(comm.error(), Some(Error::InProgress { .. })), "parent: {:?}", comm.error());
                            let mut data = [1.0f32; 4];
                            assert!(matches!(comm.all_reduce_in_place(&mut data, ReduceOp::Sum), Err(Error::InProgress { .. })));
                            let (seen, outcome) = poll_done(&p);
                            assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
                            // Rank 3 enters 300 ms late: the others saw InProgress for it.
                            assert!(seen > 0, "rank {rank} never saw InProgress");
                            let child = p.wait(Duration::from_secs(1)).unwrap();
                            assert_eq!(child.nranks(), if rank % 2 == 0 { 2 } else { 1 });
                            checked_all_reduce(&child);
                            report += &format!(", child {} of {} after {seen} InProgress polls", child.rank(), child.nranks());
                        }
                    }
                    // The parent works again.
                    checked_all_reduce(comm);
                    // Shrink rank 3 out (it takes no part).
                    if rank != 3 {
                        let p = comm.shrink_nonblocking(&[3], false).unwrap();
                        assert_eq!((p.rank(), p.nranks()), (rank, 3));
                        let (_, outcome) = poll_done(&p);
                        assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
                        let shrunk = p.wait(Duration::from_secs(1)).unwrap();
                        checked_all_reduce(&shrunk);
                        report += ", shrunk to 3";
                    }
                    // Grow to 5 with a new rank that joins late.
                    let p = comm.grow_nonblocking(5, &grow_id).unwrap();
                    let (seen, outcome) = poll_done(&p);
                    assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
                    assert!(seen > 0, "rank {rank}: grow never in progress");
                    let grown = p.wait(Duration::from_secs(1)).unwrap();
                    assert_eq!((grown.rank(), grown.nranks()), (rank, 5));
                    checked_all_reduce(&grown);
                    report + ", grown to 5"
                })
            })
            .collect();
        let newcomer = s.spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            let mut config = Config::defaults();
            config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
            let p = Communicator::init_nonblocking(&grow_id, 4, 5, &config);
            let c = p.wait(Duration::from_secs(30)).unwrap();
            checked_all_reduce(&c);
        });
        let reports = handles.into_iter().map(|h| h.join().unwrap()).collect();
        newcomer.join().unwrap();
        reports
    });
    // Argument errors come at once, naming what was wrong.
    let e = comms[0].grow_nonblocking(2, &grow_id).err().unwrap();
    assert!(e.to_string().contains("grow to 2 ranks"), "{e}");
    let e = comms[0].shrink_nonblocking(&[9], false).err().unwrap();
    assert!(e.to_string().contains("rank 9 out of range"), "{e}");
    eprintln!("{}", reports.join("\n"));
}

/// A non-blocking creation that cannot finish (its peers never come) ends with Aborted
/// within a few hundred ms of abort(), far before the bootstrap timeout; the parent is
/// usable again afterwards, and dropping a pending communicator aborts it too.
#[test]
fn nonblocking_creations_abort() {
    use oxccl_runtime::Error;
    let comms = local_comms(2);
    let check_abort = |p: oxccl_runtime::PendingCommunicator, what: &str| {
        // Off the 100 ms rhythm of the creation's waits, so that the time shows it.
        std::thread::sleep(Duration::from_millis(150));
        assert!(matches!(p.async_error(), Some(Error::InProgress { .. })), "{what}: {:?}", p.async_error());
        // A wait that runs out leaves the creation going.
        assert!(matches!(p.wait(Duration::from_millis(10)), Err(Error::InProgress { .. })), "{what}");
        assert!(matches!(p.async_error(), Some(Error::InProgress { .. })), "{what}: {:?}", p.async_error());
        let start = Instant::now();
        p.abort();
        let (_, outcome) = poll_done(&p);
        let took = start.elapsed();
        assert!(matches!(outcome, Some(Error::Aborted { .. })), "{what}: {outcome:?}");
        assert!(took < Duration::from_secs(1), "{what}: aborted after {took:?}");
        format!("{what} aborted in {:.1} ms", took.as_secs_f64() * 1e3)
    };
    // Rank 1 never enters the split.
    let mut reports = vec![check_abort(comms[0].split_nonblocking(0, 0).unwrap().unwrap(), "split")];
    assert!(comms[0].error().is_none(), "{:?}", comms[0].error());
    // Nobody else comes to the grow id's rendezvous.
    let id = comms[0].grow_id().unwrap();
    reports.push(check_abort(comms[0].grow_nonblocking(3, &id).unwrap(), "grow"));
    // A join whose other rank never comes.
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    let id = oxccl_runtime::bootstrap::Bootstrap::create_local_id(&config).unwrap();
    reports.push(check_abort(Communicator::init_nonblocking(&id, 0, 2, &config), "init"));
    // Aborting the parent aborts what runs from it.
    let p = comms[0].split_nonblocking(0, 0).unwrap().unwrap();
    comms[0].abort();
    let (_, outcome) = poll_done(&p);
    assert!(matches!(outcome, Some(Error::Aborted { .. })), "{outcome:?}");
    eprintln!("{}", reports.join("\n"));
}

/// One rank of a phase trial (`seeded_phase_trials`): the victim is SIGKILLed (by a thread
/// of its own, after OXCCL_TEST_FAULT_DELAY_US) during the bootstrap (`init`), during a
/// split (`split`: at split round OXCCL_TEST_FAULT_STEP), or during the shrink after a
/// first failure (`shrink`: the first victim dies at an all_reduce step, the second,
/// OXCCL_TEST_FAULT_SECOND, while the survivors shrink); or it stops (`stop`: SIGSTOP at an
/// all_reduce step, found by the heartbeats). Survivors print when their call failed and
/// recover with [`recover`]; a survivor whose init failed exits with 7.
fn phase_trial(phase: &str, victim: usize) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let (step, delay) = (var("OXCCL_TEST_FAULT_STEP"), Duration::from_micros(var("OXCCL_TEST_FAULT_DELAY_US")));
    let rank: usize = std::env::var("OXCCL_RANK").unwrap().parse().unwrap();
    if phase == "init" && rank == victim {
        kill_self_after(delay);
    }
    let config = Config::from_env().unwrap();
    let start = Instant::now();
    let comm = match Communicator::from_env(&config) {
        Ok(comm) => comm,
        Err(e) => {
            println!("rank {rank}: init failed after {} ms: {e}", start.elapsed().as_millis());
            std::process::exit(7);
        }
    };
    let mut n = comm.nranks();
    let mut comm = comm;
    let mut data = vec![1.0f32; 1 << 14];
    for round in 0u64.. {
        let start = Instant::now();
        if phase == "grow" && round == step {
            match grow_round(&comm, victim, delay) {
                Ok(grown) => {
                    // The old communicator is done with (left with a goodbye).
                    drop(std::mem::replace(&mut comm, grown));
                    n += 1;
                }
                Err(e) => {
                    println!("rank {rank}: grow failed after {} ms: {e}", start.elapsed().as_millis());
                    recover(comm, n);
                }
            }
        }
        let result = if phase == "split" {
            if rank == victim && round == step {
                kill_self_after(delay);
            }
            if let Some(failed) = split_round(&comm, &mut data, start) {
                println!("rank {rank}: agreed that {failed:?} failed");
                recover(comm, n);
            }
            Ok(())
        } else {
            if rank == victim && round == step && phase != "grow" {
                unsafe { libc::kill(libc::getpid(), if phase == "stop" { libc::SIGSTOP } else { libc::SIGKILL }) };
            }
            comm.all_reduce_in_place(&mut data, ReduceOp::Sum)
        };
        data.fill(1.0);
        if let Err(e) = result {
            println!("rank {rank}: round {round} failed after {} ms: {e}", start.elapsed().as_millis());
            let second = std::env::var("OXCCL_TEST_FAULT_SECOND").ok().and_then(|v| v.parse::<usize>().ok());
            if phase == "shrink" && second == Some(rank) {
                // Die while the others shrink; never take part in their checked all_reduce.
                kill_self_after(delay);
                let _ = comm.shrink_failed(true);
                std::thread::sleep(Duration::from_secs(30));
                std::process::exit(9);
            }
            recover(comm, n);
        }
    }
}

/// The grow of a grow trial, on an old rank: rank 0 makes the id, broadcasts it and
/// hands it to the new process (through the file OXCCL_TEST_GROW_ID_FILE, which the new
/// process polls); all grow by one, the victim (if it is this rank) dying `delay` after its
/// grow started (50 ms before calling it, for 0). A grown communicator is checked by an
/// all_reduce of `rank + 1`.
fn grow_round(comm: &Communicator, victim: usize, delay: Duration) -> oxccl_runtime::Result<Communicator> {
    let n = comm.nranks();
    let mut id = vec![0u8; 128];
    if comm.rank() == 0 {
        let grow_id = comm.grow_id().unwrap();
        id = grow_id.to_bytes().to_vec();
        let path = std::env::var("OXCCL_TEST_GROW_ID_FILE").unwrap();
        std::fs::write(format!("{path}.tmp"), grow_id.to_hex()).unwrap();
        std::fs::rename(format!("{path}.tmp"), &path).unwrap();
    }
    // (A victim dying right after its part of the broadcast may fail it on the others:
    // then they recover without growing.)
    comm.broadcast(&mut id, 0)?;
    let id = oxccl_runtime::bootstrap::UniqueId::from_bytes(&id).unwrap();
    if comm.rank() == victim {
        if delay.is_zero() {
            // Dead before the rendezvous, where the others wait by now (after the
            // broadcast's last messages reached them): they must not wait for it until the
            // timeout.
            std::thread::sleep(Duration::from_millis(50));
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        kill_self_after(delay);
    }
    let grown = comm.grow(n + 1, &id)?;
    assert_eq!((grown.rank(), grown.nranks()), (comm.rank(), n + 1));
    println!("rank {}: grown to {}", comm.rank(), n + 1);
    Ok(grown)
}

/// The new process of a grow trial (rank n of n + 1, n = OXCCL_NRANKS): waits for the id
/// file, joins (dying `delay` after it started if it is the victim), then all-reduces
/// until a failure, and recovers as the old ranks do; exits 7 if its join failed.
fn grow_trial_newcomer(victim: usize) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let n = var("OXCCL_NRANKS") as usize;
    let path = std::env::var("OXCCL_TEST_GROW_ID_FILE").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let id = loop {
        if let Ok(hex) = std::fs::read_to_string(&path) {
            break oxccl_runtime::bootstrap::UniqueId::from_hex(&hex).unwrap();
        }
        assert!(Instant::now() < deadline, "no grow id in {path}");
        std::thread::sleep(Duration::from_millis(1));
    };
    if victim == n {
        kill_self_after(Duration::from_micros(var("OXCCL_TEST_FAULT_DELAY_US")));
    }
    let config = Config::from_env().unwrap();
    let start = Instant::now();
    let comm = match Communicator::init(&id, n as u32, n as u32 + 1, &config) {
        Ok(comm) => comm,
        Err(e) => {
            println!("rank {n}: grow failed after {} ms: {e}", start.elapsed().as_millis());
            std::process::exit(7);
        }
    };
    println!("rank {n}: grown to {}", n + 1);
    let mut data = vec![1.0f32; 1 << 14];
    loop {
        let start = Instant::now();
        if let Err(e) = comm.all_reduce_in_place(&mut data, ReduceOp::Sum) {
            println!("rank {n}: round failed after {} ms: {e}", start.elapsed().as_millis());
            recover(comm, n + 1);
        }
    }
}

/// One round of the split trial: split by parity, then (a split is not atomic under
/// failures: some ranks may get a communicator while others fail) all ask, through the
/// agreement on the parent, whether a rank failed — ULFM's pattern after MPI_Comm_split;
/// if none did, each all-reduces on its part, and a failure there is agreed on the same
/// way. Returns the ranks agreed failed, if any.
fn split_round(comm: &Communicator, data: &mut [f32], start: Instant) -> Option<Vec<usize>> {
    let split = comm.split((comm.rank() % 2) as i32, comm.rank() as i32);
    let agreed = |what: String| {
        let failed = comm.agree_failed().unwrap_or_else(|e| panic!("rank {}: agreement after {what}: {e}", comm.rank()));
        if !failed.is_empty() {
            let names: Vec<String> = failed.iter().map(|r| format!("rank {r}")).collect();
            println!("rank {}: round failed after {} ms: {what}; agreed that {} failed", comm.rank(), start.elapsed().as_millis(), names.join(", "));
        }
        failed
    };
    let failed = agreed(format!("split: {}", split.as_ref().err().map_or("ok here".into(), |e| e.to_string())));
    if !failed.is_empty() {
        return Some(failed);
    }
    let child = split.unwrap_or_else(|e| panic!("rank {}: split failed ({e}) though no rank did", comm.rank())).expect("a color was given");
    if let Err(e) = child.all_reduce_in_place(data, ReduceOp::Sum) {
        let failed = agreed(format!("all_reduce on the split: {e}"));
        assert!(!failed.is_empty(), "rank {}: {e}, but no rank failed", comm.rank());
        return Some(failed);
    }
    None
}

fn all_outputs(outputs: &[(std::process::ExitStatus, String)]) -> String {
    outputs.iter().enumerate().map(|(r, (status, out))| format!("rank {r}: {status:?}\n{out}")).collect::<Vec<_>>().join("\n")
}

/// SIGKILLs this process after `delay`, from a thread of its own.
fn kill_self_after(delay: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    });
}

/// Shrinks out the failed ranks by agreement and checks an all_reduce of `rank + 1` (ranks
/// of the first communicator) on the result; a failure during either starts over from
/// the newest communicator, at most four times. Prints the outcome and exits 5, or 8 if
/// it never succeeded.
fn recover(comm: Communicator, n: usize) -> ! {
    let start = Instant::now();
    let rank = comm.rank();
    let mut alive: Vec<usize> = (0..n).collect();
    let mut comms = vec![comm];
    for _ in 0..4 {
        let current = comms.last().unwrap();
        match current.shrink_failed(true) {
            Ok((next, excluded)) => {
                alive = alive.iter().enumerate().filter(|(r, _)| !excluded.contains(r)).map(|(_, &a)| a).collect();
                comms.push(next);
            }
            Err(e) => {
                println!("rank {rank}: shrink failed: {e}");
                continue;
            }
        }
        let current = comms.last().unwrap();
        let mut x = vec![rank as u64 + 1; 10_007];
        match current.all_reduce_in_place(&mut x, ReduceOp::Sum) {
            Ok(()) => {
                let expected: u64 = alive.iter().map(|&a| a as u64 + 1).sum();
                assert!(x.iter().all(|&v| v == expected), "rank {rank}: {} expected {expected} of ranks {alive:?}", x[0]);
                current.finalize().unwrap();
                println!("rank {rank}: now {} of {}: recovered in {:.1} ms, all_reduce checked", current.rank(), current.nranks(), start.elapsed().as_secs_f64() * 1e3);
                // Leave with a goodbye (newest first), as a finished rank does.
                while let Some(c) = comms.pop() {
                    drop(c);
                }
                std::process::exit(5);
            }
            Err(e) => println!("rank {rank}: all_reduce after shrinking failed: {e}"),
        }
    }
    std::process::exit(8);
}

/// Seeded trials of faults at other phases than a collective, 4 ranks (every fifth trial
/// 8): SIGKILL during the bootstrap, during a split, during the shrink after a first
/// failure and during a grow, and SIGSTOP of a rank found by the heartbeats (300 ms
/// timeout). Each trial runs
/// under a hard timeout (no hang); every survivor's failing call must return within the
/// bound and every survivor must end on a communicator of the same size whose all_reduce
/// it checked (init trials: or fail its init within the bound).
#[test]
fn seeded_phase_trials() {
    // OXCCL_TEST_SEED and OXCCL_TEST_TRIALS (per phase) explore further.
    let env_number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mut seed = env_number("OXCCL_TEST_SEED").unwrap_or(0xFA17);
    let mut random = move |bound: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % bound
    };
    let per_phase = env_number("OXCCL_TEST_TRIALS").unwrap_or(10);
    let start = Instant::now();
    let mut summary = Vec::new();
    // OXCCL_TEST_PHASES (comma-separated) runs some phases only.
    let only = std::env::var("OXCCL_TEST_PHASES").ok();
    for phase in ["init", "split", "shrink", "stop", "grow"] {
        if only.as_deref().is_some_and(|only| !only.split(',').any(|p| p == phase)) {
            continue;
        }
        let phase_start = Instant::now();
        let (mut init_failures, mut grows, mut worst_ms, mut worst_member_ms) = (0, 0, 0u64, 0u64);
        for trial in 0..per_phase {
            let n: u32 = if trial % 5 == 4 { 8 } else { 4 };
            // A grow trial's victim may also be the new rank, n.
            let victim = random(n as u64 + u64::from(phase == "grow")) as usize;
            let second = (victim + 1 + random(n as u64 - 1) as usize) % n as usize;
            // From round 1: everyone finished its init (round 0 needed every rank).
            let step = 1 + random(5);
            let delay_us = match phase {
                "init" => random(30_000),
                // A grow takes a few ms here: kills before, during and after its rendezvous
                // (0: an old rank dies just before its grow call).
                "grow" => random(6_000) * random(4).min(1),
                _ => random(3_000),
            };
            let net = trial % 2 == 1;
            let env = [
                ("OXCCL_TEST_FAULT_PHASE", phase.to_string()),
                ("OXCCL_TEST_FAULT_STEP", step.to_string()),
                ("OXCCL_TEST_FAULT_DELAY_US", delay_us.to_string()),
                ("OXCCL_TEST_FAULT_SECOND", if phase == "shrink" { second.to_string() } else { "none".into() }),
                ("NCCL_SHM_DISABLE", if net { "1" } else { "0" }.into()),
                ("OXCCL_BOOTSTRAP_TIMEOUT_MS", "2000".into()),
                // Stopped ranks, and ranks that left after a failed init without a word,
                // are found by the heartbeats.
                ("OXCCL_HEARTBEAT_TIMEOUT_MS", if phase == "stop" { "300" } else { "500" }.into()),
            ];
            let grow_id_file = std::env::temp_dir().join(format!("oxccl-grow-trial-{}-{trial}", std::process::id()));
            let grow_id_file = grow_id_file.to_str().unwrap().to_string();
            let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            env.push(("OXCCL_TEST_GROW_ID_FILE", &grow_id_file));
            let what = format!("{phase} trial {trial}: {n} ranks, victim {victim} (second {second}), step {step}, delay {delay_us} us, net {net}");
            let job = start_job(n, victim, &env);
            let reaper = (phase == "stop").then(|| reap_when_survivors_exit(job.pids(), victim));
            // A grow trial's new rank is started at once and waits for the id file.
            let newcomer = (phase == "grow").then(|| start_newcomer(n, victim, &env));
            let mut outputs = job.wait_with_output(Duration::from_secs(20)).unwrap();
            if let Some(reaper) = reaper {
                reaper.join().unwrap();
            }
            if let Some(newcomer) = newcomer {
                let output = newcomer.join().unwrap_or_else(|_| panic!("{what}: the new rank hung"));
                outputs.push((output.status, String::from_utf8_lossy(&output.stdout).into_owned()));
                let _ = std::fs::remove_file(&grow_id_file);
            }
            let dead: Vec<usize> = if phase == "shrink" { vec![victim, second] } else { vec![victim] };
            // Grow trials: the grow must have succeeded on every survivor or on none.
            let grew: Vec<bool> = outputs.iter().enumerate().filter(|(r, _)| !dead.contains(r)).map(|(_, (_, out))| out.contains("grown to")).collect();
            assert!(grew.iter().all(|&g| g == grew[0]), "{what}: the grow succeeded on some survivors only:\n{}", all_outputs(&outputs));
            let grew = phase == "grow" && grew[0];
            grows += u32::from(grew);
            let mut sizes = Vec::new();
            for (rank, (status, stdout)) in outputs.iter().enumerate().filter(|(r, _)| !dead.contains(r)) {
                let ms: u64 = stdout.split("failed after ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
                // An old member's death ends the grow on the other old members as soon as
                // it is known, well before the 2 s bootstrap timeout. The new rank learns
                // it from the root, or only by that timeout when the root's process (old
                // rank 0) died before it connected or no old member reached the grow; a
                // new rank that died before its hello reached the root is known only by
                // the timeout too.
                let bound = match phase {
                    "init" => 5_000,
                    "grow" if victim == n as usize || rank == n as usize => 5_000,
                    "grow" => 1_500,
                    _ => 3_000,
                };
                assert!(ms < bound, "{what}: rank {rank} failed after {ms} ms (bound {bound}), {status:?}:\n{stdout}");
                worst_ms = worst_ms.max(ms);
                if rank < n as usize {
                    worst_member_ms = worst_member_ms.max(ms);
                }
                if phase == "init" && status.code() == Some(7) {
                    init_failures += 1;
                    continue;
                }
                if phase == "grow" && rank == n as usize && !grew {
                    // The new rank of a failed grow has nothing to recover.
                    assert_eq!(status.code(), Some(7), "{what}: new rank {status:?}\n{}", all_outputs(&outputs));
                    continue;
                }
                assert_eq!(status.code(), Some(5), "{what}: rank {rank} {status:?}\n{}", all_outputs(&outputs));
                if phase != "init" && phase != "grow" {
                    // (In shrink trials the second victim may die before a survivor noticed the first.)
                    assert!(dead.iter().any(|d| stdout.contains(&format!("rank {d} "))), "{what}: rank {rank}'s error names none of {dead:?}:\n{stdout}");
                }
                let size: usize = stdout.split(": now ").nth(1).and_then(|s| s.split(" of ").nth(1)).and_then(|s| s.split(':').next()).and_then(|s| s.parse().ok()).unwrap();
                sizes.push(size);
            }
            // Every survivor that recovered is on a communicator of the same size, which
            // excludes the dead (ranks that left after a failed init are excluded too).
            assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{what}: sizes {sizes:?}");
            if let Some(&size) = sizes.first() {
                // A grown job has one rank more; a victim that was to be the new rank was
                // never one of the old communicator's.
                let expected = match phase {
                    "grow" if grew => n as usize,
                    "grow" => n as usize - usize::from(victim < n as usize),
                    _ => n as usize - dead.len(),
                };
                assert!(size <= expected, "{what}: a communicator of {size} after {dead:?} died");
                if phase != "init" {
                    assert_eq!(size, expected, "{what}: sizes {sizes:?}");
                }
            }
        }
        summary.push(format!(
            "{phase}: {per_phase} trials in {:.1} s, slowest survivor error {worst_ms} ms{}",
            phase_start.elapsed().as_secs_f64(),
            match phase {
                "init" => format!(", {init_failures} survivors failed their init (the rest recovered after it)"),
                "grow" => format!(", slowest old member {worst_member_ms} ms; the grow succeeded on every survivor in {grows} trials and failed on every survivor in the rest"),
                _ => String::new(),
            }
        ));
    }
    eprintln!("{}\nall phase trials in {:.1} s", summary.join("\n"), start.elapsed().as_secs_f64());
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
