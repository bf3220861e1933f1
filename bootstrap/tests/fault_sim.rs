//! A deterministic simulator of the failure detector and the agreement on failed ranks: a
//! virtual clock, a seeded RNG, messages delayed and reordered at random, and faults (kill,
//! stop for good, stop then resume, partition then heal) at random times. Each seed is one
//! job; the properties of `oxccl_bootstrap::agree` are checked on every one.
//!
//! The model follows the endpoint: every rank runs a [`RingDetector`] (heartbeats to its
//! live successor each interval), a failure found by a rank goes round the live ring as a
//! notice, and (with every other failure known) straight to the predecessor it watches next; a rank whose successor failed
//! sends every failure it knows to the new one (a stopped rank swallows notices); notices
//! from a rank already counted as failed are ignored; a killed rank's
//! connections end (EOF) at every peer, a stopped rank's mail waits for it (TCP buffers),
//! and a partition holds the messages that cross it until it heals (TCP retransmits).
//! Each rank enters the agreement at its own time; messages that come earlier wait in its
//! inbox, and once it has an outcome the call has returned: the rank takes no more
//! suspicions and adopts none, but its agreement still answers messages, as the endpoint's
//! readers do for a finished agreement (`Endpoint::keep_answering`), while it runs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use oxccl_bootstrap::agree::{AgreeMessage, Agreement, Outcome, RankSet};
use oxccl_bootstrap::detect::{self, RingDetector};

const TIMEOUT: Duration = Duration::from_millis(100);
/// Longest message delay, µs: small against the heartbeat timeout, as on a real network.
const MAX_DELAY_US: u64 = 2_000;
/// A run that has not settled by then has a rank that never terminated.
const TIME_LIMIT_US: u64 = 60_000_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

#[derive(Clone, Debug)]
enum Wire {
    Heartbeat,
    Notice(u32),
    Agree(AgreeMessage),
}

#[derive(Clone, Debug)]
enum Event {
    Deliver { from: u32, to: u32, wire: Wire },
    Tick(u32),
    Start(u32),
    Kill(u32),
    Stop(u32),
    Resume(u32),
    /// `at` sees its connection from `of` end.
    Eof { at: u32, of: u32 },
    Partition(RankSet),
    Heal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    Running,
    Stopped,
    Killed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Kill,
    StopForGood,
    StopAndResume,
    Partition,
}

struct Node {
    life: Life,
    detector: RingDetector,
    /// Every rank this one counts as failed (the endpoint's `dead`).
    dead: RankSet,
    agreement: Option<Agreement>,
    /// Agreement messages that came before the agreement started.
    early: Vec<(u32, AgreeMessage)>,
    /// Mail that came while stopped.
    held: Vec<(u32, Wire)>,
    /// What this rank counted as failed when it entered the agreement.
    dead_at_start: RankSet,
    started_at: Option<u64>,
    outcome: Option<(u64, Outcome)>,
}

struct Sim {
    now: u64,
    seq: u64,
    rng: Rng,
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    payloads: Vec<Option<Event>>,
    nodes: Vec<Node>,
    partition: Option<RankSet>,
    held_by_partition: Vec<(u32, u32, Wire)>,
    /// Fault events (and starts) not yet happened: the run may not end before them.
    pending: usize,
}

/// What one seed's job did.
struct Report {
    kind: Kind,
    n: u32,
    killed_before_start: RankSet,
    faulty: RankSet,
    forever_gone: RankSet,
    /// Every running rank finished within the time limit.
    settled: bool,
    nodes: Vec<Node>,
}

impl Sim {
    fn schedule(&mut self, at: u64, event: Event) {
        if !matches!(event, Event::Deliver { .. } | Event::Tick(_) | Event::Eof { .. }) {
            self.pending += 1;
        }
        self.seq += 1;
        self.payloads.push(Some(event));
        self.events.push(Reverse((at, self.seq, self.payloads.len() - 1)));
    }

    fn send(&mut self, from: u32, to: u32, wire: Wire) {
        if let Some(side) = &self.partition {
            if side.contains(&from) != side.contains(&to) {
                self.held_by_partition.push((from, to, wire));
                return;
            }
        }
        let at = self.now + self.rng.range(10, MAX_DELAY_US);
        self.schedule(at, Event::Deliver { from, to, wire });
    }

    fn now_ms(&self) -> u64 {
        self.now / 1000
    }

    /// Runs until every running rank has an outcome and no fault is still to come; false if
    /// that did not happen within the time limit.
    fn run(&mut self) -> bool {
        while let Some(Reverse((at, _, index))) = self.events.pop() {
            self.now = at;
            if self.now >= TIME_LIMIT_US {
                return false;
            }
            let event = self.payloads[index].take().expect("each event runs once");
            if !matches!(event, Event::Deliver { .. } | Event::Tick(_) | Event::Eof { .. }) {
                self.pending -= 1;
            }
            self.handle(event);
            if self.pending == 0 && self.nodes.iter().all(|n| n.life != Life::Running || n.outcome.is_some()) {
                return true;
            }
        }
        true
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, wire } => match self.nodes[to as usize].life {
                Life::Killed => {}
                Life::Stopped => self.nodes[to as usize].held.push((from, wire)),
                Life::Running => self.receive(to, from, wire),
            },
            Event::Tick(rank) => {
                if self.nodes[rank as usize].life != Life::Running {
                    return; // Resume restarts the ticks.
                }
                let now_ms = self.now_ms();
                let beat = self.nodes[rank as usize].detector.poll(now_ms);
                if let Some(next) = beat.heartbeat_to {
                    self.send(rank, next, Wire::Heartbeat);
                }
                if let Some(s) = beat.suspect {
                    self.found_dead(rank, s.rank);
                    // Every failure known here, for the ranks between may have failed too.
                    if let Some(watched) = s.watched_next {
                        for dead in self.nodes[rank as usize].dead.clone() {
                            self.send(rank, watched, Wire::Notice(dead));
                        }
                    }
                }
                let at = self.now + detect::interval(TIMEOUT).as_micros() as u64;
                self.schedule(at, Event::Tick(rank));
            }
            Event::Start(rank) => {
                let n = self.nodes.len() as u32;
                let node = &mut self.nodes[rank as usize];
                if node.life == Life::Killed {
                    return;
                }
                node.agreement = Some(Agreement::new(rank, n, node.dead.iter().copied()));
                node.dead_at_start = node.dead.clone();
                node.started_at = Some(self.now);
                if node.life == Life::Running {
                    let early = std::mem::take(&mut node.early);
                    for (from, m) in early {
                        self.agree(rank, |a| a.handle_message(from, m));
                    }
                    self.agree(rank, |_| {});
                }
            }
            Event::Kill(rank) => {
                self.nodes[rank as usize].life = Life::Killed;
                for at in (0..self.nodes.len() as u32).filter(|&r| r != rank) {
                    let when = self.now + self.rng.range(10, MAX_DELAY_US);
                    self.schedule(when, Event::Eof { at, of: rank });
                }
            }
            Event::Stop(rank) => self.nodes[rank as usize].life = Life::Stopped,
            Event::Resume(rank) => {
                let node = &mut self.nodes[rank as usize];
                node.life = Life::Running;
                let held = std::mem::take(&mut node.held);
                // It may have entered the agreement while stopped (the call began just
                // before the stop): what came earlier waits in its inbox.
                let early = if node.agreement.is_some() { std::mem::take(&mut node.early) } else { Vec::new() };
                for (from, m) in early {
                    self.agree(rank, |a| a.handle_message(from, m));
                }
                for (from, wire) in held {
                    self.receive(rank, from, wire);
                }
                self.agree(rank, |_| {});
                let at = self.now + 1;
                self.schedule(at, Event::Tick(rank));
            }
            Event::Eof { at, of } => {
                if self.nodes[at as usize].life == Life::Running {
                    self.found_dead(at, of);
                }
            }
            Event::Partition(side) => self.partition = Some(side),
            Event::Heal => {
                self.partition = None;
                for (from, to, wire) in std::mem::take(&mut self.held_by_partition) {
                    self.send(from, to, wire);
                }
            }
        }
    }

    fn receive(&mut self, to: u32, from: u32, wire: Wire) {
        let now_ms = self.now_ms();
        self.nodes[to as usize].detector.handle_heard(now_ms, from);
        match wire {
            Wire::Heartbeat => {}
            Wire::Notice(rank) => {
                // A notice from a rank already counted as failed is not believed.
                if !self.nodes[to as usize].dead.contains(&from) {
                    self.found_dead(to, rank);
                }
            }
            Wire::Agree(m) => {
                let node = &mut self.nodes[to as usize];
                if node.agreement.is_none() {
                    node.early.push((from, m));
                    return;
                }
                self.agree(to, |a| a.handle_message(from, m));
            }
        }
    }

    /// `rank` counts `dead` as failed from now on and passes the notice to its live
    /// successor; a new successor (the old one failed) gets every failure known here, since
    /// notices sent to the old one may have been swallowed by it.
    fn found_dead(&mut self, rank: u32, dead: u32) {
        let n = self.nodes.len() as u32;
        let node = &mut self.nodes[rank as usize];
        let next_alive = |dead: &RankSet| (1..n).map(|i| (rank + i) % n).find(|r| !dead.contains(r));
        let before = next_alive(&node.dead);
        if dead == rank || !node.dead.insert(dead) {
            return;
        }
        node.detector.handle_dead(dead);
        let after = next_alive(&node.dead);
        let tell: Vec<u32> = if before == after { vec![dead] } else { node.dead.iter().copied().collect() };
        if let Some(next) = after {
            for failed in tell {
                self.send(rank, next, Wire::Notice(failed));
            }
        }
        // A returned call takes no more suspicions.
        if self.nodes[rank as usize].agreement.is_some() && self.nodes[rank as usize].outcome.is_none() {
            self.agree(rank, |a| a.handle_suspect(dead));
        }
    }

    /// Applies `input` to `rank`'s agreement, then does what it asks: adopts its suspicions,
    /// sends its messages, records its outcome.
    fn agree(&mut self, rank: u32, input: impl FnOnce(&mut Agreement)) {
        let node = &mut self.nodes[rank as usize];
        let returned = node.outcome.is_some();
        let Some(agreement) = node.agreement.as_mut() else { return };
        input(agreement);
        let mut out = Vec::new();
        while let Some(m) = agreement.poll_transmit() {
            out.push(m);
        }
        // After the call returned, nobody adopts its agreement's suspicions.
        let adopted: Vec<u32> = if returned { Vec::new() } else { agreement.suspected().difference(&node.dead).copied().collect() };
        let outcome = agreement.outcome();
        for (to, m) in out {
            self.send(rank, to, Wire::Agree(m));
        }
        for dead in adopted {
            self.found_dead(rank, dead);
        }
        let node = &mut self.nodes[rank as usize];
        if node.outcome.is_none() {
            if let Some(outcome) = outcome {
                node.outcome = Some((self.now, outcome));
            }
        }
    }
}

/// Builds and runs the job of one seed.
fn simulate(seed: u64) -> Report {
    let mut rng = Rng(seed);
    let n = rng.range(2, 11) as u32;
    let kind = [Kind::Kill, Kind::StopForGood, Kind::StopAndResume, Kind::Partition][(seed % 4) as usize];
    let mut sim = Sim { now: 0, seq: 0, rng: Rng(rng.next()), events: BinaryHeap::new(), payloads: Vec::new(), nodes: Vec::new(), partition: None, held_by_partition: Vec::new(), pending: 0 };
    for rank in 0..n {
        sim.nodes.push(Node {
            life: Life::Running,
            detector: RingDetector::new(rank, n, TIMEOUT, 0),
            dead: RankSet::new(),
            agreement: None,
            early: Vec::new(),
            held: Vec::new(),
            dead_at_start: RankSet::new(),
            started_at: None,
            outcome: None,
        });
        let phase = rng.range(1, 20_000);
        sim.schedule(phase, Event::Tick(rank));
    }
    let mut starts = Vec::new();
    for rank in 0..n {
        let at = rng.range(0, 300_000);
        starts.push(at);
        sim.schedule(at, Event::Start(rank));
    }
    let first_start = starts.iter().copied().min().unwrap_or(0);
    // Faults hit up to n - 1 ranks, so that one never fails.
    let mut ranks: Vec<u32> = (0..n).collect();
    for i in (1..ranks.len()).rev() {
        ranks.swap(i, rng.range(0, i as u64 + 1) as usize);
    }
    let victims: Vec<u32> = ranks[..rng.range(0, n as u64) as usize].to_vec();
    let (mut faulty, mut forever_gone, mut killed_before_start) = (RankSet::new(), RankSet::new(), RankSet::new());
    match kind {
        Kind::Kill | Kind::StopForGood => {
            for &v in &victims {
                let at = rng.range(0, 400_000);
                sim.schedule(at, if kind == Kind::Kill { Event::Kill(v) } else { Event::Stop(v) });
                faulty.insert(v);
                forever_gone.insert(v);
                if at < first_start {
                    killed_before_start.insert(v);
                }
            }
        }
        Kind::StopAndResume => {
            for &v in &victims {
                let at = rng.range(0, 400_000);
                sim.schedule(at, Event::Stop(v));
                sim.schedule(at + rng.range(50_000, 600_000), Event::Resume(v));
                faulty.insert(v);
            }
        }
        Kind::Partition => {
            let side: RankSet = ranks[..rng.range(1, n as u64) as usize].iter().copied().collect();
            let at = rng.range(0, 300_000);
            sim.schedule(at, Event::Partition(side));
            sim.schedule(at + rng.range(50_000, 600_000), Event::Heal);
            faulty.extend(0..n);
        }
    }
    let settled = sim.run();
    Report { kind, n, killed_before_start, faulty, forever_gone, settled, nodes: sim.nodes }
}

/// Checks one run's outcomes; the error says which property broke.
fn check(r: &Report) -> Result<(), String> {
    if !r.settled {
        let states: Vec<String> = r.nodes.iter().enumerate().map(|(rank, n)| format!("rank {rank}: {:?} {:?} {:?}", n.life, n.outcome, n.agreement)).collect();
        return Err(format!("not settled after {} s of virtual time:\n{}", TIME_LIMIT_US / 1_000_000, states.join("\n")));
    }
    let decided: Vec<(u32, &RankSet)> = r
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(rank, node)| match &node.outcome {
            Some((_, Outcome::Decided(set))) => Some((rank as u32, set)),
            _ => None,
        })
        .collect();
    let accurate = matches!(r.kind, Kind::Kill | Kind::StopForGood);
    for &(rank, set) in &decided {
        if set.contains(&rank) {
            return Err(format!("rank {rank} decided {set:?}, which holds itself"));
        }
        if accurate && !set.is_subset(&r.faulty) {
            return Err(format!("rank {rank} decided {set:?}, beyond the faulty ranks {:?}", r.faulty));
        }
    }
    // View consistency, whatever the faults: ranks that count each other alive agree.
    for &(a, va) in &decided {
        for &(b, vb) in &decided {
            if !va.contains(&b) && !vb.contains(&a) && va != vb {
                return Err(format!("ranks {a} and {b} count each other alive but decided {va:?} and {vb:?}"));
            }
        }
    }
    for (rank, node) in r.nodes.iter().enumerate() {
        let rank = rank as u32;
        if r.forever_gone.contains(&rank) {
            continue;
        }
        match &node.outcome {
            None => return Err(format!("rank {rank} never finished")),
            Some((_, Outcome::Excluded { by })) if accurate => return Err(format!("rank {rank}, which never failed, was excluded by rank {by}")),
            Some(_) => {}
        }
    }
    if accurate {
        let Some(&(first, value)) = decided.first() else { return Err("nobody decided".into()) };
        if let Some((other, v)) = decided.iter().find(|(_, v)| *v != value) {
            return Err(format!("rank {first} decided {value:?} but rank {other} decided {v:?}"));
        }
        if !r.killed_before_start.is_subset(value) {
            return Err(format!("decided {value:?} leaves out ranks dead before the agreement began: {:?}", r.killed_before_start));
        }
        for &(rank, _) in &decided {
            let known = &r.nodes[rank as usize].dead_at_start;
            if !known.is_subset(value) {
                return Err(format!("rank {rank} counted {known:?} as failed on entry, but {value:?} was decided"));
            }
        }
    }
    Ok(())
}

#[test]
fn agreement_holds_over_thousands_of_seeded_jobs() {
    let seeds: u64 = std::env::var("OXCCL_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut excluded = 0;
    for seed in 0..seeds {
        let report = std::panic::catch_unwind(|| simulate(seed)).unwrap_or_else(|_| panic!("seed {seed} panicked"));
        if let Err(e) = check(&report) {
            panic!("seed {seed} ({:?}, {} ranks, faulty {:?}): {e}", report.kind, report.n, report.faulty);
        }
        for node in &report.nodes {
            match (&node.outcome, node.started_at) {
                (Some((at, Outcome::Decided(_))), Some(start)) => latencies.push(at - start),
                (Some((_, Outcome::Excluded { .. })), _) => excluded += 1,
                _ => {}
            }
        }
    }
    latencies.sort_unstable();
    let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64 / 1e3;
    eprintln!(
        "{seeds} jobs in {:.2} s: {} decisions (virtual ms from entry: median {:.1}, p99 {:.1}, max {:.1}), {excluded} ranks excluded",
        started.elapsed().as_secs_f64(),
        latencies.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
}

/// The simulator can fail: a broken agreement (each rank deciding its own suspicions, with
/// no protocol) is caught at once.
#[test]
fn the_checks_catch_a_broken_agreement() {
    let mut failures = 0;
    for seed in 0..200 {
        let mut report = simulate(seed);
        for node in &mut report.nodes {
            if let Some((at, Outcome::Decided(_))) = &node.outcome {
                node.outcome = Some((*at, Outcome::Decided(node.dead_at_start.clone())));
            }
        }
        failures += check(&report).is_err() as u32;
    }
    assert!(failures > 20, "only {failures} of 200 broken runs were caught");
}
