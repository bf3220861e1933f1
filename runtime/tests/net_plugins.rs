//! Communicators over NCCL net plugins chosen by NCCL_NET_PLUGIN, ranks as threads of this
//! process: the project's own in-process C plugin (transports/tests/plugins/loopback.c, ABI
//! v8) carries the collective matrix; a plugin whose isend fails midway fails every rank's
//! collective with an error naming the plugin and the call; one that never completes a
//! request is ended by abort; a plugin that cannot be loaded fails communicator creation.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};
use oxccl_testkit::check as matrix;

fn plugin(name: &str, flags: &[&str]) -> PathBuf {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../transports/tests/plugins/loopback.c");
    oxccl_testkit::c_library(concat!(env!("CARGO_TARGET_TMPDIR"), "/c-plugins"), source, &format!("libnccl-net-{name}.so"), flags)
}

/// Every rank on the network path, over the plugin at `path`.
fn config(path: &std::path::Path) -> Config {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_SHM_DISABLE", "1").unwrap();
    config.set("NCCL_NET_PLUGIN", path.to_str().unwrap()).unwrap();
    config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    config
}

/// `f(communicator)` on a thread per rank; the results in rank order.
fn on_every_rank<R: Send>(comms: &[Communicator], f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = comms.iter().map(|c| s.spawn(move || f(c))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn the_collective_matrix_runs_over_an_abi_v8_plugin() {
    let comms = Communicator::init_all_with(&vec![config(&plugin("loop-v8", &["-DNET_VERSION=8"])); 3]).unwrap();
    let failures: Vec<String> = on_every_rank(&comms, |comm| matrix::run_cases(comm, &matrix::full_matrix(3, &matrix::SMALL_COUNTS))).concat();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
    // The internal socket net carried nothing.
    assert_eq!(comms[0].net_receive_stats(), (0, 0));
}

#[test]
fn an_isend_failing_midway_fails_every_rank_naming_the_plugin_and_the_call() {
    let comms = Communicator::init_all_with(&vec![config(&plugin("failisend", &["-DFAIL_ISEND_AFTER=40"])); 2]).unwrap();
    let start = Instant::now();
    let errors = on_every_rank(&comms, |comm| {
        let data = vec![1.0f32; 4096];
        let mut out = vec![0.0f32; 4096];
        // Sends succeed until the plugin's 41st: some collective fails.
        (0..1000).find_map(|_| comm.all_reduce(&data, &mut out, ReduceOp::Sum).err()).map(|e| e.to_string())
    });
    assert!(start.elapsed() < Duration::from_secs(30), "took {:?}", start.elapsed());
    let errors: Vec<String> = errors.into_iter().map(|e| e.expect("every rank's collective fails")).collect();
    assert!(
        errors.iter().any(|e| e.contains("isend: net plugin") && e.contains("libnccl-net-failisend.so (v8, \"loopback\")") && e.contains("ncclSystemError")),
        "{errors:#?}"
    );
}

#[test]
fn a_plugin_that_never_completes_a_request_is_ended_by_abort() {
    let comms = Communicator::init_all_with(&vec![config(&plugin("nevercomplete", &["-DNEVER_COMPLETE"])); 2]).unwrap();
    let start = Instant::now();
    let outcomes = std::thread::scope(|s| {
        let running: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let mut out = vec![0.0f32; 1024];
                    comm.all_reduce(&vec![1.0f32; 1024], &mut out, ReduceOp::Sum)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        for comm in &comms {
            comm.abort();
        }
        running.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    // Ended by abort, not by the 60 s collective timeout.
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    for outcome in outcomes {
        let err = outcome.expect_err("a collective over a net that never completes cannot succeed").to_string();
        assert!(err.to_lowercase().contains("abort"), "{err}");
    }
}

#[test]
fn a_plugin_that_cannot_be_used_fails_creation_with_a_clear_error() {
    let mut missing = Config::defaults();
    missing.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    missing.set("NCCL_NET_PLUGIN", "nosuchfabric").unwrap();
    let err = Communicator::init_all_with(&vec![missing.clone(); 2]).err().expect("no such plugin").to_string();
    assert!(err.contains("nosuchfabric") && err.contains("libnccl-net-nosuchfabric.so"), "{err}");
    let err = Communicator::init_all_with(&vec![config(&plugin("failinit", &["-DFAIL_INIT"])); 2]).err().expect("init fails").to_string();
    assert!(err.contains("libnccl-net-failinit.so") && err.contains("init: returned ncclSystemError"), "{err}");
    // NCCL_NET=Socket passes the plugin over for oxccl's own socket net.
    let mut socket = config(&plugin("loop-v8", &["-DNET_VERSION=8"]));
    socket.set("NCCL_NET", "Socket").unwrap();
    let comms = Communicator::init_all_with(&vec![socket; 2]).unwrap();
    on_every_rank(&comms, |comm| {
        let mut out = vec![0.0f32; 256];
        comm.all_reduce(&vec![2.0f32; 256], &mut out, ReduceOp::Sum).unwrap();
        assert!(out.iter().all(|&x| x == 4.0));
    });
    assert!(comms[0].net_receive_stats().0 > 0, "the socket net carried the data");
}
