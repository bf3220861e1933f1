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
//! acknowledgement); one lane per peer and direction never does.

use std::collections::VecDeque;

/// How a rank's kernel runs its group.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lanes {
    /// One lane walks the calls in the order the program made them.
    InCallOrder,
    /// One lane for all sends, one for all receives, each in call order.
    SendAndReceive,
    /// One lane per peer and direction (sends to d, receives from s), each in call order.
    PerPeer,
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
                // A Fisher-Yates shuffle: the program's own call order.
                for i in (1..c.len()).rev() {
                    c.swap(i, rng(i + 1));
                }
            }
            calls
        })
        .collect()
}

/// Runs `groups` on their ranks under the schedule `seed` picks, each rank's kernel split
/// into `lanes`; an error names the first broken rule (an unread half overwritten, a
/// message read out of order, or a deadlock).
/// `window` is how many unacknowledged messages a sender may have out to one receiver (the
/// protocol: 2, the halves).
fn run_with(groups: &[Vec<Vec<Call>>], lanes: Lanes, window: usize, seed: u64) -> Result<(), String> {
    let n = groups.first().map_or(0, Vec::len);
    let mut next = super::direct_model::scheduler(seed);
    // Per ordered pair (s, d): messages written, messages read, and d's acknowledgement as
    // s sees it; inbox[d][s][half] holds (message, read).
    let mut written = vec![vec![0usize; n]; n];
    let mut read = vec![vec![0usize; n]; n];
    let mut acked = vec![vec![0usize; n]; n];
    let mut inbox = vec![vec![[(0usize, true); 2]; n]; n];
    // Each rank's group in progress, as lanes of calls still to run.
    let mut group = vec![0usize; n];
    let split = |calls: &[Call]| -> Vec<VecDeque<Call>> {
        match lanes {
            Lanes::InCallOrder => vec![calls.iter().copied().collect()],
            Lanes::SendAndReceive => vec![
                calls.iter().copied().filter(|c| matches!(c, Call::Send(_))).collect(),
                calls.iter().copied().filter(|c| matches!(c, Call::Recv(_))).collect(),
            ],
            Lanes::PerPeer => (0..n)
                .flat_map(|p| {
                    [
                        calls.iter().copied().filter(|c| matches!(c, Call::Send(d) if *d == p)).collect(),
                        calls.iter().copied().filter(|c| matches!(c, Call::Recv(s) if *s == p)).collect(),
                    ]
                })
                .collect(),
        }
    };
    let mut running: Vec<Vec<VecDeque<Call>>> = (0..n).map(|r| groups.first().map_or_else(Vec::new, |g| split(&g[r]))).collect();
    loop {
        // A group ends when all its lanes did (a rank with no calls in it at once); the
        // rank's next launch then starts.
        for r in 0..n {
            while group[r] < groups.len() && running[r].iter().all(VecDeque::is_empty) {
                group[r] += 1;
                running[r] = groups.get(group[r]).map_or_else(Vec::new, |g| split(&g[r]));
            }
        }
        // Every lane head that can run now: (rank, lane).
        let mut enabled = Vec::new();
        for (r, rank_lanes) in running.iter().enumerate() {
            for (l, lane) in rank_lanes.iter().enumerate() {
                let ready = match lane.front() {
                    Some(Call::Send(d)) => acked[r][*d] + window > written[r][*d],
                    Some(Call::Recv(s)) => {
                        let k = read[*s][r] + 1;
                        inbox[r][*s][k % 2].0 == k
                    }
                    None => false,
                };
                if ready {
                    enabled.push((r, l));
                }
            }
        }
        if enabled.is_empty() {
            let stuck: Vec<String> = (0..n).filter(|&r| group[r] < groups.len()).map(|r| format!("rank {r} in group {}: {:?}", group[r], running[r])).collect();
            return if stuck.is_empty() { Ok(()) } else { Err(format!("deadlock (seed {seed}): {}", stuck.join("; "))) };
        }
        let (r, l) = enabled[next(enabled.len())];
        match running[r][l].pop_front().expect("an enabled lane has a head") {
            Call::Send(d) => {
                let k = written[r][d] + 1;
                let slot = &mut inbox[d][r][k % 2];
                if !slot.1 {
                    return Err(format!("rank {r}'s message {k} to rank {d} overwrote unread message {} (seed {seed})", slot.0));
                }
                *slot = (k, false);
                written[r][d] = k;
            }
            Call::Recv(s) => {
                let k = read[s][r] + 1;
                let slot = &mut inbox[r][s][k % 2];
                if slot.0 != k || slot.1 {
                    return Err(format!("rank {r} read message {} from rank {s} for message {k} (seed {seed})", slot.0));
                }
                slot.1 = true;
                read[s][r] = k;
                // Acknowledged at once, from inside the kernel.
                acked[s][r] = k;
            }
        }
    }
}

fn run(groups: &[Vec<Vec<Call>>], lanes: Lanes, seed: u64) -> Result<(), String> {
    run_with(groups, lanes, 2, seed)
}

#[test]
fn per_peer_lanes_deliver_in_order_and_never_deadlock() {
    for seed in 0..3000u64 {
        let mut rng = super::direct_model::scheduler(!seed);
        let n = 2 + rng(4);
        let sequence = groups(n, 8, &mut rng);
        if let Err(e) = run(&sequence, Lanes::PerPeer, seed) {
            panic!("{n} ranks: {e}");
        }
    }
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
        let mut rng = super::direct_model::scheduler(!seed);
        let n = 2 + rng(3);
        run_with(&groups(n, 8, &mut rng), Lanes::PerPeer, 3, seed).is_err_and(|e| e.contains("overwrote"))
    });
    assert!(overwrote, "a window of 3 over 2 halves never overwrote");
}
