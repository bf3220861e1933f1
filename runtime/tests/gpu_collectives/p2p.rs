//! Send/recv on GPU buffers: every pair, and groups of small and large messages.

use super::*;

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
        destroy_all(comms);
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
        let took = run_p2p_groups_on_every_rank(comms, &groups);
        let messages: usize = groups.iter().map(Vec::len).sum();
        eprintln!("{n} ranks: {} groups, {messages} messages ok in {took:.1?}", groups.len());
    }
}

/// Sends along the ring on many channels (OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS=128, which
/// send/recv lanes hold to 64; ranks sharing a GPU on 2 or 3 GPUs too, where the default
/// is off): a send to the next rank and a receive from the previous one take 64 channels
/// each, so a shift both ways and an exchange with every peer need more than 128 lanes and
/// run folded onto 128 blocks, each block its lanes in the connections' order; a shift of
/// 8 MiB, and random groups as above. Every byte is checked; a wrong fold order would
/// deadlock (the collective timeout ends it and fails the test).
#[test]
fn sends_along_the_ring_on_many_channels() {
    let Some(g) = gpus() else { return };
    let config = config_with(&[("OXCCL_COLL_TIMEOUT_MS", "20000"), ("OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS", "128")]);
    for n in [2, 3, 4] {
        let devices: Vec<usize> = (0..n).map(|r| r % g).collect();
        let comms = init_all(&devices, &config);
        let m = |from: usize, to: usize, bytes: usize| Message { from, to, bytes };
        let big = (8 << 20) + 3;
        let mut groups = vec![
            (0..n).map(|r| m(r, (r + 1) % n, big)).collect::<Vec<_>>(),
            (0..n).flat_map(|r| [m(r, (r + 1) % n, big), m(r, (r + n - 1) % n, (2 << 20) + 1)]).collect(),
            (0..n).flat_map(|r| (0..n).map(move |p| m(r, p, (2 << 20) + 5))).collect(),
            (0..n).flat_map(|r| [m(r, (r + 1) % n, big), m(r, (r + 1) % n, 64), m(r, r, 4099)]).collect(),
        ];
        groups.extend(p2p_groups(n, 20));
        let took = run_p2p_groups_on_every_rank(comms, &groups);
        eprintln!("{n} ranks: sends along the ring on 64 channels, {} groups ok in {took:.1?}", groups.len());
    }
}

/// Runs `groups` on every rank of `comms` at once (a thread each, [`run_p2p_groups`]),
/// then destroys the communicators at once; how long the groups took.
fn run_p2p_groups_on_every_rank(comms: Vec<Communicator>, groups: &[Vec<Message>]) -> std::time::Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || run_p2p_groups(c, groups));
        }
    });
    let took = start.elapsed();
    destroy_all(comms);
    took
}

/// A message of a test group: `bytes` from `from` to `to`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Message {
    from: usize,
    to: usize,
    bytes: usize,
}

pub(super) fn p2p_groups(n: usize, count: usize) -> Vec<Vec<Message>> {
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
pub(super) fn run_p2p_groups(c: &Communicator, groups: &[Vec<Message>]) {
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
