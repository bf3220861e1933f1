//! libnccl-net-oxccl.so carrying oxccl's collectives between hosts: a simulated cluster of
//! 2 hosts (network namespaces on one rail) with 2 ranks each, every rank a process in its
//! host that loads the plugin through NCCL_NET_PLUGIN and runs the collective matrix on
//! host memory, checking every result. Ranks of one host talk through shared memory; the
//! ring between hosts goes over the plugin. Rank 0's log shows the plugin chosen and its
//! device (the host's rail interface).

mod common;

use common::library;
use oxccl_runtime::{bootstrap::Config, Communicator};
use oxccl_testkit::check as matrix;
use oxccl_testkit::cluster::{Cluster, Spec, PROCESS_TIMEOUT};

const HOSTS: usize = 2;
const RANKS_PER_HOST: usize = 2;

/// One rank (does nothing when run as an ordinary test).
#[test]
fn child() {
    if std::env::var("OXCCL_TEST_CLUSTER_RANK").is_err() {
        return;
    }
    let config = Config::from_env().unwrap();
    oxccl_runtime::bootstrap::log::init(&config);
    let comm = Communicator::from_env(&config).unwrap();
    let failures = matrix::run_cases(&comm, &matrix::full_matrix(comm.nranks(), &matrix::SMALL_COUNTS));
    comm.finalize().unwrap();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
    println!("rank {} of {}: matrix ok", comm.rank(), comm.nranks());
}

#[test]
fn collectives_between_namespaced_hosts_over_the_exported_plugin() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(HOSTS, 1)) else { return };
    let plugin = library();
    let nranks = HOSTS * RANKS_PER_HOST;
    let root = format!("{}:29500", cluster.hosts[0].address(0));
    let outputs = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..nranks)
            .map(|rank| {
                let host = &cluster.hosts[rank / RANKS_PER_HOST];
                let mut command = host.command(std::env::current_exe().unwrap());
                command
                    .args(["child", "--exact", "--nocapture", "--test-threads", "1"])
                    .env("OXCCL_TEST_CLUSTER_RANK", rank.to_string())
                    .env("OXCCL_RANK", rank.to_string())
                    .env("OXCCL_NRANKS", nranks.to_string())
                    .env("OXCCL_LOCAL_RANK", (rank % RANKS_PER_HOST).to_string())
                    .env("NCCL_COMM_ID", &root)
                    .env("NCCL_NET_PLUGIN", &plugin)
                    .env("NCCL_DEBUG", "INFO")
                    .env("NCCL_DEBUG_SUBSYS", "NET")
                    .env("OXCCL_COLL_TIMEOUT_MS", "60000");
                s.spawn(move || oxccl_testkit::run(command, PROCESS_TIMEOUT))
            })
            .collect();
        ranks.into_iter().map(|rank| rank.join().unwrap()).collect::<Vec<_>>()
    });
    for (rank, output) in outputs.iter().enumerate() {
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && stdout.contains("matrix ok"), "rank {rank}: {}\n{stdout}\n{stderr}", output.status);
    }
    let log = String::from_utf8_lossy(&outputs[0].stderr);
    assert!(log.contains("NET/Plugin: using") && log.contains("libnccl-net-oxccl.so (v12, \"oxccl\")"), "{log}");
    assert!(log.contains("NET/oxccl: oxccl") && log.contains("devices rail0 (10.100.0.1, "), "{log}");
    // NCCL_SOCKET_NTHREADS=1 (tests' library()) reached the ranks' plugin.
    assert!(log.contains("1 helper thread(s) and 1 data socket(s) per connection"), "{log}");
}
