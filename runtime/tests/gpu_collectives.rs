//! The GPU backend on real GPUs: every collective × datatype × op × size, in and out of
//! place, checked against the collectives' definitions (`oxccl_testkit::check`, which
//! knows nothing of schedules or kernels), with ranks as threads and as processes, plus
//! abort of a kernel waiting on a peer that never comes. Output buffers are poisoned
//! before each run, so unwritten elements are caught.
//!
//! Without a GPU every test says "skipped" and passes, unless OXCCL_TEST_GPU=1 (the GPU
//! machine's runner sets it), which turns a missing GPU into a failure. Ranks outnumbering
//! GPUs share them: threads of one process run their kernels side by side; processes on one
//! GPU are time-sliced by it (slower, and each kernel waits for its peer's time slice, but
//! they run: the process tests use two on one GPU when there is only one).

mod common;

use std::time::{Duration, Instant};

use oxccl_runtime::bootstrap::Config;
use oxccl_runtime::algo::Algorithm;
use oxccl_runtime::gpu::{self, Route};
use oxccl_runtime::Memory;
use oxccl_runtime::{Collective, Communicator, DataType, ReduceOp};
use oxccl_testkit::check::{self, Case};

/// The GPUs, once the earlier tests' communicators have freed their memory: a free in the
/// background would hold up this test's CUDA calls while its kernels wait for them.
fn gpus() -> Option<usize> {
    let g = oxccl_testkit::gpus_or_skip(gpu::device_count())?;
    settle();
    Some(g)
}

fn settle() {
    assert!(gpu::wait_for_teardowns(Duration::from_secs(120)), "the communicators dropped before did not finish their teardown within 120 s");
}

fn config() -> Config {
    // NCCL_DEBUG (and NCCL_DEBUG_SUBSYS) set: the library's logs, as a program would see them.
    if std::env::var_os("NCCL_DEBUG").is_some() {
        oxccl_runtime::bootstrap::log::init(&Config::from_env().unwrap());
    }
    let mut c = Config::defaults();
    c.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    c.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    c
}

/// Compiles every kernel specialisation into the disk cache, in parallel, so that the
/// ranks' first calls find them there.
fn warm_kernel_cache() {
    use oxccl_kernels::cuda::{Specialization, Toolchain};
    let toolchain = Toolchain::find().unwrap();
    let specs: Vec<Specialization> = Specialization::all().collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for part in specs.chunks(specs.len().div_ceil(12)) {
            let toolchain = &toolchain;
            s.spawn(move || part.iter().for_each(|&spec| drop(toolchain.compile(spec, "sm_90").unwrap())));
        }
    });
    eprintln!("kernel cache warm in {:.1?}", start.elapsed());
}

/// Device buffers reused by every case of a rank: allocating or freeing GPU memory
/// synchronizes the whole device, which would wait for a kernel of another rank sharing
/// this GPU that waits for this rank's next launch (as with NCCL, never free memory while
/// a collective on the same GPU awaits a launch this thread has yet to make).
struct Buffers {
    send: gpu::DeviceBuffer,
    recv: gpu::DeviceBuffer,
}

impl Buffers {
    fn for_cases(comm: &Communicator, cases: &[Case]) -> Buffers {
        let n = comm.nranks();
        let bytes = cases.iter().map(|c| (n * c.count + 64) * c.dtype.size()).max().unwrap_or(64);
        Buffers { send: comm.alloc(bytes).unwrap(), recv: comm.alloc(bytes).unwrap() }
    }
}

/// What a case runs on and is checked against.
#[derive(Clone, Copy, Debug)]
enum Inputs {
    /// The matrix's small integers, the output checked against the collective's
    /// definition (`check::run_case_on_gpu`).
    Exact,
    /// Random bits and values, the output checked bit for bit against the CPU running the
    /// route the call takes (`check::run_random_case_on_gpu`); case i draws from seed i.
    Random,
}

fn run_cases(comm: &Communicator, cases: &[Case], inputs: Inputs) -> Vec<String> {
    let stream = comm.stream().unwrap();
    let buffers = Buffers::for_cases(comm, cases);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let result = match inputs {
            Inputs::Exact => check::run_case_on_gpu(comm, &stream, &buffers.send, &buffers.recv, case),
            Inputs::Random => check::run_random_case_on_gpu(comm, &stream, &buffers.send, &buffers.recv, case, i as u64),
        };
        match result {
            Ok(None) => {}
            Ok(Some(m)) => failures.push(format!("rank {}: {case}: {m}", comm.rank())),
            Err(e) => {
                failures.push(format!("rank {}: {case}: error: {e}", comm.rank()));
                break;
            }
        }
    }
    failures
}

/// The matrix: small sizes of everything (the direct LL path, by default, and the LL
/// send/recv path for alltoall, gather and scatter), both sides of the direct path's limit
/// (OXCCL_GPU_DIRECT_BYTES unset: 1 MiB from all peers together up to 3 ranks, 2 MiB from
/// 4) and of the LL send/recv limit
/// (64 KiB blocks) in every datatype, then 8 MiB blocks of every collective (the ring: several channels, many
/// slots each) and odd datatypes at that size.
fn cases(n: usize) -> Vec<Case> {
    let mut cases = check::full_matrix(n, &check::SMALL_COUNTS);
    for dtype in DataType::ALL {
        let at_limit = Config::defaults().gpu_direct_limit(n) / (n - 1) / dtype.size();
        let edge = check::full_matrix(n, &[at_limit, at_limit + 1]);
        cases.extend(edge.into_iter().filter(|c| c.dtype == dtype && matches!(c.op, ReduceOp::Sum | ReduceOp::PreMulSum(_))));
    }
    // alltoall, gather and scatter on both sides of the LL send/recv limit
    // (NCCL_P2P_LL_THRESHOLD, 64 KiB blocks): up to it they run as one LL group.
    for dtype in DataType::ALL {
        let at_limit = (64 << 10) / dtype.size();
        let edge = check::full_matrix(n, &[at_limit, at_limit + 1]);
        cases.extend(edge.into_iter().filter(|c| c.dtype == dtype && matches!(c.collective, Collective::AllToAll | Collective::Gather | Collective::Scatter)));
    }
    cases.extend(check::large_cases(n, 8 << 20));
    cases
}

/// The small sizes again with LL excluded (NCCL_PROTO=simple): the ring at every size.
fn simple_cases(n: usize) -> Vec<Case> {
    check::full_matrix(n, &check::SMALL_COUNTS)
}

fn simple_config() -> Config {
    config_with(&[("NCCL_PROTO", "simple")])
}

/// [`config`] with `settings` (name, value) set.
fn config_with(settings: &[(&str, &str)]) -> Config {
    let mut c = config();
    for (name, value) in settings {
        c.set(name, value).unwrap();
    }
    c
}

/// Across hosts, every call staged through host memory (OXCCL_GPU_ACROSS_HOSTS=staged).
fn staged_config() -> Config {
    config_with(&[("OXCCL_GPU_ACROSS_HOSTS", "staged")])
}

fn threads(n: usize, gpus: usize, which: fn(usize) -> Vec<Case>) {
    threads_with(n, gpus, which, Inputs::Exact, &config());
}

fn threads_with(n: usize, gpus: usize, which: fn(usize) -> Vec<Case>, inputs: Inputs, config: &Config) {
    let devices: Vec<usize> = (0..n).map(|r| r % gpus).collect();
    run_matrix(init_all(&devices, config), &devices, which, inputs, "threads");
}

/// Runs `which` cases on every rank of `comms` (threads), checks them, and frees the ranks.
fn run_matrix(comms: Vec<Communicator>, devices: &[usize], which: fn(usize) -> Vec<Case>, inputs: Inputs, how: &str) {
    let (start, n) = (Instant::now(), comms.len());
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().map(|c| s.spawn(move || run_cases(c, &which(c.nranks()), inputs))).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    std::thread::scope(|s| {
        for c in comms {
            s.spawn(move || drop(c));
        }
    });
    assert!(failures.is_empty(), "{n} ranks on GPUs {devices:?}, {inputs:?} inputs: {} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
    eprintln!("{n} ranks ({how}) on GPUs {devices:?}: {} cases ok ({inputs:?} inputs) in {:.1?}", which(n).len(), start.elapsed());
}

/// Ranks as threads on `devices`, made once the communicators dropped before have freed
/// their memory (see [`gpus`]).
fn init_all(devices: &[usize], config: &Config) -> Vec<Communicator> {
    settle();
    Communicator::init_all_gpus(devices, config).unwrap()
}

/// Ranks of one job as threads, each with a host id of its own (NCCL_HOSTID), as if on
/// separate hosts (made as [`init_all`]'s are).
fn init_on_separate_hosts(devices: &[usize], config: &Config) -> Vec<Communicator> {
    let hosts: Vec<String> = (0..devices.len()).map(|rank| format!("test-host-{rank}")).collect();
    init_on_hosts(devices, config, &hosts)
}

/// Ranks of one job as threads, rank r on GPU `devices[r]` with host id `hosts[r]`.
fn init_on_hosts(devices: &[usize], config: &Config, hosts: &[String]) -> Vec<Communicator> {
    settle();
    let configs: Vec<Config> = hosts
        .iter()
        .map(|host| {
            let mut config = config.clone();
            config.set("NCCL_HOSTID", host).unwrap();
            config
        })
        .collect();
    Communicator::init_all_gpus_with(devices, &configs).unwrap()
}

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
            std::thread::scope(|s| {
                for c in comms {
                    s.spawn(move || drop(c));
                }
            });
            assert!(failures.is_empty(), "{n} ranks on separate hosts, {inputs:?} inputs: {} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
            eprintln!("{n} ranks (threads, separate hosts, kernels over the network) on GPUs {devices:?}: {} cases ok ({inputs:?} inputs)", which(n).len());
        }
    }
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
        std::thread::scope(|s| {
            for c in comms {
                s.spawn(move || drop(c));
            }
        });
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
    std::thread::scope(|s| {
        for c in comms {
            s.spawn(move || drop(c));
        }
    });
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
        std::thread::scope(|s| {
            for c in comms {
                s.spawn(move || drop(c));
            }
        });
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
        for receive in [false, true] {
            for count in [1 << 20, 16] {
                stop_a_waiting_kernel(g, count, receive, stop, Hosts::Network);
            }
        }
    }
}

#[test]
fn ranks_as_threads() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    threads(2, g, cases);
    threads(4, g, cases);
    if g > 2 {
        threads(g, g, cases);
    }
    threads_with(2, g, simple_cases, Inputs::Exact, &simple_config());
    threads_with(3, g, simple_cases, Inputs::Exact, &simple_config());
}

/// GPUs shared unevenly: five ranks on two GPUs (three on the first, two on the second),
/// so that one call has ranks reaching each other through shared memory on one GPU and
/// through peer-to-peer across the two, with the GPUs' ranks out of step.
#[test]
fn five_ranks_shared_unevenly_across_two_gpus() {
    let Some(g) = gpus() else { return };
    if g < 2 {
        eprintln!("one GPU: nothing uneven to share");
        return;
    }
    warm_kernel_cache();
    threads(5, 2, cases);
    threads_with(5, 2, simple_cases, Inputs::Exact, &simple_config());
}

/// Random inputs (every bit pattern of every datatype: NaN, infinities, subnormals, sums
/// and products that round) through every route a call takes — the direct kernel, the LL
/// exchanges, the ring and direct-exchange schedules on one and on many channels — each
/// output bit for bit what the CPU computes running the same route
/// (`check::gpu_reference`: the schedule the kernel ran, interpreted step by step with the
/// host executor's arithmetic, or the direct kernel's rank-order fold). Then the small
/// sizes with LL excluded, so that the ring runs every datatype and op, and the matrix on
/// lanes of hundreds of steps.
#[test]
fn every_route_matches_the_cpu_bit_for_bit() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let mut ranks = vec![2, 4];
    if g > 2 {
        ranks.push(g);
    }
    for n in ranks {
        threads_with(n, g, random_cases, Inputs::Random, &config());
    }
    threads_with(3, g, simple_cases, Inputs::Random, &simple_config());
    // Lanes of hundreds of steps (one channel, 16 KiB slots): the kernel keeps a window of
    // a lane's steps in shared memory and loads the next as it goes.
    let long = config_with(&[("NCCL_MAX_NCHANNELS", "1"), ("OXCCL_GPU_SLOT_BYTES", "16K")]);
    threads_with(4, g, random_cases, Inputs::Random, &long);
}

/// Between the GPUs of a host over LL: with the direct kernel off and OXCCL_GPU_LL_BYTES
/// past every size, the executor runs every call of the random-input matrix over its LL
/// slots (the ring and the direct exchange on one and on many channels, a rank's lines
/// written straight into its peer's slots), each output bit for bit what the CPU computes
/// running the same schedule, on 2, 3 and 4 ranks (and one per GPU); then NCCL_PROTO=LL
/// alone, which takes LL at every size (the exact matrix at 1 MiB per rank).
#[test]
fn the_executor_over_ll_between_gpus_matches_the_cpu_bit_for_bit() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let ll = config_with(&[("OXCCL_GPU_DIRECT_BYTES", "0"), ("OXCCL_GPU_LL_BYTES", "1G")]);
    let mut ranks = vec![2, 3, 4];
    if g > 4 {
        ranks.push(g);
    }
    for n in ranks {
        threads_with(n, g, random_cases, Inputs::Random, &ll);
    }
    threads_with(3, g, ll_alone_cases, Inputs::Exact, &config_with(&[("NCCL_PROTO", "LL")]));
}

/// OXCCL_KERNEL_TRACE: each rank writes its communicator's executor kernel timeline when
/// the communicator goes: every launch of the ring's all_reduce with its lanes, every step
/// of lane 0 stamped at its four moments in order, and the per-step medians.
#[test]
fn the_kernel_timeline_stamps_every_step_in_order() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let dir = std::env::temp_dir().join(format!("oxccl-kernel-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let traced = config_with(&[("OXCCL_KERNEL_TRACE", dir.join("kernel").to_str().unwrap())]);
    threads_with(2, g, |n| check::large_cases(n, 4 << 20).into_iter().filter(|c| c.collective == Collective::AllReduce && c.dtype == DataType::Float32).collect(), Inputs::Exact, &traced);
    settle();
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 2, "one timeline per rank: {files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.starts_with("# oxccl kernel timeline, rank "), "{}: {text}", file.display());
        // The cases' all_reduce: 4 MiB and 3 floats a rank.
        assert!(text.contains("all_reduce 4194316 B") && text.contains("median ns per step"), "{}: {text}", file.display());
        // Lane 0's steps: four stamps each, none missing, in order, each step after the last.
        let mut last = 0u64;
        let mut steps = 0;
        let mut in_lane0 = false;
        for line in text.lines() {
            if line.starts_with("launch ") {
                last = 0;
            } else if let Some(rest) = line.strip_prefix("  lane ") {
                in_lane0 = rest.starts_with("0:");
            } else if let Some(rest) = line.strip_prefix("    step ").filter(|_| in_lane0) {
                let stamps: Vec<u64> = rest.split_once(": ").unwrap().1.split(' ').map(|t| t.strip_prefix('+').unwrap_or_else(|| panic!("{}: a stamp missing in {line}", file.display())).parse().unwrap()).collect();
                assert_eq!(stamps.len(), 4, "{line}");
                assert!(stamps.windows(2).all(|w| w[0] <= w[1]) && stamps[0] >= last, "{}: out of order: {line}", file.display());
                last = stamps[3];
                steps += 1;
            }
        }
        assert!(steps > 0, "{}: no step of lane 0\n{text}", file.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every collective but the exchanges (whose large blocks need Simple) at 1 MiB per rank.
fn ll_alone_cases(n: usize) -> Vec<Case> {
    check::large_cases(n, 1 << 20).into_iter().filter(|c| !matches!(c.collective, Collective::AllToAll | Collective::Gather | Collective::Scatter)).collect()
}

/// The random-input matrix: every collective × datatype × op at 0, 1, 7 and 4099 elements, in
/// and out of place; all_reduce on both sides of the direct kernel's limit (the largest
/// direct call, the smallest ring call) in every datatype (sum; PreMulSum and Avg for the
/// floats); and every collective at 3 MiB per rank (the ring or the direct exchange on
/// many channels) with the odd datatypes' all_reduce at that size.
fn random_cases(n: usize) -> Vec<Case> {
    let mut cases = check::full_matrix(n, &check::SMALL_COUNTS);
    for dtype in DataType::ALL {
        let at_limit = Config::defaults().gpu_direct_limit(n) / (n - 1) / dtype.size();
        let edge = check::full_matrix(n, &[at_limit, at_limit + 1]);
        let op_kept = |op: ReduceOp| op == ReduceOp::Sum || (dtype.is_float() && matches!(op, ReduceOp::Avg | ReduceOp::PreMulSum(_)));
        cases.extend(edge.into_iter().filter(|c| c.dtype == dtype && c.collective == Collective::AllReduce && op_kept(c.op)));
    }
    cases.extend(check::large_cases(n, 3 << 20));
    cases
}

/// Every collective at 256 MiB + 3 elements per rank (in and out of place), and all_reduce
/// at 1 GiB + 12 bytes: 2 ranks on 2 GPUs, checked like the matrix.
fn large(n: usize) -> Vec<Case> {
    let mut cases: Vec<Case> = check::large_cases(n, 256 << 20).into_iter().filter(|c| c.dtype == DataType::Float32).collect();
    cases.push(Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: (1 << 28) + 3, root: 0, in_place: false });
    cases
}

#[test]
fn large_messages() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    threads(2, g, large);
}

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
        cmd.args(["child", "--exact", "--nocapture", "--test-threads", "1"]).env("OXCCL_TEST_GPU_CHILD", n.to_string()).env("NCCL_SOCKET_IFNAME", "lo");
        if separate_hosts {
            cmd.env("NCCL_HOSTID", format!("test-host-{rank}"));
        }
        cmd
    })
    .unwrap();
    job.wait(Duration::from_secs(400), Duration::from_secs(20)).unwrap_or_else(|e| panic!("{n} processes (separate hosts: {separate_hosts}): {e}"));
    eprintln!("{n} ranks (processes{}): GPU matrix ok in {:.1?}", if separate_hosts { ", separate hosts" } else { "" }, start.elapsed());
}

/// A kernel waiting for a peer that never sends stops when abort is called from another
/// thread, and the waiting synchronize returns an error at once.
#[test]
fn abort_stops_a_kernel_waiting_on_a_silent_peer() {
    let Some(g) = gpus() else { return };
    // The ring (4 MiB) and the direct LL path (4 KiB); a receive over the Simple FIFOs
    // (4 MiB) and over LL (4 KiB).
    for count in [1 << 20, 1 << 10] {
        for receive in [false, true] {
            stop_a_waiting_kernel(g, count, receive, Stop::Abort, Hosts::One);
        }
    }
}

/// A kernel waiting for a peer that destroys its communicator instead (the ranks' calls
/// differ) stops once the peer is gone, with an error naming it, instead of waiting for
/// the collective timeout (60 s here).
#[test]
fn a_peer_that_leaves_stops_the_kernel_waiting_for_it() {
    let Some(g) = gpus() else { return };
    for count in [1 << 20, 1 << 10] {
        for receive in [false, true] {
            stop_a_waiting_kernel(g, count, receive, Stop::PeerLeaves, Hosts::One);
        }
    }
    a_peer_that_leaves_stops_the_ring(g);
}

/// Three ranks on a ring: rank 2 leaves while ranks 0 and 1 all_reduce. Rank 0 waits for
/// rank 2 directly, rank 1 (also) for rank 0, whose kernel stops: rank 0 tells the job,
/// so both fail naming rank 2 within a second.
fn a_peer_that_leaves_stops_the_ring(g: usize) {
    let count = 1 << 20;
    let comms = init_all(&[0, 1 % g, 2 % g], &config());
    let mut comms = comms.into_iter();
    let (stay, mut leaver) = ([comms.next().unwrap(), comms.next().unwrap()], comms.next());
    // Memory first: allocating waits for the GPU's running kernels.
    let mine: Vec<_> = stay.iter().map(|c| (c.stream().unwrap(), c.alloc(count * 4).unwrap())).collect();
    let start = Instant::now();
    let results = std::thread::scope(|s| {
        let waiting: Vec<_> = stay
            .iter()
            .zip(&mine)
            .map(|(c, (stream, buf))| {
                s.spawn(move || {
                    // SAFETY: a buffer of `count` floats, synchronized before it is freed.
                    unsafe { c.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
                    (c.wait(stream), Instant::now())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let left_at = Instant::now();
        drop(leaver.take());
        waiting.into_iter().map(|w| w.join().unwrap()).map(|(r, at)| (r, at.saturating_duration_since(left_at))).collect::<Vec<_>>()
    });
    for (rank, (result, latency)) in results.into_iter().enumerate() {
        let e = result.expect_err("the all_reduce cannot finish without rank 2");
        eprintln!("3-rank ring, rank {rank}: synchronize returned {latency:.2?} after rank 2 left: {e}");
        assert!(matches!(e, oxccl_runtime::Error::PeerFailed { rank: 2, .. }), "rank {rank}: {e}");
        assert!(latency < Duration::from_secs(1), "rank {rank} took {latency:.2?} to stop");
    }
    drop(mine);
    drop(stay);
    assert!(start.elapsed() < Duration::from_secs(15), "3-rank ring case took {:.1?}", start.elapsed());
}

/// What stops rank 0's kernel waiting for rank 1.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop {
    /// Another thread of rank 0 calls abort.
    Abort,
    /// Rank 1 destroys its communicator.
    PeerLeaves,
}

/// Where the two ranks of [`stop_a_waiting_kernel`] are.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hosts {
    /// One host: the GPU connections.
    One,
    /// Separate hosts, staged: rank 0's stream waits for the host path, which waits for
    /// rank 1 over the Net.
    Staged,
    /// Separate hosts, the kernel over the network.
    Network,
}

fn stop_a_waiting_kernel(g: usize, count: usize, receive: bool, stop: Stop, hosts: Hosts) {
    // Kernels compiled first: the receive's first launch compiles the byte-copy kernel with
    // NVRTC (2.1-3.4 s with a cold cache on one H200), which no abort interrupts; a stop
    // that came during it was measured as the abort's latency (1.08 s, over the bound).
    warm_kernel_cache();
    let separate_hosts = hosts != Hosts::One;
    let comms = match hosts {
        Hosts::One => init_all(&[0, 1 % g], &config()),
        Hosts::Staged => init_on_separate_hosts(&[0, 1 % g], &staged_config()),
        Hosts::Network => init_on_separate_hosts(&[0, 1 % g], &config()),
    };
    // Both ranks run one all_reduce: the connections exist, so the next call needs no
    // setup from the peer.
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let stream = c.stream().unwrap();
                let buf = c.alloc(count * 4).unwrap();
                // SAFETY: a buffer of `count` floats, synchronized before it is freed.
                unsafe { c.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
                c.wait(&stream).unwrap();
            });
        }
    });
    // Now rank 0 alone: its kernel waits for rank 1 forever, until stopped.
    let mut comms = comms.into_iter();
    let (c, mut peer) = (comms.next().unwrap(), comms.next());
    let stream = c.stream().unwrap();
    let buf = c.alloc(count * 4).unwrap();
    // The stop comes 300 ms after the enqueue returned, or after 2 s if it has not: a CUDA
    // call may wait in the driver while another thread frees GPU memory (a communicator's
    // teardown, here an earlier test's), and a free waits for every kernel on the GPU —
    // this operation's included, until it is stopped.
    let start = Instant::now();
    let (enqueue_returned, returns) = std::sync::mpsc::channel::<()>();
    let (result, enqueued, returned, stopped_at) = std::thread::scope(|s| {
        let (c, peer) = (&c, &mut peer);
        let stopper = s.spawn(move || {
            let _ = returns.recv_timeout(Duration::from_secs(2));
            std::thread::sleep(Duration::from_millis(300));
            let at = Instant::now();
            match stop {
                Stop::Abort => c.abort(),
                Stop::PeerLeaves => drop(peer.take()),
            }
            at
        });
        // SAFETY: as above.
        let enqueue = unsafe {
            if receive {
                c.launch_p2p(&[gpu::P2p { send: false, peer: 1, addr: buf.ptr(), bytes: count * 4 }], stream.raw())
            } else {
                c.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw())
            }
        };
        let enqueued = Instant::now();
        let _ = enqueue_returned.send(());
        // An enqueue that returns after the stop may fail with its error itself.
        let result = enqueue.and_then(|()| c.wait(&stream));
        (result, enqueued, Instant::now(), stopper.join().unwrap())
    });
    let e = result.expect_err("the operation cannot finish without rank 1");
    // When, for a failure's message: the enqueue's return, the stop, the wait's return.
    let when = format!("since the start: enqueued at {:.1?}, {stop:?} at {:.1?}, wait returned at {:.1?}", enqueued - start, stopped_at - start, returned - start);
    match stop {
        Stop::Abort => assert!(matches!(e, oxccl_runtime::Error::Aborted { .. }), "{e} ({when})"),
        // Staged, the host path names the peer as its Net connection ends.
        Stop::PeerLeaves => assert!(matches!(e, oxccl_runtime::Error::PeerFailed { rank: 1, .. }) && (separate_hosts || e.to_string().contains("left")), "{e} ({when})"),
    }
    assert!(c.error().is_some());
    let latency = returned.saturating_duration_since(stopped_at);
    eprintln!("{count} floats ({}, {hosts:?}): synchronize returned {latency:.2?} after {stop:?} ({when}): {e}", if receive { "recv" } else { "all_reduce" });
    // Across hosts, a peer that left is waited for during the network's grace (2 s, as the
    // host path: what it sent may still be on the wire).
    let bound = Duration::from_secs(if separate_hosts && stop == Stop::PeerLeaves { 5 } else { 1 });
    assert!(latency < bound, "{stop:?} took {latency:.2?} to stop the kernel");
    let start = Instant::now();
    drop(buf);
    drop(stream);
    drop(c);
    drop(peer);
    assert!(start.elapsed() < Duration::from_secs(10), "teardown after {stop:?} took {:.1?}", start.elapsed());
}

/// Sends and receives on GPU buffers: every rank exchanges with every rank (itself
/// included) in one group, sizes from 1 byte to 8 MiB + 3, each byte checked.
#[test]
fn send_and_receive_between_every_pair() {
    let Some(g) = gpus() else { return };
    for n in [2, 4] {
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        let comms = init_all(&devices, &config());
        let pattern = |from: usize, to: usize, len: usize| -> Vec<u8> { (0..len).map(|i| ((from * 31 + to * 7 + i * 13) % 251) as u8).collect() };
        std::thread::scope(|s| {
            for c in &comms {
                s.spawn(move || {
                    let (rank, n) = (c.rank(), c.nranks());
                    let stream = c.stream().unwrap();
                    // Allocated once: freeing GPU memory mid-run would wait for a kernel of a
                    // rank sharing the GPU (see Buffers).
                    let max = (8 << 20) + 3;
                    let sends: Vec<_> = (0..n).map(|_| c.alloc(max).unwrap()).collect();
                    let recvs: Vec<_> = (0..n).map(|_| c.alloc(max).unwrap()).collect();
                    for len in [1usize, 7, 4099, (1 << 20) + 3, max] {
                        let mut ops = Vec::new();
                        for p in 0..n {
                            sends[p].upload(&pattern(rank, p, len)).unwrap();
                            recvs[p].upload(&vec![0xA5; len]).unwrap();
                            ops.push(gpu::P2p { send: true, peer: p, addr: sends[p].ptr(), bytes: len });
                            ops.push(gpu::P2p { send: false, peer: p, addr: recvs[p].ptr(), bytes: len });
                        }
                        // SAFETY: buffers of `len` bytes, synchronized before they are read or freed.
                        unsafe { c.launch_p2p(&ops, stream.raw()).unwrap() };
                        c.wait(&stream).unwrap();
                        for (p, recv) in recvs.iter().enumerate() {
                            let mut got = vec![0u8; len];
                            recv.download(&mut got).unwrap();
                            assert!(got == pattern(p, rank, len), "{n} ranks: rank {rank} from {p}, {len} bytes: wrong data");
                        }
                    }
                });
            }
        });
        std::thread::scope(|s| {
            for c in comms {
                s.spawn(move || drop(c));
            }
        });
        eprintln!("{n} ranks: send/recv between every pair ok");
    }
}

/// Groups of sends and receives as programs make them: each group a random set of
/// messages between random pairs (several to one peer, self included), sizes on both sides
/// of the LL limit (NCCL_P2P_LL_THRESHOLD, 64 KiB) and of a line, each rank calling its
/// part in an order of its own; first the two patterns the protocol model found deadlocks
/// in for other lane layouts (tests/protocol_models/p2p.rs). 60 groups in a row run the message counters
/// through both inbox halves many times; every byte is checked, outputs poisoned.
/// OXCCL_TEST_P2P_GROUPS sets the number of groups (default 60), OXCCL_TEST_P2P_RANKS the
/// rank counts (default "2 3 4").
#[test]
fn groups_of_small_and_large_messages() {
    let Some(g) = gpus() else { return };
    let count: usize = std::env::var("OXCCL_TEST_P2P_GROUPS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let ranks: Vec<usize> = std::env::var("OXCCL_TEST_P2P_RANKS").unwrap_or_else(|_| "2 3 4".into()).split_whitespace().map(|v| v.parse().expect("OXCCL_TEST_P2P_RANKS: rank counts")).collect();
    let config = config_with(&[("OXCCL_COLL_TIMEOUT_MS", "20000")]);
    for n in ranks {
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        let comms = init_all(&devices, &config);
        let groups = p2p_groups(n, count);
        let start = Instant::now();
        std::thread::scope(|s| {
            for c in &comms {
                let groups = &groups;
                s.spawn(move || run_p2p_groups(c, groups));
            }
        });
        std::thread::scope(|s| {
            for c in comms {
                s.spawn(move || drop(c));
            }
        });
        let messages: usize = groups.iter().map(Vec::len).sum();
        eprintln!("{n} ranks: {} groups, {messages} messages ok in {:.1?}", groups.len(), start.elapsed());
    }
}

/// A message of a test group: `bytes` from `from` to `to`.
#[derive(Clone, Copy, Debug)]
struct Message {
    from: usize,
    to: usize,
    bytes: usize,
}

fn p2p_groups(n: usize, count: usize) -> Vec<Vec<Message>> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    let mut rng = move |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below as u64) as usize
    };
    const SIZES: [usize; 9] = [1, 7, 8, 64, 4099, 65535, 65536, 65537, 200_003];
    let m = |from: usize, to: usize, bytes: usize| Message { from, to, bytes };
    // Two ranks each sending three before receiving; a cycle, each rank sending three to
    // its successor, then one to its predecessor.
    let mut groups = vec![(0..3).flat_map(|_| [m(0, 1, 4099), m(1, 0, 4099)]).collect::<Vec<_>>()];
    // Twenty small messages each way in one group: each waits for the peer's
    // acknowledgement of the one two before it.
    groups.push((0..20).flat_map(|_| [m(0, 1, 64), m(1, 0, 64)]).collect());
    if n >= 3 {
        groups.push((0..3).flat_map(|r| [m(r, (r + 1) % 3, 64), m(r, (r + 1) % 3, 64), m(r, (r + 1) % 3, 64), m(r, (r + 2) % 3, 64)]).collect());
    }
    while groups.len() < count {
        let group = (0..1 + rng(3 * n)).map(|_| m(rng(n), rng(n), SIZES[rng(SIZES.len())])).collect();
        groups.push(group);
    }
    groups
}

fn p2p_pattern(group: usize, index: usize, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| ((group * 131 + index * 31 + i * 7 + i / 251) % 253) as u8).collect()
}

/// Runs `groups` as this rank's part: its sends and receives of each group in an order of
/// its own (a shuffle seeded by rank and group), then checks what arrived.
fn run_p2p_groups(c: &Communicator, groups: &[Vec<Message>]) {
    let rank = c.rank();
    let stream = c.stream().unwrap();
    let most = groups.iter().map(|g| g.iter().map(|m| m.bytes.next_multiple_of(64)).sum::<usize>()).max().unwrap();
    // Allocated once (see Buffers).
    let (sends, recvs) = (c.alloc(most).unwrap(), c.alloc(most).unwrap());
    for (gi, group) in groups.iter().enumerate() {
        // Each message's place in this rank's buffers.
        let mut ops = Vec::new();
        let mut expected = Vec::new();
        let (mut send_at, mut recv_at) = (0, 0);
        let mut send_image = vec![0u8; most];
        for (i, msg) in group.iter().enumerate() {
            if msg.from == rank {
                send_image[send_at..send_at + msg.bytes].copy_from_slice(&p2p_pattern(gi, i, msg.bytes));
                ops.push(gpu::P2p { send: true, peer: msg.to, addr: sends.ptr() + send_at as u64, bytes: msg.bytes });
                send_at += msg.bytes.next_multiple_of(64);
            }
            if msg.to == rank {
                ops.push(gpu::P2p { send: false, peer: msg.from, addr: recvs.ptr() + recv_at as u64, bytes: msg.bytes });
                expected.push((recv_at, gi, i, *msg));
                recv_at += msg.bytes.next_multiple_of(64);
            }
        }
        // This rank's own call order: shuffled, then each peer and direction's calls put
        // back in message order (a pair's calls match in order, as in NCCL).
        let mut seed = (rank as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D) ^ gi as u64;
        let mut keyed: Vec<(u64, gpu::P2p)> = ops
            .iter()
            .map(|&o| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 33, o)
            })
            .collect();
        keyed.sort_by_key(|&(k, _)| k);
        let mut calls: Vec<gpu::P2p> = keyed.into_iter().map(|(_, o)| o).collect();
        let lanes: std::collections::BTreeSet<(usize, bool)> = ops.iter().map(|o| (o.peer, o.send)).collect();
        for lane in lanes {
            let mut in_order = ops.iter().copied().filter(|o| (o.peer, o.send) == lane);
            for call in calls.iter_mut().filter(|o| (o.peer, o.send) == lane) {
                *call = in_order.next().expect("as many calls as messages");
            }
        }
        sends.upload(&send_image).unwrap();
        recvs.upload(&vec![0xA5; most]).unwrap();
        // SAFETY: every range lies in these buffers, synchronized before they are read.
        unsafe { c.launch_p2p(&calls, stream.raw()).unwrap() };
        c.wait(&stream).unwrap_or_else(|e| panic!("rank {rank}, group {gi} {group:?}: {e}"));
        let mut got = vec![0u8; most];
        recvs.download(&mut got).unwrap();
        for (at, gi, i, msg) in expected {
            let want = p2p_pattern(gi, i, msg.bytes);
            if let Some(b) = (0..msg.bytes).find(|&b| got[at + b] != want[b]) {
                panic!("rank {rank}, group {gi}, message {i} {msg:?}: byte {b} is {:#x}, expected {:#x}", got[at + b], want[b]);
            }
        }
    }
    // Ranks meet before freeing their buffers: a rank whose last group needed nobody can
    // finish early, and freeing GPU memory waits for the whole GPU, where another rank's
    // kernel may wait for a launch still to come (without this the 3-rank run hung in
    // its last group, on one H100). A host all_reduce is the meeting: bounded by the
    // collective timeout, so a rank that failed before it fails the others, not hangs them.
    c.barrier().unwrap_or_else(|e| panic!("rank {rank}: meeting the others before freeing: {e}"));
}

/// One rank of the dead-peer job (does nothing when run as an ordinary test): both ranks
/// all_reduce once; then rank 1 SIGKILLs itself while rank 0's next all_reduce waits for
/// it in a kernel, which must stop — the control plane sees the death and raises the
/// kernels' abort flag — with an error naming rank 1, within 5 s.
#[test]
fn death_child() {
    if std::env::var("OXCCL_TEST_GPU_DEATH").is_err() {
        return;
    }
    let gpus = gpu::device_count();
    let comm = Communicator::from_env(&Config::from_env().unwrap()).unwrap();
    let rank = comm.rank();
    let dev = comm.with_memory(Memory::Gpu { device: rank % gpus }).unwrap();
    let stream = dev.stream().unwrap();
    let count = 1 << 20;
    let buf = dev.alloc(count * 4).unwrap();
    // SAFETY: a buffer of `count` floats, waited for before it is freed.
    unsafe { dev.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
    dev.wait(&stream).unwrap();
    // Both ranks are past the first all_reduce (a host all_reduce as the barrier).
    dev.barrier().unwrap();
    if rank == 1 {
        let signal = if std::env::var("OXCCL_TEST_GPU_DEATH").as_deref() == Ok("stop") { libc::SIGSTOP } else { libc::SIGKILL };
        // SAFETY: raising a signal has no preconditions.
        unsafe { libc::raise(signal) };
    }
    // SAFETY: as above.
    unsafe { dev.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
    let start = Instant::now();
    let e = dev.wait(&stream).expect_err("rank 1 is dead: the all_reduce cannot finish");
    let took = start.elapsed();
    println!("rank 0: the kernel waiting on dead rank 1 stopped after {took:.2?}: {e}");
    assert!(e.to_string().contains("rank 1"), "{e}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_dead_peer_stops_the_kernel_waiting_for_it() {
    if gpus().is_none() {
        return;
    }
    dead_peer(false, "kill");
}

/// The same across hosts (each process a host of its own): the kernel waits over the
/// network; a SIGKILLed peer, and a SIGSTOPped one (found by the heartbeats, 1 s here).
#[test]
fn a_dead_or_stopped_peer_across_hosts_stops_the_kernel_waiting_for_it() {
    if gpus().is_none() {
        return;
    }
    dead_peer(true, "kill");
    dead_peer(true, "stop");
}

fn dead_peer(separate_hosts: bool, how: &str) {
    let job = oxccl_runtime::bootstrap::spawn::spawn(2, &config(), |rank| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["death_child", "--exact", "--nocapture", "--test-threads", "1"])
            .env("OXCCL_TEST_GPU_DEATH", how)
            .env("OXCCL_HEARTBEAT_TIMEOUT_MS", "1000")
            .env("NCCL_SOCKET_IFNAME", "lo")
            .stdout(std::process::Stdio::piped());
        if separate_hosts {
            cmd.env("NCCL_HOSTID", format!("test-host-{rank}"));
        }
        cmd
    })
    .unwrap();
    let pids = job.pids();
    // A stopped rank 1 never exits by itself: killed once rank 0 is done.
    let killer = (how == "stop").then(|| {
        let pid = pids[1];
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            // SAFETY: kill has no preconditions; the pid is our child's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        })
    });
    let outputs = job.wait_with_output(Duration::from_secs(120)).unwrap();
    drop(killer);
    let (status, out) = &outputs[0];
    eprintln!("{out}");
    assert!(status.success(), "rank 0 failed ({how}, separate hosts: {separate_hosts}): {out}");
    assert!(out.contains("stopped after"), "{out}");
}

/// ncclCommSuspend/Resume on the GPU backend: a suspension with NCCL_SUSPEND_MEM frees the
/// plans and refuses collectives and send/recv (InvalidUsage naming it) until resumed;
/// after resume both paths (the ring, the direct LL one) give checked results again.
#[test]
fn suspend_releases_plans_and_resume_restores_service() {
    let Some(g) = gpus() else { return };
    let comms = init_all(&[0, 1 % g], &config());
    let cases = [
        Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: 1 << 20, root: 0, in_place: false },
        Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: 999, root: 0, in_place: true },
    ];
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let stream = c.stream().unwrap();
                let buffers = Buffers::for_cases(c, &cases);
                let run = |case: &Case| check::run_case_on_gpu(c, &stream, &buffers.send, &buffers.recv, case).unwrap();
                cases.iter().for_each(|case| assert!(run(case).is_none(), "rank {}: {case} before suspending", c.rank()));
                let before = c.memory_stats();
                assert!(before.releasable > 0 && before.persistent > 0 && !before.suspended, "{before:?}");
                c.suspend(true).unwrap();
                let during = c.memory_stats();
                assert!(during.suspended && during.releasable == 0 && during.persistent == before.persistent, "{during:?}");
                // SAFETY: refused before anything is launched.
                let e = unsafe { c.launch_collective(Collective::AllReduce, buffers.send.ptr(), buffers.recv.ptr(), 8, DataType::Float32, ReduceOp::Sum, 0, stream.raw()) }.unwrap_err();
                assert!(e.to_string().contains("suspended"), "{e}");
                let p2p = [gpu::P2p { send: true, peer: 1 - c.rank(), addr: buffers.send.ptr(), bytes: 64 }];
                // SAFETY: as above.
                let e = unsafe { c.launch_p2p(&p2p, stream.raw()) }.unwrap_err();
                assert!(e.to_string().contains("suspended"), "{e}");
                assert!(c.suspend(false).is_err(), "a second suspension is refused");
                c.resume().unwrap();
                assert!(c.resume().is_err(), "resuming twice is refused");
                assert!(c.memory_stats().releasable > 0);
                cases.iter().for_each(|case| assert!(run(case).is_none(), "rank {}: {case} after resuming", c.rank()));
            });
        }
    });
}

/// More distinct plans than a communicator caches (512): send/recv groups of 4000 sizes on
/// the Simple path, each a plan of its own, the first 2600 enqueued without waiting (the
/// cache starts over in new arenas while the old ones' kernels are queued, and past four
/// such arenas waits for the stream), the rest with a wait every 100 (old arenas reused).
/// Every message is checked, and the plans' memory stays bounded.
#[test]
fn more_plans_than_the_cache_holds() {
    let Some(g) = gpus() else { return };
    let comms = init_all(&[0, 1 % g], &config());
    const QUEUED: usize = 2600;
    const GROUPS: usize = 4000;
    // Above the LL limit (64 KiB): the Simple path, whose groups are uploaded plans.
    let bytes = |k: usize| 65_537 + 8 * k;
    let at: Vec<usize> = (0..=GROUPS).scan(0, |at, k| Some(std::mem::replace(at, *at + bytes(k).next_multiple_of(64)))).collect();
    std::thread::scope(|s| {
        for c in &comms {
            let at = &at;
            s.spawn(move || {
                let (rank, peer) = (c.rank(), 1 - c.rank());
                let stream = c.stream().unwrap();
                let total = at[GROUPS];
                let (send, recv) = (c.alloc(total).unwrap(), c.alloc(total).unwrap());
                let pattern = |from: usize, i: usize| ((from * 131 + i * 7 + i / 4099) % 251) as u8;
                send.upload(&(0..total).map(|i| pattern(rank, i)).collect::<Vec<u8>>()).unwrap();
                recv.upload(&vec![0xA5; total]).unwrap();
                for (k, &offset) in at[..GROUPS].iter().enumerate() {
                    let ops = [
                        gpu::P2p { send: true, peer, addr: send.ptr() + offset as u64, bytes: bytes(k) },
                        gpu::P2p { send: false, peer, addr: recv.ptr() + offset as u64, bytes: bytes(k) },
                    ];
                    // SAFETY: both ranges lie in the buffers, untouched until the waits below.
                    unsafe { c.launch_p2p(&ops, stream.raw()) }.unwrap_or_else(|e| panic!("rank {rank}, group {k}: {e}"));
                    if k >= QUEUED && k % 100 == 0 {
                        c.wait(&stream).unwrap_or_else(|e| panic!("rank {rank}, group {k}: {e}"));
                    }
                }
                c.wait(&stream).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                let mut got = vec![0u8; total];
                recv.download(&mut got).unwrap();
                for (k, &offset) in at[..GROUPS].iter().enumerate() {
                    if let Some(i) = (offset..offset + bytes(k)).find(|&i| got[i] != pattern(peer, i)) {
                        panic!("rank {rank}, group {k} ({} bytes): byte {} is {:#x}, expected {:#x}", bytes(k), i - offset, got[i], pattern(peer, i));
                    }
                }
                // Plans of a few KiB each: the current arena and at most four old ones,
                // a 4 MiB block each.
                let stats = c.memory_stats();
                assert!(stats.releasable <= 5 * (4 << 20), "rank {rank}: {stats:?}");
                c.barrier().unwrap();
            });
        }
    });
}
