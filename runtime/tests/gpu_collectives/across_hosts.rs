//! Ranks posing as hosts of their own (NCCL_HOSTID): collectives staged through host memory and over the network kernels, NCCL's tree and PXN across hosts, send/recv groups, and waits across hosts that abort or see their peer leave.

use super::faults::{stop_a_waiting_kernel, stop_each_wait, Hosts, Stop};
use super::p2p::{p2p_groups, run_p2p_groups};
use super::*;

/// Ranks on separate hosts (as far as oxccl can tell), staged (OXCCL_GPU_ACROSS_HOSTS=
/// staged): every collective is copied through host memory and run by the host data path
/// over the Net (sockets on loopback here). The whole matrix, checked as on one host.
#[test]
fn ranks_on_separate_hosts_stage_through_host_memory() {
    let Some(g) = gpus() else { return };
    for n in [2, 3] {
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        run_matrix(init_on_separate_hosts(&devices, &staged_config()), &devices, staged_cases, Inputs::Exact, "threads, separate hosts, staged");
    }
}

/// Ranks on separate hosts, the default way: kernels over FIFOs in pinned host memory that
/// the network proxy moves over the socket Net (loopback here). The matrix with exact
/// inputs, and the random-input matrix bit for bit against the CPU running the same
/// route, for 2 and 3 ranks (sharing the GPUs there are); the data went over the Net.
#[test]
fn ranks_on_separate_hosts_run_kernels_over_the_network() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    // OXCCL_TEST_ACROSS_RANKS: the rank counts (default 2 and 3; each matrix takes minutes
    // over loopback sockets).
    let ranks: Vec<usize> = std::env::var("OXCCL_TEST_ACROSS_RANKS").map_or(vec![2, 3], |v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    // OXCCL_TEST_ACROSS_ALGO: an NCCL_ALGO for these communicators (e.g.
    // `allreduce:doubling`, to run an algorithm at every size that the model picks at some).
    let mut config = config();
    if let Ok(algo) = std::env::var("OXCCL_TEST_ACROSS_ALGO") {
        config.set("NCCL_ALGO", &algo).unwrap();
    }
    for n in ranks {
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        for inputs in [Inputs::Exact, Inputs::Random] {
            let comms = init_on_separate_hosts(&devices, &config);
            let before: Vec<u64> = comms.iter().map(|c| c.net_receive_stats().0).collect();
            let which = if matches!(inputs, Inputs::Exact) { staged_cases } else { random_cases };
            let failures: Vec<String> = std::thread::scope(|s| {
                let handles: Vec<_> = comms.iter().map(|c| s.spawn(move || run_cases(c, &which(c.nranks()), inputs))).collect();
                handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
            });
            for (c, before) in comms.iter().zip(&before) {
                assert!(c.net_receive_stats().0 > *before, "rank {}: nothing was received over the Net", c.rank());
            }
            // The kernels are done: the proxy threads sleep (once a send completed before its
            // announcement reached the proxy and left its link counted busy, and the thread
            // yielded for good: ~50 clock ticks a thread in half a second).
            let busy = common::proxy_threads_idle().1;
            assert!(busy <= 10, "{n} ranks: the proxy threads used {busy} clock ticks of CPU in 500 ms after the kernels were done");
            destroy_all(comms);
            assert!(failures.is_empty(), "{n} ranks on separate hosts, {inputs:?} inputs: {} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
            eprintln!("{n} ranks (threads, separate hosts, kernels over the network) on GPUs {devices:?}: {} cases ok ({inputs:?} inputs)", which(n).len());
        }
    }
}

/// A tuner plugin across hosts (the project's rules tuner): the network kernels' tuner
/// takes its edits and channel count — all_reduce on the ring over LL at every size, on 2
/// channels; broadcast is left to the model. Then the matrix with the plugin loaded, 2
/// ranks as hosts, every call checked.
#[test]
fn a_tuner_plugin_chooses_the_network_kernels() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let tuner = RulesTuner::new("allreduce,0,1099511627776,ring,ll,2,-1\n");
    let devices = [0, 1 % g];
    let comms = init_on_separate_hosts(&devices, &tuner.config());
    for count in [2, 1 << 20] {
        assert_eq!(schedule_of(&comms[0], Collective::AllReduce, count), (Algorithm::Ring, true, 2), "all_reduce of {count} floats under the rule ring/ll on 2 channels");
    }
    run_matrix(comms, &devices, cases, Inputs::Exact, "threads, separate hosts, a tuner plugin");
}

/// NCCL's double binary tree across hosts on the network kernels, forced
/// (NCCL_ALGO=allreduce:tree): three ranks a host each (the odd tree over all of them), and
/// two hosts of two ranks (the trees span the hosts, a chain inside each, the chain's link
/// between GPUs of a host). Every all_reduce of the random matrix, bit for bit against the
/// CPU running the same trees; the data went over the Net.
#[test]
fn the_tree_across_hosts_runs_on_the_network_kernels() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let config = config_with(&[("NCCL_ALGO", "allreduce:tree")]);
    for (hosts, per_host) in [(&["a", "b", "c"][..], 1), (&["a", "a", "b", "b"][..], 2)] {
        let n = hosts.len();
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        let host_ids: Vec<String> = hosts.iter().map(|host| format!("tree-host-{host}")).collect();
        let comms = init_on_hosts(&devices, &config, &host_ids);
        let cases: Vec<Case> = random_cases(n).into_iter().filter(|c| c.collective == Collective::AllReduce).collect();
        for case in &cases {
            match comms[0].route(case.collective, case.count, case.dtype, case.root).unwrap() {
                Route::Schedule { shape, algorithm: Algorithm::Tree, .. } => assert_eq!(shape.per_host, per_host, "{case}"),
                other => panic!("{case}: NCCL_ALGO=allreduce:tree, yet {other:?}"),
            }
        }
        let before: Vec<u64> = comms.iter().map(|c| c.net_receive_stats().0).collect();
        let failures: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = comms.iter().map(|c| s.spawn(|| run_cases(c, &cases, Inputs::Random))).collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        for (c, before) in comms.iter().zip(&before) {
            assert!(c.net_receive_stats().0 > *before, "rank {}: nothing was received over the Net", c.rank());
        }
        destroy_all(comms);
        assert!(failures.is_empty(), "the tree across hosts {hosts:?}: {} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
        eprintln!("the tree across hosts {hosts:?} on GPUs {devices:?}: {} all_reduce cases ok", cases.len());
    }
}

/// PXN for GPU kernels: 4 ranks (threads, sharing the GPUs there are) posing as 2 hosts of
/// 2, rank `2h + i` on rail `i` alone — loopback and the machine's first other IPv4
/// interface, each rank's NCCL_SOCKET_IFNAME naming one (both reach the same machine). A
/// send to a rank of the other rail leaves from the host mate on that rail: its kernel
/// writes the mate's FIFO, the mate's proxy sends it. Every all_reduce, all_gather and
/// broadcast of the random matrix bit for bit against the CPU; each rank's connections
/// checked: every cross-host send leaves on its receiver's rail, some through a relay.
#[test]
fn pxn_relays_kernel_sends_onto_the_receivers_rail() {
    let Some(g) = gpus() else { return };
    let interfaces = oxccl_runtime::bootstrap::iface::list().unwrap();
    let Some(other) = interfaces.iter().find(|i| i.up && !i.loopback && i.addr.is_ipv4()).map(|i| i.name.clone()) else {
        eprintln!("skipped: no IPv4 interface beside loopback for a second rail (interfaces: {interfaces:?})");
        return;
    };
    warm_kernel_cache();
    let rails = ["lo".to_string(), other.clone()];
    let devices: Vec<usize> = (0..4).map(|r| r % g).collect();
    let configs: Vec<Config> = (0..4)
        .map(|rank| {
            let mut config = config();
            config.set("NCCL_HOSTID", &format!("pxn-host-{}", rank / 2)).unwrap();
            config.set("NCCL_SOCKET_IFNAME", &format!("={}", rails[rank % 2])).unwrap();
            config
        })
        .collect();
    settle();
    let comms = Communicator::init_all_gpus_with(&devices, &configs).unwrap();
    let cases: Vec<Case> = random_cases(4).into_iter().filter(|c| matches!(c.collective, Collective::AllReduce | Collective::AllGather | Collective::Broadcast)).collect();
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().map(|c| s.spawn(|| run_cases(c, &cases, Inputs::Random))).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut relayed = 0;
    for c in &comms {
        for connection in c.net_connections().into_iter().filter(|n| n.send) {
            assert_eq!(connection.nic, rails[connection.to % 2], "rank {}: {connection:?} leaves off its receiver's rail", c.rank());
            if connection.proxy != connection.from {
                assert_eq!((connection.proxy / 2, connection.proxy % 2), (connection.from / 2, connection.to % 2), "rank {}: {connection:?}: not relayed by the host mate on the receiver's rail", c.rank());
                relayed += 1;
            }
        }
    }
    destroy_all(comms);
    assert!(failures.is_empty(), "PXN across rails lo and {other}: {} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
    assert!(relayed > 0, "no send was relayed");
    eprintln!("PXN across rails lo and {other} on GPUs {devices:?}: {} cases ok, {relayed} relayed sends", cases.len());
}

/// The matrix, and all_reduce and broadcast large enough to be staged in several pieces
/// (36 MiB + 3 floats: nine, the last shorter), in and out of place; reduce at that size
/// beside them (staged whole).
fn staged_cases(n: usize) -> Vec<Case> {
    let mut all = cases(n);
    all.extend(check::large_cases(n, 36 << 20).into_iter().filter(|c| c.dtype == DataType::Float32 && matches!(c.collective, Collective::AllReduce | Collective::Broadcast | Collective::Reduce)));
    all
}

/// Send/recv groups between ranks on separate hosts, staged like the collectives; the data
/// must go over the Net. Ranks sharing a GPU each run their own groups (a rank with nothing
/// to do in a group runs ahead into the next one).
#[test]
fn staged_send_recv_groups() {
    send_recv_groups_on_separate_hosts(&staged_config(), "staged");
}

/// The same groups over the NET transport (kernels and the proxy).
#[test]
fn send_recv_groups_across_hosts_over_the_network() {
    send_recv_groups_on_separate_hosts(&config(), "kernels over the network");
}

fn send_recv_groups_on_separate_hosts(config: &Config, how: &str) {
    let Some(g) = gpus() else { return };
    for n in [2, 3] {
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        let comms = init_on_separate_hosts(&devices, config);
        let before: Vec<u64> = comms.iter().map(|c| c.net_receive_stats().0).collect();
        let groups = p2p_groups(n, 20);
        let start = Instant::now();
        std::thread::scope(|s| {
            for c in &comms {
                let groups = &groups;
                s.spawn(move || run_p2p_groups(c, groups));
            }
        });
        // The data went over the Net: every rank received through it.
        for (c, before) in comms.iter().zip(before) {
            assert!(c.net_receive_stats().0 > before, "rank {}: no receive over the Net", c.rank());
        }
        destroy_all(comms);
        eprintln!("{n} ranks (separate hosts, {how}) on GPUs {devices:?}: {} send/recv groups ok in {:.1?}", groups.len(), start.elapsed());
    }
}

/// A staged operation waiting for a peer stops on abort, and when the peer leaves.
#[test]
fn a_staged_operation_stops_on_abort_and_when_its_peer_leaves() {
    let Some(g) = gpus() else { return };
    for stop in [Stop::Abort, Stop::PeerLeaves] {
        for receive in [false, true] {
            stop_a_waiting_kernel(g, 1 << 20, receive, stop, Hosts::Staged);
        }
        // An all_reduce staged in pieces (16 MiB: four), stopped in its first.
        stop_a_waiting_kernel(g, 4 << 20, false, stop, Hosts::Staged);
    }
}

/// A kernel waiting across hosts, over the network, for a peer stops on abort, and when
/// the peer leaves (the watcher raises its `gone` flag after the network's grace).
#[test]
fn a_kernel_waiting_across_hosts_stops_on_abort_and_when_its_peer_leaves() {
    let Some(g) = gpus() else { return };
    for stop in [Stop::Abort, Stop::PeerLeaves] {
        stop_each_wait(g, &[1 << 20, 16], stop, Hosts::Network);
    }
}

/// A small call's plan across hosts runs in the executor's LL entry (`ox_run_ll`: LL moves
/// and local copies alone), a large one's in the full entry: the kernel timeline names the
/// LL entry's launches. Every collective at 64 bytes and at 1 MiB a rank, 2 ranks as hosts,
/// each call checked.
#[test]
fn small_calls_across_hosts_run_in_the_executors_ll_entry() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let (dir, traced) = kernel_traced("ll-entry");
    let devices = [0, 1 % g];
    let cases = |n| [check::large_cases(n, 64), check::large_cases(n, 1 << 20)].concat().into_iter().filter(|c| c.dtype == DataType::Float32).collect();
    run_matrix(init_on_separate_hosts(&devices, &traced), &devices, cases, Inputs::Exact, "threads, separate hosts, traced");
    settle();
    let launches: Vec<String> = std::fs::read_dir(&dir).unwrap().flat_map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap().lines().filter(|l| l.starts_with("launch ")).map(String::from).collect::<Vec<_>>()).collect();
    // "launch 3 all_gather 76 B [LL entry]: 1 lane(s), started at ..."
    let bytes = |line: &str| -> usize { line.split(' ').nth(3).unwrap().parse().unwrap_or_else(|_| panic!("no byte count in {line}")) };
    let (ll, full): (Vec<&String>, Vec<&String>) = launches.iter().partition(|l| l.contains(" B [LL entry]: "));
    eprintln!("launches in the LL entry: {}\nin the full entry: {}", ll.len(), full.len());
    for l in &launches {
        eprintln!("  {}", l.split(": ").next().unwrap());
    }
    assert!(ll.iter().any(|l| l.contains(" all_gather ")) && ll.iter().any(|l| l.contains(" reduce_scatter ")), "small calls did not run in the LL entry:\n{}", launches.join("\n"));
    assert!(ll.iter().all(|l| bytes(l) < 1 << 20), "a 1 MiB call ran in the LL entry:\n{}", launches.join("\n"));
    assert!(full.iter().any(|l| bytes(l) >= 1 << 20), "no 1 MiB call ran in the full entry:\n{}", launches.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
