//! Seeded trials of faults, each job under a hard timeout: a random rank SIGKILLed at a
//! random step of a loop of all_reduces, the survivors shrinking it out; and faults at
//! the other phases (bootstrap, split, shrink, grow, and a stopped rank), the survivors
//! recovering on a communicator of the same size.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{reap_when_survivors_exit, start_job};
use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

/// One rank of a trial (does nothing when run as an ordinary test): of a phase trial
/// (OXCCL_TEST_FAULT_PHASE), the new rank of a grow trial among them; else of a kill
/// trial, all_reducing until the victim's death fails them, then shrinking.
#[test]
fn child() {
    let Some(victim) = common::victim() else { return };
    if let Ok(phase) = std::env::var("OXCCL_TEST_FAULT_PHASE") {
        if std::env::var_os("OXCCL_TEST_GROW_NEWCOMER").is_some() {
            return grow_trial_newcomer(victim);
        }
        return phase_trial(&phase, victim);
    }
    let config = Config::from_env().unwrap();
    let comm = Communicator::from_env(&config).unwrap();
    common::all_reduce_until_failure(comm, victim);
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
                // SAFETY: kill(2) of this very process reads and writes no memory; dying
                // (or stopping) here is the point.
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
            // SAFETY: kill(2) of this very process reads and writes no memory; dying here
            // is the point.
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

/// Every rank's exit status and output, for a failed assertion's message.
fn all_outputs(outputs: &[(std::process::ExitStatus, String)]) -> String {
    outputs.iter().enumerate().map(|(r, (status, out))| format!("rank {r}: {status:?}\n{out}")).collect::<Vec<_>>().join("\n")
}

/// SIGKILLs this process after `delay`, from a thread of its own.
fn kill_self_after(delay: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        // SAFETY: kill(2) of this very process reads and writes no memory; dying here is
        // the point.
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
