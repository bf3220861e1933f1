//! Every collective × datatype × op × size × placement, ranks as threads of this process,
//! over shared memory and over the socket Net, each rank checking its output against the
//! reference of the test kit's collectives' checker (`oxccl_testkit::check`).

use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator};
use oxccl_testkit::check::{self as matrix, Case};

/// How ranks on this machine reach each other.
#[derive(Clone, Copy, Debug)]
enum Transport {
    Shm,
    /// NCCL_SHM_DISABLE=1: the socket Net, receives grouped up to 8.
    Net,
}

fn config(transport: Transport) -> Config {
    config_with(transport, None)
}

fn config_with(transport: Transport, algo: Option<&str>) -> Config {
    let mut config = Config::defaults();
    if let Some(algo) = algo {
        config.set("NCCL_ALGO", algo).unwrap();
    }
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    // A hang fails the test instead of stalling it.
    config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    if let Transport::Net = transport {
        config.set("NCCL_SHM_DISABLE", "1").unwrap();
        config.set("OXCCL_SOCKET_MAX_RECVS", "8").unwrap();
        // The links dealt over two proxy threads (the first communicator of this
        // test process to make a network link starts them; this machine's default is one).
        config.set("OXCCL_PROXY_THREADS", "2").unwrap();
    }
    config
}

/// Runs `cases` on `n` thread ranks; panics with every failure.
fn run_threads(n: u32, transport: Transport, cases: impl Fn(usize) -> Vec<Case>) {
    run_threads_with(n, config(transport), cases)
}

/// Runs `f(rank, communicator)` on a thread per rank; the results in rank order.
fn on_every_rank<R: Send>(comms: &[Communicator], f: impl Fn(usize, &Communicator) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = comms.iter().enumerate().map(|(rank, c)| s.spawn(move || f(rank, c))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn run_threads_with(n: u32, config: Config, cases: impl Fn(usize) -> Vec<Case>) {
    let transport = if config.shm_disable { Transport::Net } else { Transport::Shm };
    let start = Instant::now();
    let comms = Communicator::init_all(n, &config).unwrap();
    let cases = cases(n as usize);
    let total = cases.len();
    let failures: Vec<String> = on_every_rank(&comms, |_, c| matrix::run_cases(c, &cases)).into_iter().flatten().collect();
    assert!(failures.is_empty(), "{n} ranks over {transport:?}: {} failures, first ones:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
    eprintln!("{n} ranks over {transport:?}: {total} cases in {:.2?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(600));
}

macro_rules! small_matrix {
    ($($name:ident: $n:expr, $transport:ident;)*) => {$(
        #[test]
        fn $name() {
            run_threads($n, Transport::$transport, |n| matrix::full_matrix(n, &matrix::SMALL_COUNTS));
        }
    )*};
}

small_matrix! {
    one_rank_shm: 1, Shm;
    two_ranks_shm: 2, Shm;
    three_ranks_shm: 3, Shm;
    four_ranks_shm: 4, Shm;
    eight_ranks_shm: 8, Shm;
    two_ranks_net: 2, Net;
    three_ranks_net: 3, Net;
    four_ranks_net: 4, Net;
    eight_ranks_net: 8, Net;
}

/// all_to_all in place (send and recv one buffer, as MPI_IN_PLACE allows and nccl-tests
/// runs it), over shared memory and the socket Net (receives grouped up to 8, which the
/// in-place lanes must not be), within one slot and over several: each rank's lanes send
/// each chunk before they receive over it (algo::all_to_all_in_place).
#[test]
fn all_to_all_in_place() {
    let cases = |_: usize| {
        let mut cases = matrix::all_to_all_in_place(oxccl_runtime::DataType::Float32, &[1, 7, 4099, (1 << 20) / 4 + 3]);
        cases.extend(matrix::all_to_all_in_place(oxccl_runtime::DataType::Uint8, &[1, 4099]));
        cases
    };
    for n in [1, 2, 3, 4, 5] {
        run_threads(n, Transport::Shm, cases);
        run_threads(n, Transport::Net, cases);
    }
}

#[test]
fn one_mebibyte_shm() {
    for n in [2, 3, 4, 8] {
        run_threads(n, Transport::Shm, |n| matrix::large_cases(n, 1 << 20));
    }
}

#[test]
fn one_mebibyte_net() {
    for n in [2, 3, 4, 8] {
        run_threads(n, Transport::Net, |n| matrix::large_cases(n, 1 << 20));
    }
}

/// 64 MiB of f32 per rank: all_reduce and broadcast on four ranks.
#[test]
fn sixty_four_mebibytes() {
    use oxccl_runtime::{Collective, DataType, ReduceOp};
    for transport in [Transport::Shm, Transport::Net] {
        run_threads(4, transport, |n| {
            let count = (64 << 20) / 4;
            [Collective::AllReduce, Collective::Broadcast]
                .into_iter()
                .map(|collective| Case { collective, dtype: DataType::Float32, op: ReduceOp::Sum, count, root: n - 1, in_place: false })
                .collect()
        });
    }
}

/// Over the network a large ring or tree splits its data over up to four channels, one
/// per two FIFO slots of data: with 4 KiB slots (NCCL_BUFFSIZE=32K) these sizes run on 1,
/// 2, 3 and 4 channels, blocks not dividing evenly; all_reduce with ring and tree forced.
#[test]
fn network_channels() {
    use oxccl_runtime::Collective;
    for (n, algo) in [(2, None), (3, Some("ring")), (4, Some("tree")), (5, None)] {
        let mut config = config_with(Transport::Net, algo);
        config.set("NCCL_BUFFSIZE", "32768").unwrap();
        run_threads_with(n, config, |n| {
            let mut cases: Vec<Case> = [9 << 10, 19 << 10, 27 << 10, 61 << 10].into_iter().flat_map(|bytes| matrix::large_cases(n, bytes)).collect();
            if algo.is_some() {
                cases.retain(|c| c.collective == Collective::AllReduce);
            }
            cases
        });
    }
}

/// Each network channel has connections of its own: two ranks' FIFO memory grows fourfold
/// from a one-channel all_reduce to a four-channel one (the ring's send and receive end per
/// channel), and stays put over shared memory.
#[test]
fn network_channels_have_their_own_connections() {
    use oxccl_runtime::ReduceOp;
    for (transport, growth) in [(Transport::Net, 4), (Transport::Shm, 1)] {
        let mut config = config_with(transport, Some("ring"));
        config.set("NCCL_BUFFSIZE", "32768").unwrap();
        let comms = Communicator::init_all(2, &config).unwrap();
        // 4 KiB: one channel; 64 KiB: sixteen 4 KiB slots, four channels.
        let fifo_bytes_after = |count: usize| {
            on_every_rank(&comms, |_, c| {
                let send = vec![1.0f32; count];
                let mut recv = vec![0.0f32; count];
                c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                assert!(recv.iter().all(|&x| x == 2.0));
                c.memory_stats().persistent
            })
        };
        let (one, four) = (fifo_bytes_after(1024), fifo_bytes_after(16 << 10));
        for (one, four) in one.into_iter().zip(four) {
            assert!(one > 0, "{transport:?}: no FIFO memory counted");
            assert_eq!(four, growth * one, "{transport:?}: FIFO bytes after one channel {one}, then four {four}");
        }
    }
}

/// Every rank's f32 all_reduce of `input(rank)` with `op`, in place or not: each output's bits.
fn all_reduce_bits(comms: &[Communicator], input: impl Fn(usize) -> Vec<f32> + Sync, op: oxccl_runtime::ReduceOp, in_place: bool) -> Vec<Vec<u32>> {
    on_every_rank(comms, |rank, c| {
        let send = input(rank);
        let mut recv = vec![0.0f32; send.len()];
        if in_place {
            recv.copy_from_slice(&send);
            c.all_reduce_in_place(&mut recv, op).unwrap();
        } else {
            c.all_reduce(&send, &mut recv, op).unwrap();
        }
        recv.iter().map(|x| x.to_bits()).collect()
    })
}

/// Recursive doubling folds the same two partials on both partners of each round, in
/// opposite order: every rank holds the same bits though floating-point sums depend on
/// their order (values of many magnitudes), with ranks beyond a power of two folded in
/// and sent the result, over shared memory and the Net, in one chunk and in many, in
/// place and not.
#[test]
fn recursive_doubling_leaves_the_same_bits_on_every_rank() {
    use oxccl_runtime::ReduceOp;
    let input = |rank: usize, count: usize| -> Vec<f32> { (0..count).map(|i| ((i as f32 * 0.37 + rank as f32 * 1.3).sin() * 10f32.powi((i % 7) as i32 - 3 + rank as i32)) * if i % 5 == 0 { -0.0 } else { 1.0 }).collect() };
    for (n, transport) in [(3usize, Transport::Shm), (4, Transport::Shm), (4, Transport::Net), (5, Transport::Shm)] {
        let comms = Communicator::init_all(n as u32, &config_with(transport, Some("doubling"))).unwrap();
        for count in [1usize, 1000, 100_003] {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
                for in_place in [false, true] {
                    let outputs = all_reduce_bits(&comms, |rank| input(rank, count), op, in_place);
                    for rank in 1..n {
                        let differ = (0..count).filter(|&i| outputs[rank][i] != outputs[0][i]).count();
                        assert_eq!(differ, 0, "{n} ranks, {transport:?}, {count} elements, {op:?}, in place {in_place}: rank {rank} differs from rank 0 in {differ} elements");
                    }
                }
            }
        }
    }
}

/// Two ranks' direct all_reduce is one shot: each rank folds the other's input into its
/// own, with the operands in opposite order. Both still hold the same bits: signed zeros
/// under max and min, infinities, a NaN on one side, over shared memory and the Net, in
/// one chunk and in many, in place and not.
#[test]
fn two_ranks_in_one_shot_hold_the_same_bits() {
    use oxccl_runtime::ReduceOp;
    let special = [0.0f32, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30, 3.4e38, 0.1];
    let input = |rank: usize, count: usize| -> Vec<f32> { (0..count).map(|i| if i % 3 == 0 { special[(i / 3 + rank) % special.len()] } else { (i as f32 * 0.37 + rank as f32).sin() * 1e3 }).collect() };
    for transport in [Transport::Shm, Transport::Net] {
        let comms = Communicator::init_all(2, &config_with(transport, Some("direct"))).unwrap();
        for count in [1usize, 1000, 100_003] {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
                for in_place in [false, true] {
                    let outputs = all_reduce_bits(&comms, |rank| input(rank, count), op, in_place);
                    let what = format!("{transport:?}, {count} elements, {op:?}, in place {in_place}");
                    let differ = (0..count).filter(|&i| outputs[0][i] != outputs[1][i]).count();
                    assert_eq!(differ, 0, "{what}: the ranks' results differ in {differ} elements");
                    let (a, b) = (input(0, count), input(1, count));
                    for i in 0..count {
                        let expected = match op {
                            ReduceOp::Sum => a[i] + b[i],
                            ReduceOp::Prod => a[i] * b[i],
                            ReduceOp::Max => a[i].max(b[i]),
                            _ => a[i].min(b[i]),
                        };
                        let got = f32::from_bits(outputs[0][i]);
                        assert!(got == expected || (got.is_nan() && expected.is_nan()), "{what}: element {i}: {got} for {} and {}", a[i], b[i]);
                    }
                }
            }
        }
    }
}

/// all_reduce with each algorithm forced (the tuner picks by size, so some would otherwise
/// run only at some sizes): every dtype, op, size and placement.
/// NCCL's trees across hosts with a chain inside each: 3 hosts × 2 ranks (threads posing
/// as hosts with NCCL_HOSTID, shared memory inside a host, the socket Net between hosts),
/// all_reduce forced onto the tree, checked; and only each host's head of a tree — its first
/// rank in tree 0 (even connection channels), its last in tree 1 (odd ones) — has network
/// connections, two per edge of the tree over the hosts.
#[test]
fn trees_across_hosts_cross_only_between_host_heads() {
    use oxccl_runtime::Collective;
    let (hosts, per_host) = (3usize, 2usize);
    let configs: Vec<Config> = (0..hosts * per_host)
        .map(|rank| {
            let mut config = config_with(Transport::Shm, Some("tree"));
            config.set("NCCL_HOSTID", &format!("tree-host-{}", rank / per_host)).unwrap();
            config
        })
        .collect();
    let comms = Communicator::init_all_with(&configs).unwrap();
    let n = comms.len();
    let mut cases = matrix::full_matrix(n, &[1, 7, 4099]);
    cases.retain(|c| c.collective == Collective::AllReduce);
    cases.extend(matrix::large_cases(n, 1 << 20).into_iter().filter(|c| c.collective == Collective::AllReduce));
    let failures: Vec<String> = on_every_rank(&comms, |_, c| matrix::run_cases(c, &cases)).into_iter().flatten().collect();
    assert!(failures.is_empty(), "{} failures, first ones:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
    let head = |host: usize, tree: usize| host * per_host + if tree == 0 { 0 } else { per_host - 1 };
    let mut sends = std::collections::BTreeMap::<usize, usize>::new();
    for comm in &comms {
        for c in comm.net_connections() {
            let tree = c.channel % 2;
            assert!(c.from == head(c.from / per_host, tree) && c.to == head(c.to / per_host, tree), "rank {}: {c:?} links hosts but not through tree {tree}'s heads", comm.rank());
            *sends.entry(c.channel).or_default() += usize::from(c.send);
        }
    }
    // On each channel (a tree of a channel of the call) the tree links the 3 hosts by 2
    // edges, each a connection up and one down.
    assert!(sends.len() >= 2 && sends.values().all(|&n| n == 2 * (hosts - 1)), "network sends by channel: {sends:?}");
}

#[test]
fn every_all_reduce_algorithm() {
    use oxccl_runtime::Collective;
    for algo in ["ring", "tree", "direct", "doubling"] {
        for (n, transport) in [(3, Transport::Shm), (4, Transport::Net), (5, Transport::Shm)] {
            run_threads_with(n, config_with(transport, Some(algo)), |n| {
                let mut cases = matrix::full_matrix(n, &[1, 7, 4099]);
                cases.retain(|c| c.collective == Collective::AllReduce);
                cases.extend(matrix::large_cases(n, 1 << 20).into_iter().filter(|c| c.collective == Collective::AllReduce));
                cases
            });
        }
    }
}
