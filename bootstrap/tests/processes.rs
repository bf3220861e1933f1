//! Bootstraps of N ranks as separate processes: oxccl's own spawner, torchrun-style
//! environments, NCCL_COMM_ID, an id file, and a rank that dies after joining.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Commands for `n` ranks of the check program under oxccl's launcher variables; `extra`
/// adds per-rank settings.
fn ranks(n: u32, extra: impl Fn(u32, &mut Command)) -> Vec<Command> {
    (0..n)
        .map(|rank| {
            let mut c = clean_command(check_program());
            c.env("OXCCL_RANK", rank.to_string()).env("OXCCL_NRANKS", n.to_string()).env("OXCCL_LOCAL_RANK", rank.to_string());
            extra(rank, &mut c);
            c
        })
        .collect()
}

#[test]
fn spawned_jobs_of_many_sizes() {
    let config = oxccl_bootstrap::Config::defaults();
    for n in [1u32, 2, 3, 8, 32] {
        let id = oxccl_bootstrap::Bootstrap::create_local_id(&config).unwrap();
        let results = run_all(ranks(n, |_, c| {
            c.env("OXCCL_UNIQUE_ID", id.to_hex());
        }), Duration::from_secs(120));
        assert_all_ok(&results);
        // Every rank saw the same pids, one per rank, in rank order.
        let pid_lists: Vec<&str> = results.iter().map(|r| r.stdout.split("pids ").nth(1).unwrap_or("")).collect();
        assert!(pid_lists.windows(2).all(|w| w[0] == w[1]), "{pid_lists:?}");
    }
}

#[test]
fn library_spawner_starts_and_waits_for_ranks() {
    let config = oxccl_bootstrap::Config::defaults();
    let job = oxccl_bootstrap::spawn::spawn(4, &config, |_| {
        let mut c = clean_command(check_program());
        c.stdout(std::process::Stdio::null());
        c
    })
    .unwrap();
    assert_eq!(job.pids().len(), 4);
    job.wait(Duration::from_secs(60), Duration::from_secs(5)).unwrap();
}

#[test]
fn nccl_comm_id_names_a_fixed_root() {
    let port = free_port();
    let results = run_all(ranks(4, |_, c| {
        c.env("NCCL_COMM_ID", format!("127.0.0.1:{port}"));
    }), Duration::from_secs(60));
    assert_all_ok(&results);
}

#[test]
fn torchrun_style_environment() {
    let port = free_port();
    let commands = (0..4)
        .map(|rank| {
            let mut c = clean_command(check_program());
            c.env("RANK", rank.to_string())
                .env("WORLD_SIZE", "4")
                .env("LOCAL_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string());
            c
        })
        .collect();
    assert_all_ok(&run_all(commands, Duration::from_secs(60)));
}

#[test]
fn unique_id_file() {
    let dir = std::env::temp_dir().join(format!("oxccl-idfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("id");
    let results = run_all(ranks(3, |_, c| {
        c.env("OXCCL_UNIQUE_ID_FILE", &path).env("OXCCL_BOOTSTRAP", "env");
    }), Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    assert_all_ok(&results);
}

#[test]
fn rank_killed_after_joining_is_named_by_every_survivor() {
    let config = oxccl_bootstrap::Config::defaults();
    let id = oxccl_bootstrap::Bootstrap::create_local_id(&config).unwrap();
    let start = std::time::Instant::now();
    let results = run_all(ranks(4, |_, c| {
        c.env("OXCCL_UNIQUE_ID", id.to_hex()).arg("--die-after-bootstrap").arg("2");
    }), Duration::from_secs(60));
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    for (rank, r) in results.iter().enumerate() {
        if rank == 2 {
            assert_eq!(r.status.map(|s| std::os::unix::process::ExitStatusExt::signal(&s)), Some(Some(9)));
            continue;
        }
        assert_eq!(r.code(), Some(3), "rank {rank}: {r:?}");
        assert!(r.stdout.contains("detected failure of rank 2"), "rank {rank}: {}\nall ranks: {results:#?}", r.stdout);
    }
}

#[test]
fn no_launcher_is_a_clear_error() {
    let r = run(clean_command(check_program()), Duration::from_secs(20));
    assert_eq!(r.code(), Some(2), "{r:?}");
    assert!(r.stderr.contains("no launcher found"), "{}", r.stderr);
}

#[test]
fn malformed_setting_is_a_clear_error() {
    let mut c = clean_command(check_program());
    c.env("OXCCL_RANK", "0").env("OXCCL_NRANKS", "1").env("OXCCL_BOOTSTRAP_TIMEOUT_MS", "soon");
    let r = run(c, Duration::from_secs(20));
    assert_eq!(r.code(), Some(2), "{r:?}");
    assert!(r.stderr.contains("OXCCL_BOOTSTRAP_TIMEOUT_MS"), "{}", r.stderr);
}

#[test]
fn debug_file_receives_the_logs() {
    let dir = std::env::temp_dir().join(format!("oxccl-debugfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("log.%h.%p");
    let config = oxccl_bootstrap::Config::defaults();
    let id = oxccl_bootstrap::Bootstrap::create_local_id(&config).unwrap();
    let results = run_all(ranks(2, |_, c| {
        c.env("OXCCL_UNIQUE_ID", id.to_hex())
            .env("NCCL_DEBUG", "INFO")
            .env("NCCL_DEBUG_SUBSYS", "BOOTSTRAP")
            .env("NCCL_DEBUG_FILE", &pattern);
    }), Duration::from_secs(60));
    assert_all_ok(&results);
    let logs: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(logs.len(), 2, "one file per process");
    for log in logs {
        assert!(log.contains("oxccl::bootstrap") && log.contains("bootstrapped"), "{log}");
        let init_info = log.lines().any(|l| l.contains(" INFO ") && l.contains("oxccl::init"));
        assert!(!init_info, "INIT is not in NCCL_DEBUG_SUBSYS: {log}");
    }
}
