//! A model of the inbox protocol planned for small send/recv on the GPU (LL lines straight
//! into the receiver's inbox, as `ox_direct` does for collectives; docs/GPU.md, "Planned:
//! send/recv over LL"), run over random groups and interleavings before any kernel exists.
//!
//! Send/recv groups are not collective: each rank's group names its own peers, in the
//! order the program called them, and one group may carry several messages to one peer.
//! So the protocol counts per ordered pair of ranks, not per launch: message k (1-based)
//! from s to d goes into half k % 2 of d's inbox row for s, flagged k; d acknowledges each
//! message once read (inside the kernel, not at the next launch), and s writes message k
//! only once d acknowledged message k − 2. Each rank runs its group's messages for a peer
//! in call order; how the messages for different peers share the kernel's blocks is the
//! question the model answers: one block walking the calls in order can deadlock (two
//! ranks each sending three messages before receiving wait for each other's
//! acknowledgement); one lane per peer and direction never does. A group whose messages
//! are split between an LL launch and a Simple launch after it (as `enqueue_p2p` does by
//! size) never deadlocks either, as long as every rank runs the two in the same order.

use std::collections::VecDeque;

use crate::scheduler;

/// How a rank's kernel runs its group.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lanes {
    /// One lane walks the calls in the order the program made them.
    InCallOrder,
    /// One lane for all sends, one for all receives, each in call order.
    SendAndReceive,
    /// One lane per peer and direction (sends to d, receives from s), each in call order.
    PerPeer,
    /// As `PerPeer`, but one lane per peer that alternates a send and a receive where the
    /// launch sends to that peer as often as it receives from it (the kernel's exchange
    /// lanes, for an in-place alltoall, which pairs every peer so).
    Exchanging,
}

/// One call of a group: a send to or a receive from `peer`.
#[derive(Clone, Copy, Debug)]
enum Call {
    Send(usize),
    Recv(usize),
}

/// A random group sequence: every group is a set of messages (s, d) with each rank's calls
/// in a random order of its own (NCCL matches a pair's sends and receives in call order,
/// whatever the order across peers). `groups[g][r]` are rank r's calls in group g.
fn groups(n: usize, count: usize, rng: &mut impl FnMut(usize) -> usize) -> Vec<Vec<Vec<Call>>> {
    (0..count)
        .map(|_| {
            let mut calls: Vec<Vec<Call>> = vec![Vec::new(); n];
            for _ in 0..1 + rng(3 * n) {
                let (s, d) = (rng(n), rng(n));
                if s != d {
                    calls[s].push(Call::Send(d));
                    calls[d].push(Call::Recv(s));
                }
            }
            for c in &mut calls {
                shuffle(c, rng);
            }
            calls
        })
        .collect()
}

/// A Fisher-Yates shuffle of a rank's calls: the program's own call order.
fn shuffle(calls: &mut [Call], rng: &mut impl FnMut(usize) -> usize) {
    for i in (1..calls.len()).rev() {
        calls.swap(i, rng(i + 1));
    }
}

/// How the ranks run their groups.
struct Model {
    lanes: Lanes,
    /// Inbox slots per ordered pair, per launch kind (two halves over LL, eight FIFO slots
    /// over Simple), and how many unacknowledged messages a sender may have out to one
    /// receiver (the protocol: as many as there are slots).
    slots: [usize; 2],
    windows: [usize; 2],
    /// Whether a group's messages are split between two launches, LL then Simple (both ends
    /// classify a message alike — by its size in oxccl, here by a hash of the group, the
    /// pair and the message's place among that pair's); else all go in the first.
    split: bool,
    /// A rank that runs its two launches the other way round (a broken variant: the order
    /// must be the same on every rank).
    reversed: Option<usize>,
}

/// An inbox slot: the message it holds, and whether its receiver read it.
type Slot = (usize, bool);

/// One rank's calls of one launch, as lanes.
fn layout(lanes: Lanes, calls: &[Call], n: usize) -> Vec<VecDeque<Call>> {
    let lane = |keep: &dyn Fn(&Call) -> bool| calls.iter().copied().filter(|c| keep(c)).collect::<VecDeque<Call>>();
    match lanes {
        Lanes::InCallOrder => vec![calls.iter().copied().collect()],
        Lanes::SendAndReceive => vec![lane(&|c| matches!(c, Call::Send(_))), lane(&|c| matches!(c, Call::Recv(_)))],
        Lanes::PerPeer => (0..n).flat_map(|p| [lane(&|c| matches!(c, Call::Send(d) if *d == p)), lane(&|c| matches!(c, Call::Recv(s) if *s == p))]).collect(),
        Lanes::Exchanging => (0..n)
            .flat_map(|p| {
                let (sends, recvs) = (lane(&|c| matches!(c, Call::Send(d) if *d == p)), lane(&|c| matches!(c, Call::Recv(s) if *s == p)));
                if !sends.is_empty() && sends.len() == recvs.len() {
                    vec![sends.into_iter().zip(recvs).flat_map(|(s, r)| [s, r]).collect()]
                } else {
                    vec![sends, recvs]
                }
            })
            .collect(),
    }
}

/// Runs `groups` on their ranks as `model` says, under the schedule `seed` picks; an error
/// names the first broken rule (an unread half or slot overwritten, a message read out of
/// order, or a deadlock). A rank's group is two launches on one stream: the second starts
/// when every lane of the first has ended, the next group when both have.
fn simulate(groups: &[Vec<Vec<Call>>], model: &Model, seed: u64) -> Result<(), String> {
    let n = groups.first().map_or(0, Vec::len);
    let mut next = scheduler(seed);
    let class = |g: usize, s: usize, d: usize, k: usize| if model.split { (g * 31 + s * 7 + d * 3 + k).wrapping_mul(0x9e37_79b9) >> 7 & 1 } else { 0 };
    // Per launch kind and ordered pair (s, d): messages written, messages read, and d's
    // acknowledgement as s sees it; inbox[kind][d][s][slot] holds (message, read).
    let mut written = vec![vec![vec![0usize; n]; n]; 2];
    let mut read = vec![vec![vec![0usize; n]; n]; 2];
    let mut acked = vec![vec![vec![0usize; n]; n]; 2];
    let mut inbox: Vec<Vec<Vec<Vec<Slot>>>> = model.slots.iter().map(|&w| vec![vec![vec![(0, true); w]; n]; n]).collect();
    // Rank r's group g as its two launches' lanes.
    let launches = |g: usize, r: usize| -> [Vec<VecDeque<Call>>; 2] {
        let mut calls: [Vec<Call>; 2] = Default::default();
        let (mut sends, mut recvs) = (vec![0usize; n], vec![0usize; n]);
        for &call in &groups[g][r] {
            let kind = match call {
                Call::Send(d) => {
                    sends[d] += 1;
                    class(g, r, d, sends[d])
                }
                Call::Recv(s) => {
                    recvs[s] += 1;
                    class(g, s, r, recvs[s])
                }
            };
            calls[kind].push(call);
        }
        calls.map(|c| layout(model.lanes, &c, n))
    };
    let first = |r: usize| if model.reversed == Some(r) { 1 } else { 0 };
    let mut group = vec![0usize; n];
    let mut phase: Vec<usize> = (0..n).map(first).collect();
    let mut running: Vec<[Vec<VecDeque<Call>>; 2]> = (0..n).map(|r| if groups.is_empty() { Default::default() } else { launches(0, r) }).collect();
    loop {
        for r in 0..n {
            while group[r] < groups.len() && running[r][phase[r]].iter().all(VecDeque::is_empty) {
                // This launch ended: the group's other one, or the next group's first.
                if phase[r] == first(r) {
                    phase[r] = 1 - first(r);
                } else {
                    group[r] += 1;
                    phase[r] = first(r);
                    if group[r] < groups.len() {
                        running[r] = launches(group[r], r);
                    }
                }
            }
        }
        // Every lane head that can run now: (rank, lane).
        let mut enabled = Vec::new();
        for r in (0..n).filter(|&r| group[r] < groups.len()) {
            let p = phase[r];
            for (l, lane) in running[r][p].iter().enumerate() {
                let ready = match lane.front() {
                    Some(Call::Send(d)) => acked[p][r][*d] + model.windows[p] > written[p][r][*d],
                    Some(Call::Recv(s)) => {
                        let k = read[p][*s][r] + 1;
                        inbox[p][r][*s][k % model.slots[p]].0 == k
                    }
                    None => false,
                };
                if ready {
                    enabled.push((r, l));
                }
            }
        }
        if enabled.is_empty() {
            let stuck: Vec<String> = (0..n).filter(|&r| group[r] < groups.len()).map(|r| format!("rank {r} in group {}, launch {}: {:?}", group[r], phase[r], running[r][phase[r]])).collect();
            return if stuck.is_empty() { Ok(()) } else { Err(format!("deadlock (seed {seed}): {}", stuck.join("; "))) };
        }
        let (r, l) = enabled[next(enabled.len())];
        let p = phase[r];
        let slots = model.slots[p];
        match running[r][p][l].pop_front().expect("an enabled lane has a head") {
            Call::Send(d) => {
                let k = written[p][r][d] + 1;
                let slot = &mut inbox[p][d][r][k % slots];
                if !slot.1 {
                    return Err(format!("rank {r}'s message {k} to rank {d} overwrote unread message {} (seed {seed})", slot.0));
                }
                *slot = (k, false);
                written[p][r][d] = k;
            }
            Call::Recv(s) => {
                let k = read[p][s][r] + 1;
                let slot = &mut inbox[p][r][s][k % slots];
                if slot.0 != k || slot.1 {
                    return Err(format!("rank {r} read message {} from rank {s} for message {k} (seed {seed})", slot.0));
                }
                slot.1 = true;
                read[p][s][r] = k;
                // Acknowledged at once, from inside the kernel.
                acked[p][s][r] = k;
            }
        }
    }
}

/// All of a group's messages in one launch of `lanes` over two halves, a sender at most
/// `window` messages ahead of its receiver (the protocol: 2).
fn run_with(groups: &[Vec<Vec<Call>>], lanes: Lanes, window: usize, seed: u64) -> Result<(), String> {
    simulate(groups, &Model { lanes, slots: [2, 2], windows: [window, window], split: false, reversed: None }, seed)
}

fn run(groups: &[Vec<Vec<Call>>], lanes: Lanes, seed: u64) -> Result<(), String> {
    run_with(groups, lanes, 2, seed)
}

#[test]
fn per_peer_lanes_deliver_in_order_and_never_deadlock() {
    for seed in 0..3000u64 {
        let mut rng = scheduler(!seed);
        let n = 2 + rng(4);
        let sequence = groups(n, 8, &mut rng);
        if let Err(e) = run(&sequence, Lanes::PerPeer, seed) {
            panic!("{n} ranks: {e}");
        }
    }
}

/// alltoall groups of `messages` per ordered pair (each rank's calls shuffled as
/// [`groups`]' are), between random groups.
fn with_alltoalls(n: usize, count: usize, rng: &mut impl FnMut(usize) -> usize) -> Vec<Vec<Vec<Call>>> {
    let mut sequence = Vec::new();
    for g in groups(n, count, rng) {
        sequence.push(g);
        let messages = 1 + rng(3);
        let mut calls: Vec<Vec<Call>> = (0..n).map(|r| (0..n).filter(|&p| p != r).flat_map(|p| (0..messages).flat_map(move |_| [Call::Send(p), Call::Recv(p)])).collect()).collect();
        for c in &mut calls {
            shuffle(c, rng);
        }
        sequence.push(calls);
    }
    sequence
}

#[test]
fn exchanging_lanes_deliver_in_order_and_never_deadlock() {
    for seed in 0..3000u64 {
        let mut rng = scheduler(!seed ^ 0xa11);
        let n = 2 + rng(4);
        let sequence = with_alltoalls(n, 4, &mut rng);
        if let Err(e) = run(&sequence, Lanes::Exchanging, seed) {
            panic!("{n} ranks: {e}");
        }
    }
    // Receiving first instead (each lane's receive before its send) deadlocks.
    let group: Vec<Vec<Call>> = vec![vec![Call::Recv(1), Call::Send(1)], vec![Call::Recv(0), Call::Send(0)]];
    assert!(run(std::slice::from_ref(&group), Lanes::InCallOrder, 0).is_err_and(|e| e.contains("deadlock")));
}

#[test]
fn one_lane_in_call_order_deadlocks_where_per_peer_lanes_do_not() {
    // Ranks 0 and 1 each send three messages to the other before receiving: each one's
    // third send waits for the other's acknowledgement of its first, which never comes.
    let group = vec![vec![Call::Send(1), Call::Send(1), Call::Send(1), Call::Recv(1), Call::Recv(1), Call::Recv(1)], vec![Call::Send(0), Call::Send(0), Call::Send(0), Call::Recv(0), Call::Recv(0), Call::Recv(0)]];
    let e = run(std::slice::from_ref(&group), Lanes::InCallOrder, 1).unwrap_err();
    assert!(e.contains("deadlock"), "{e}");
    assert!(run(&[group], Lanes::PerPeer, 1).is_ok());
}

#[test]
fn one_send_lane_and_one_receive_lane_deadlock_on_a_cycle_of_three() {
    // Each rank sends three messages to its successor, then one to its predecessor, and
    // receives first from its successor. Every third send waits for a successor that
    // waits, on its receive lane, for a message queued behind its own third send.
    let group: Vec<Vec<Call>> = (0..3)
        .map(|r| {
            let (next, prev) = ((r + 1) % 3, (r + 2) % 3);
            vec![Call::Send(next), Call::Send(next), Call::Send(next), Call::Send(prev), Call::Recv(next), Call::Recv(prev), Call::Recv(prev), Call::Recv(prev)]
        })
        .collect();
    for seed in 0..50 {
        let e = run(std::slice::from_ref(&group), Lanes::SendAndReceive, seed).unwrap_err();
        assert!(e.contains("deadlock"), "{e}");
        assert!(run(std::slice::from_ref(&group), Lanes::PerPeer, seed).is_ok());
    }
}

#[test]
fn a_sender_more_than_two_messages_ahead_overwrites_unread_data() {
    let overwrote = (0..500u64).any(|seed| {
        let mut rng = scheduler(!seed);
        let n = 2 + rng(3);
        run_with(&groups(n, 8, &mut rng), Lanes::PerPeer, 3, seed).is_err_and(|e| e.contains("overwrote"))
    });
    assert!(overwrote, "a window of 3 over 2 halves never overwrote");
}

/// A group's messages over two launches, as `enqueue_p2p` runs them: those up to the LL
/// limit in one (per-peer lanes, two inbox halves), the rest in a second after it on the
/// same stream (per-peer lanes over FIFOs of eight slots); `reversed` as in [`Model`].
fn run_split(groups: &[Vec<Vec<Call>>], seed: u64, reversed: Option<usize>) -> Result<(), String> {
    simulate(groups, &Model { lanes: Lanes::PerPeer, slots: [2, 8], windows: [2, 8], split: true, reversed }, seed)
}

#[test]
fn an_ll_launch_then_a_simple_launch_per_group_never_deadlocks() {
    for seed in 0..3000u64 {
        let mut rng = scheduler(!seed ^ 0x5eed);
        let n = 2 + rng(4);
        let sequence = groups(n, 8, &mut rng);
        if let Err(e) = run_split(&sequence, seed, None) {
            panic!("{n} ranks: {e}");
        }
    }
    // The model can fail: one rank running its Simple launch first deadlocks somewhere.
    let deadlocked = (0..500u64).any(|seed| {
        let mut rng = scheduler(!seed ^ 0x5eed);
        let n = 2 + rng(4);
        run_split(&groups(n, 8, &mut rng), seed, Some(0)).is_err_and(|e| e.contains("deadlock"))
    });
    assert!(deadlocked, "a rank running its launches in the other order never deadlocked");
}
