//! Ranks as processes (the test binary started again, one rank each), on one host and each posing as a host.

use super::*;

/// One rank of a process job (does nothing when run as an ordinary test).
#[test]
fn child() {
    let Ok(ranks) = std::env::var("OXCCL_TEST_GPU_CHILD") else { return };
    let gpus = gpu::device_count();
    let mut config = Config::from_env().unwrap();
    config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    let comm = Communicator::from_env(&config).unwrap();
    assert_eq!(comm.nranks().to_string(), ranks);
    let rank = comm.rank();
    let dev = comm.with_memory(Memory::Gpu { device: rank % gpus }).unwrap();
    let n = dev.nranks();
    let mut failures = run_cases(&dev, &cases(n), Inputs::Exact);
    failures.extend(run_cases(&dev, &random_cases(n), Inputs::Random));
    drop(dev);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
    println!("rank {rank}: GPU matrix ok (exact and random inputs)");
}

#[test]
fn ranks_as_processes() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    for n in [2, g.clamp(2, 4)].into_iter().collect::<std::collections::BTreeSet<_>>() {
        run_processes(n, false);
    }
}

/// Processes each posing as a host of its own (NCCL_HOSTID): the matrix over the network,
/// as a job over several hosts runs it.
#[test]
fn ranks_as_processes_on_separate_hosts() {
    if gpus().is_none() {
        return;
    }
    warm_kernel_cache();
    for n in [2, 3] {
        run_processes(n, true);
    }
}

fn run_processes(n: usize, separate_hosts: bool) {
    let start = Instant::now();
    let job = oxccl_runtime::bootstrap::spawn::spawn(n as u32, &config(), |rank| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["processes::child", "--exact", "--nocapture", "--test-threads", "1"]).env("OXCCL_TEST_GPU_CHILD", n.to_string()).env("NCCL_SOCKET_IFNAME", "lo");
        if separate_hosts {
            cmd.env("NCCL_HOSTID", format!("test-host-{rank}"));
        }
        cmd
    })
    .unwrap();
    job.wait(Duration::from_secs(400), Duration::from_secs(20)).unwrap_or_else(|e| panic!("{n} processes (separate hosts: {separate_hosts}): {e}"));
    eprintln!("{n} ranks (processes{}): GPU matrix ok in {:.1?}", if separate_hosts { ", separate hosts" } else { "" }, start.elapsed());
}
