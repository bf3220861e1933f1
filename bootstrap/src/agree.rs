//! Agreement on the failed ranks, without I/O: the survivors of a communicator decide one
//! set of failed ranks (ULFM's `MPIX_Comm_agree` on the failed group), so that each can
//! build the same communicator of the rest.
//!
//! [`Agreement`] is a state machine: no sockets, no clock, no threads. The driver feeds it
//! suspicions ([`Agreement::handle_suspect`], from the failure detector and closed
//! connections) and messages ([`Agreement::handle_message`]), sends what
//! [`Agreement::poll_transmit`] returns, and stops when [`Agreement::outcome`] is `Some`.
//! `bootstrap/tests/fault_sim.rs` drives many of them in a deterministic simulator.
//!
//! # Protocol
//!
//! A coordinator, the lowest rank this rank does not suspect, proposes the set of ranks it
//! suspects under a ballot `(round, coordinator)`. A rank acks a proposal when the ballot is
//! at least the highest it promised and the proposal contains every rank it suspects; it
//! then counts those ranks as failed too. Otherwise it answers `Nack` with its promise and
//! suspicions, and the coordinator proposes the union under a higher ballot. A coordinator
//! that gets acks from every rank outside its proposal decides it and sends `Decide` to
//! them. A rank returns once it knows that every rank outside the decided set has decided
//! (or suspects it), so that nobody can be left waiting for a rank that already returned.
//! It learns so by gathering: the deciding coordinator (a *gatherer*) sends `Decide` to
//! every rank outside the set, each answers with its own `Decide` (an echo) to it alone,
//! and once it has heard from all (or suspects them) it sends `Done` to them — 3(n−1)
//! messages instead of every rank telling every other (n²). A rank that adopted a decision
//! from a gatherer waits for its `Done`; if it comes to suspect that gatherer first, or
//! adopted the decision from a rank that is not gathering (one answering its proposal),
//! it gathers itself: sends `Decide` to every rank outside the set it has not told, waits
//! for their echoes, then sends `Done`. A decided rank answers every `Decide` of the same
//! set from a rank it has not told with its own, and keeps answering after it returned (the
//! driver hands the finished agreement to the endpoint's readers), so a gatherer never
//! waits for a rank that returned. A rank that has decided answers a proposal
//! with its decision; a coordinator adopts it. A `Decide` under a ballot older than the
//! receiver's promise is answered `Stale` (the coordinator it promised may decide without
//! that rank's decision in view) and sent again under the promised ballot by its sender. A
//! rank counted as failed is told so (`Excluded`) when it speaks, and stops: failures are
//! fail-stop, as in ULFM.
//!
//! # Guarantees
//!
//! With crash failures found by the detector (a suspected rank is dead, or stays stopped):
//! every rank that decides decides the same set (agreement); the set holds every rank any
//! survivor suspected when it acked, and never a rank that decided (validity); every rank
//! that does not fail decides (termination). With false suspicions — a stopped rank that
//! resumes, a partition that heals — no protocol without a majority can keep agreement, so
//! this one keeps views consistent instead: two ranks that decided and count each other
//! alive decided the same set, and a rank counted as failed ends with
//! [`Outcome::Excluded`] once it hears from a survivor. The simulator checks both over
//! thousands of seeds.

use std::collections::{BTreeSet, VecDeque};

/// A set of ranks.
pub type RankSet = BTreeSet<u32>;

/// A proposal's number: a higher round wins, ties go to the higher coordinator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ballot {
    pub round: u32,
    pub coordinator: u32,
}

/// What agreeing ranks send each other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgreeMessage {
    /// The coordinator proposes `failed` as the decision.
    Propose { ballot: Ballot, failed: RankSet },
    /// The sender accepts the proposal of `ballot`.
    Ack { ballot: Ballot },
    /// The sender refuses the proposal of `ballot`: it promised `promised`, or suspects
    /// ranks the proposal leaves out.
    Nack { ballot: Ballot, promised: Ballot, suspected: RankSet },
    /// `failed` is decided: to the ranks outside it by a gatherer, as an echo to a rank
    /// that told this one, and in answer to a proposal. `gathering`: the sender collects the
    /// echoes and will send `Done` (a rank adopting the decision from it waits for that).
    Decide { ballot: Ballot, failed: RankSet, gathering: bool },
    /// Every rank outside `failed` decided it, or the sender suspects it: those in `unheard`.
    Done { ballot: Ballot, failed: RankSet, unheard: RankSet },
    /// The sender promised `promised`, newer than the `Decide` it got: send it again under
    /// that ballot.
    Stale { promised: Ballot },
    /// The sender counts the receiver as failed.
    Excluded,
    /// The sender was excluded and takes no further part: count it as failed.
    Left,
}

/// How an agreement ended for this rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The agreed set of failed ranks (never this rank).
    Decided(RankSet),
    /// Rank `by` counts this rank as failed: it is not among the survivors.
    Excluded { by: u32 },
}

/// One rank's part in an agreement among `n` ranks.
#[derive(Debug)]
pub struct Agreement {
    me: u32,
    n: u32,
    suspected: RankSet,
    /// The highest ballot this rank promised not to go below.
    promised: Option<Ballot>,
    /// The highest round seen in any ballot.
    highest_round: u32,
    coordinating: Option<Round>,
    decision: Option<(Ballot, RankSet)>,
    /// Ranks whose `Decide` of this rank's decision arrived.
    echoed: RankSet,
    /// Ranks this rank sent its decision to.
    told: RankSet,
    /// The rank whose `Decide` (from a gatherer) this rank adopted; `None` for a gatherer.
    source: Option<u32>,
    /// This rank gathers the echoes and sends `Done` once complete.
    gathering: bool,
    /// This gatherer sent its `Done`.
    done_sent: bool,
    /// Decisions heard before this rank decided (kept even when refused as stale: they
    /// still show what their senders decided).
    heard_decisions: Vec<(u32, RankSet)>,
    excluded_by: Option<u32>,
    outbox: VecDeque<(u32, AgreeMessage)>,
}

/// A coordinator's proposal in progress.
#[derive(Debug)]
struct Round {
    ballot: Ballot,
    failed: RankSet,
    /// Ranks outside `failed` whose ack has not come.
    waiting: RankSet,
}

impl Agreement {
    /// Starts rank `me` of `n` with the ranks it already counts as failed.
    pub fn new(me: u32, n: u32, suspected: impl IntoIterator<Item = u32>) -> Agreement {
        assert!(me < n, "rank {me} of {n}");
        let mut agreement = Agreement {
            me,
            n,
            suspected: suspected.into_iter().filter(|&r| r < n && r != me).collect(),
            promised: None,
            highest_round: 0,
            coordinating: None,
            decision: None,
            echoed: RankSet::new(),
            told: RankSet::new(),
            source: None,
            gathering: false,
            done_sent: false,
            heard_decisions: Vec::new(),
            excluded_by: None,
            outbox: VecDeque::new(),
        };
        agreement.maybe_coordinate();
        agreement
    }

    /// The ranks this rank counts as failed.
    pub fn suspected(&self) -> &RankSet {
        &self.suspected
    }

    /// The decided set, once decided (the rank may still wait for others' decisions before
    /// its [`Agreement::outcome`]).
    pub fn decision(&self) -> Option<&RankSet> {
        self.decision.as_ref().map(|(_, failed)| failed)
    }

    /// `Some` once this rank is done: decided and heard from every rank outside the
    /// decision (or suspects it), or excluded.
    pub fn outcome(&self) -> Option<Outcome> {
        if let Some(by) = self.excluded_by {
            return Some(Outcome::Excluded { by });
        }
        let (_, failed) = self.decision.as_ref()?;
        let all_heard = (0..self.n).filter(|r| *r != self.me && !failed.contains(r)).all(|r| self.echoed.contains(&r) || self.suspected.contains(&r));
        all_heard.then(|| Outcome::Decided(failed.clone()))
    }

    /// The next message to send, as `(to, message)`.
    pub fn poll_transmit(&mut self) -> Option<(u32, AgreeMessage)> {
        self.outbox.pop_front()
    }

    /// `rank` is counted as failed from now on (detector, closed connection, notice).
    pub fn handle_suspect(&mut self, rank: u32) {
        if rank >= self.n || rank == self.me || !self.suspected.insert(rank) || self.excluded_by.is_some() {
            return;
        }
        if self.decision.is_some() {
            // The gatherer this rank waits for failed: gather in its place.
            if !self.gathering && self.source == Some(rank) && self.outcome().is_none() {
                self.gather();
            }
            self.finish_gathering_if_done();
            return;
        }
        match &self.coordinating {
            Some(round) if !round.failed.contains(&rank) => self.start_round(),
            Some(_) => {}
            None => self.maybe_coordinate(),
        }
    }

    /// A message from `from`. Messages from ranks out of range, from this rank, or after
    /// this rank was excluded are ignored.
    pub fn handle_message(&mut self, from: u32, message: AgreeMessage) {
        if from >= self.n || from == self.me || self.excluded_by.is_some() {
            return;
        }
        if self.suspected.contains(&from) {
            // Fail-stop: a rank counted as failed is told so, and not listened to.
            if matches!(message, AgreeMessage::Propose { .. } | AgreeMessage::Decide { .. } | AgreeMessage::Nack { .. } | AgreeMessage::Ack { .. }) {
                self.outbox.push_back((from, AgreeMessage::Excluded));
            }
            return;
        }
        match message {
            AgreeMessage::Propose { ballot, failed } => self.on_propose(from, ballot, failed),
            AgreeMessage::Ack { ballot } => self.on_ack(from, ballot),
            AgreeMessage::Nack { ballot, promised, suspected } => self.on_nack(from, ballot, promised, suspected),
            AgreeMessage::Decide { ballot, failed, gathering } => self.on_decide(from, ballot, failed, gathering),
            AgreeMessage::Done { ballot, failed, unheard } => self.on_done(from, ballot, failed, unheard),
            AgreeMessage::Stale { promised } => {
                self.see(promised);
                if let Some((_, failed)) = &self.decision {
                    let (failed, gathering) = (failed.clone(), self.gathering);
                    self.told.insert(from);
                    self.outbox.push_back((from, AgreeMessage::Decide { ballot: promised, failed, gathering }));
                }
            }
            AgreeMessage::Excluded => {
                if self.decision.is_none() {
                    self.exclude(from);
                }
            }
            AgreeMessage::Left => self.handle_suspect(from),
        }
        self.finish_gathering_if_done();
    }

    fn see(&mut self, ballot: Ballot) {
        self.highest_round = self.highest_round.max(ballot.round);
    }

    /// Coordinates when every lower rank is suspected and nothing is decided.
    fn maybe_coordinate(&mut self) {
        let lowest_alive = (0..self.me).all(|r| self.suspected.contains(&r));
        if lowest_alive && self.coordinating.is_none() && self.decision.is_none() && self.excluded_by.is_none() {
            self.start_round();
        }
    }

    /// Proposes this rank's suspicions under a new ballot.
    fn start_round(&mut self) {
        self.highest_round += 1;
        let ballot = Ballot { round: self.highest_round, coordinator: self.me };
        self.promised = Some(ballot);
        let failed = self.suspected.clone();
        let waiting: RankSet = (0..self.n).filter(|r| *r != self.me && !failed.contains(r)).collect();
        for &r in &waiting {
            self.outbox.push_back((r, AgreeMessage::Propose { ballot, failed: failed.clone() }));
        }
        self.coordinating = Some(Round { ballot, failed, waiting });
        self.finish_round_if_done();
    }

    fn finish_round_if_done(&mut self) {
        if let Some(round) = self.coordinating.take_if(|r| r.waiting.is_empty()) {
            self.decide(round.ballot, round.failed, None);
        }
    }

    fn on_propose(&mut self, from: u32, ballot: Ballot, failed: RankSet) {
        self.see(ballot);
        if let Some((decided_ballot, decided)) = &self.decision {
            let message = AgreeMessage::Decide { ballot: *decided_ballot, failed: decided.clone(), gathering: self.gathering };
            self.told.insert(from);
            self.outbox.push_back((from, message));
            return;
        }
        if failed.contains(&self.me) {
            self.exclude(from);
            return;
        }
        if self.promised.is_some_and(|p| ballot < p) || !self.suspected.is_subset(&failed) {
            let promised = self.promised.map_or(ballot, |p| p.max(ballot));
            self.promised = Some(promised);
            self.outbox.push_back((from, AgreeMessage::Nack { ballot, promised, suspected: self.suspected.clone() }));
            return;
        }
        self.promised = Some(ballot);
        self.suspected.extend(failed);
        self.outbox.push_back((from, AgreeMessage::Ack { ballot }));
    }

    fn on_ack(&mut self, from: u32, ballot: Ballot) {
        if let Some(round) = self.coordinating.as_mut().filter(|r| r.ballot == ballot) {
            round.waiting.remove(&from);
            self.finish_round_if_done();
        }
    }

    fn on_nack(&mut self, from: u32, ballot: Ballot, promised: Ballot, suspected: RankSet) {
        self.see(promised);
        if self.coordinating.as_ref().is_none_or(|r| r.ballot != ballot) {
            return;
        }
        if suspected.contains(&self.me) {
            self.exclude(from);
            return;
        }
        self.suspected.extend(suspected);
        self.start_round();
    }

    fn on_decide(&mut self, from: u32, ballot: Ballot, failed: RankSet, gathering: bool) {
        self.see(ballot);
        if let Some((decided_ballot, decided)) = &self.decision {
            if *decided == failed {
                self.echoed.insert(from);
                // The sender may be gathering: echo, once.
                if self.told.insert(from) {
                    let message = AgreeMessage::Decide { ballot: *decided_ballot, failed: decided.clone(), gathering: self.gathering };
                    self.outbox.push_back((from, message));
                }
            }
            return;
        }
        if failed.contains(&self.me) {
            self.exclude(from);
            return;
        }
        self.heard_decisions.push((from, failed.clone()));
        let coordinating_at_promise = self.coordinating.as_ref().is_some_and(|r| Some(r.ballot) == self.promised);
        match self.promised {
            // A coordinator adopts a decision under its own ballot: none of the ranks it
            // asked can then see another decided under it.
            Some(promised) if ballot < promised && coordinating_at_promise => self.decide(promised, failed, None),
            Some(promised) if ballot < promised => self.outbox.push_back((from, AgreeMessage::Stale { promised })),
            // Wait for the gatherer's `Done`, or gather if the sender does not.
            _ => self.decide(ballot, failed, gathering.then_some(from)),
        }
    }

    fn on_done(&mut self, from: u32, ballot: Ballot, failed: RankSet, unheard: RankSet) {
        if self.decision.is_none() {
            // Its `Decide` may come later (reordered): the `Done` implies it.
            self.on_decide(from, ballot, failed.clone(), true);
        }
        let Some((_, decided)) = &self.decision else { return };
        if *decided != failed || self.excluded_by.is_some() {
            return;
        }
        // The sender heard every rank outside the set, or suspects it.
        let others: Vec<u32> = (0..self.n).filter(|r| *r != self.me && !failed.contains(r)).collect();
        for r in others {
            if unheard.contains(&r) {
                self.suspected.insert(r);
            } else {
                self.echoed.insert(r);
            }
        }
    }

    /// Sends this rank's decision to every rank outside it not yet told, and gathers their
    /// echoes.
    fn gather(&mut self) {
        let Some((ballot, failed)) = self.decision.clone() else { return };
        self.gathering = true;
        for r in (0..self.n).filter(|r| *r != self.me && !failed.contains(r)) {
            if self.told.insert(r) {
                self.outbox.push_back((r, AgreeMessage::Decide { ballot, failed: failed.clone(), gathering: true }));
            }
        }
    }

    /// A gatherer that heard from every rank outside its decision (or suspects it) tells
    /// them all so.
    fn finish_gathering_if_done(&mut self) {
        if !self.gathering || self.done_sent || self.outcome().is_none() {
            return;
        }
        let Some((ballot, failed)) = self.decision.clone() else { return };
        self.done_sent = true;
        let others: Vec<u32> = (0..self.n).filter(|r| *r != self.me && !failed.contains(r)).collect();
        let unheard: RankSet = others.iter().copied().filter(|r| !self.echoed.contains(r)).collect();
        for &r in &others {
            self.outbox.push_back((r, AgreeMessage::Done { ballot, failed: failed.clone(), unheard: unheard.clone() }));
        }
    }

    /// Rank `by` counts this rank as failed: stop, and tell the others not to wait for it
    /// (one may be waiting for this rank's proposal).
    fn exclude(&mut self, by: u32) {
        self.coordinating = None;
        self.excluded_by = Some(by);
        for r in (0..self.n).filter(|r| *r != self.me && !self.suspected.contains(r)) {
            self.outbox.push_back((r, AgreeMessage::Left));
        }
    }

    /// Decides `failed`, adopted from the gatherer `source` (echoing to it and waiting for
    /// its `Done`), or else as a gatherer.
    fn decide(&mut self, ballot: Ballot, failed: RankSet, source: Option<u32>) {
        self.coordinating = None;
        self.promised = Some(self.promised.map_or(ballot, |p| p.max(ballot)));
        self.suspected.extend(failed.iter().copied());
        let heard: Vec<u32> = self.heard_decisions.iter().filter(|(_, v)| *v == failed).map(|(r, _)| *r).collect();
        self.heard_decisions.clear();
        self.decision = Some((ballot, failed.clone()));
        self.source = source;
        // Echo to the source and to every rank whose decision came earlier (a gatherer may
        // be waiting for it).
        for r in source.into_iter().chain(heard) {
            self.echoed.insert(r);
            if self.told.insert(r) {
                self.outbox.push_back((r, AgreeMessage::Decide { ballot, failed: failed.clone(), gathering: false }));
            }
        }
        if source.is_none() {
            self.gather();
        }
        self.finish_gathering_if_done();
    }
}

impl AgreeMessage {
    /// The message as bytes (a kind byte, then little-endian fields).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let ballot = |out: &mut Vec<u8>, b: &Ballot| {
            out.extend_from_slice(&b.round.to_le_bytes());
            out.extend_from_slice(&b.coordinator.to_le_bytes());
        };
        let set = |out: &mut Vec<u8>, s: &RankSet| {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            s.iter().for_each(|r| out.extend_from_slice(&r.to_le_bytes()));
        };
        match self {
            AgreeMessage::Propose { ballot: b, failed } => {
                out.push(1);
                ballot(&mut out, b);
                set(&mut out, failed);
            }
            AgreeMessage::Ack { ballot: b } => {
                out.push(2);
                ballot(&mut out, b);
            }
            AgreeMessage::Nack { ballot: b, promised, suspected } => {
                out.push(3);
                ballot(&mut out, b);
                ballot(&mut out, promised);
                set(&mut out, suspected);
            }
            AgreeMessage::Decide { ballot: b, failed, gathering } => {
                out.push(4);
                ballot(&mut out, b);
                set(&mut out, failed);
                out.push(*gathering as u8);
            }
            AgreeMessage::Done { ballot: b, failed, unheard } => {
                out.push(8);
                ballot(&mut out, b);
                set(&mut out, failed);
                set(&mut out, unheard);
            }
            AgreeMessage::Stale { promised } => {
                out.push(5);
                ballot(&mut out, promised);
            }
            AgreeMessage::Excluded => out.push(6),
            AgreeMessage::Left => out.push(7),
        }
        out
    }

    /// Decodes [`AgreeMessage::encode`]'s bytes; anything else is `None`.
    pub fn decode(bytes: &[u8]) -> Option<AgreeMessage> {
        let mut r = Cursor { bytes };
        let message = match r.u8()? {
            1 => AgreeMessage::Propose { ballot: r.ballot()?, failed: r.set()? },
            2 => AgreeMessage::Ack { ballot: r.ballot()? },
            3 => AgreeMessage::Nack { ballot: r.ballot()?, promised: r.ballot()?, suspected: r.set()? },
            4 => AgreeMessage::Decide { ballot: r.ballot()?, failed: r.set()?, gathering: r.flag()? },
            5 => AgreeMessage::Stale { promised: r.ballot()? },
            6 => AgreeMessage::Excluded,
            7 => AgreeMessage::Left,
            8 => AgreeMessage::Done { ballot: r.ballot()?, failed: r.set()?, unheard: r.set()? },
            _ => return None,
        };
        r.bytes.is_empty().then_some(message)
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
}

impl Cursor<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(first)
    }

    fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.bytes.split_first_chunk::<4>()?;
        self.bytes = rest;
        Some(u32::from_le_bytes(*head))
    }

    fn ballot(&mut self) -> Option<Ballot> {
        Some(Ballot { round: self.u32()?, coordinator: self.u32()? })
    }

    fn set(&mut self) -> Option<RankSet> {
        let len = self.u32()? as usize;
        if len > self.bytes.len() / 4 {
            return None;
        }
        (0..len).map(|_| self.u32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delivers every queued message at once, in order, until nothing moves.
    fn run(ranks: &mut [Agreement], dead: &RankSet) {
        loop {
            let mut moved = false;
            for from in 0..ranks.len() {
                while let Some((to, m)) = ranks[from].poll_transmit() {
                    moved = true;
                    if !dead.contains(&to) && !dead.contains(&(from as u32)) {
                        ranks[to as usize].handle_message(from as u32, m);
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    #[test]
    fn survivors_agree_on_the_union_of_their_suspicions() {
        let dead: RankSet = [1, 3].into();
        // Rank 0 knows of 1 only, rank 2 of 3 only.
        let mut ranks = vec![Agreement::new(0, 4, [1]), Agreement::new(1, 4, []), Agreement::new(2, 4, [3]), Agreement::new(3, 4, [])];
        run(&mut ranks, &dead);
        for r in [0, 2] {
            assert_eq!(ranks[r].outcome(), Some(Outcome::Decided(dead.clone())), "rank {r}");
        }
    }

    #[test]
    fn a_dead_coordinator_is_replaced_by_the_next_lowest() {
        let dead: RankSet = [0].into();
        let mut ranks: Vec<Agreement> = (0..3).map(|r| Agreement::new(r, 3, [])).collect();
        // Rank 0 proposed, then died before anyone answered.
        while ranks[0].poll_transmit().is_some() {}
        run(&mut ranks, &dead);
        assert!(ranks[1].outcome().is_none());
        ranks[1].handle_suspect(0);
        run(&mut ranks, &dead);
        for r in [1, 2] {
            assert_eq!(ranks[r].outcome(), Some(Outcome::Decided(dead.clone())), "rank {r}");
        }
    }

    #[test]
    fn without_new_failures_the_decision_costs_a_linear_number_of_messages() {
        // 16 ranks, rank 8 dead and known to all: propose, ack, decide, echo and done, one
        // each per survivor other than the coordinator (every rank telling every other
        // would take 14 × 14 for the last round alone).
        let dead: RankSet = [8].into();
        let mut ranks: Vec<Agreement> = (0..16).map(|r| Agreement::new(r, 16, [8])).collect();
        let mut sent = 0;
        loop {
            let mut moved = false;
            for from in 0..16u32 {
                while let Some((to, m)) = ranks[from as usize].poll_transmit() {
                    moved = true;
                    sent += 1;
                    if !dead.contains(&to) && !dead.contains(&from) {
                        ranks[to as usize].handle_message(from, m);
                    }
                }
            }
            if !moved {
                break;
            }
        }
        for r in (0..16).filter(|r| *r != 8) {
            assert_eq!(ranks[r].outcome(), Some(Outcome::Decided(dead.clone())), "rank {r}");
        }
        assert_eq!(sent, 5 * 14);
    }

    #[test]
    fn a_rank_gathers_in_place_of_a_gatherer_that_died() {
        let mut ranks: Vec<Agreement> = (0..4).map(|r| Agreement::new(r, 4, [])).collect();
        // Rank 0 proposes, everyone acks, and rank 0 decides.
        let proposals: Vec<(u32, AgreeMessage)> = std::iter::from_fn(|| ranks[0].poll_transmit()).collect();
        for (to, m) in proposals {
            ranks[to as usize].handle_message(0, m);
            let ack = ranks[to as usize].poll_transmit().expect("an ack");
            ranks[0].handle_message(to, ack.1);
        }
        assert_eq!(ranks[0].decision(), Some(&RankSet::new()));
        // Its decision reaches rank 1 only, then it dies.
        let decides: Vec<(u32, AgreeMessage)> = std::iter::from_fn(|| ranks[0].poll_transmit()).collect();
        assert!(decides.iter().all(|(_, m)| matches!(m, AgreeMessage::Decide { gathering: true, .. })), "{decides:?}");
        let (to, m) = decides.into_iter().find(|(to, _)| *to == 1).unwrap();
        ranks[to as usize].handle_message(0, m);
        let dead: RankSet = [0].into();
        run(&mut ranks, &dead);
        // Rank 1 waits for rank 0's `Done`; the others for a proposal.
        assert!((1..4).all(|r| ranks[r].outcome().is_none()));
        for r in 1..4 {
            ranks[r].handle_suspect(0);
        }
        run(&mut ranks, &dead);
        for r in 1..4 {
            assert_eq!(ranks[r].outcome(), Some(Outcome::Decided(RankSet::new())), "rank {r}");
        }
    }

    #[test]
    fn a_rank_counted_as_failed_is_excluded_when_it_speaks() {
        let mut a = Agreement::new(1, 3, [0]);
        a.handle_message(0, AgreeMessage::Propose { ballot: Ballot { round: 1, coordinator: 0 }, failed: RankSet::new() });
        let sent: Vec<(u32, AgreeMessage)> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert!(sent.contains(&(0, AgreeMessage::Excluded)), "{sent:?}");
        let mut b = Agreement::new(0, 3, []);
        b.handle_message(1, AgreeMessage::Excluded);
        assert_eq!(b.outcome(), Some(Outcome::Excluded { by: 1 }));
    }

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let ballot = Ballot { round: 7, coordinator: 2 };
        let set: RankSet = [1, 5, 9].into();
        for m in [
            AgreeMessage::Propose { ballot, failed: set.clone() },
            AgreeMessage::Ack { ballot },
            AgreeMessage::Nack { ballot, promised: ballot, suspected: set.clone() },
            AgreeMessage::Decide { ballot, failed: RankSet::new(), gathering: true },
            AgreeMessage::Decide { ballot, failed: set.clone(), gathering: false },
            AgreeMessage::Done { ballot, failed: set.clone(), unheard: [3].into() },
            AgreeMessage::Stale { promised: ballot },
            AgreeMessage::Excluded,
            AgreeMessage::Left,
        ] {
            assert_eq!(AgreeMessage::decode(&m.encode()), Some(m));
        }
        assert_eq!(AgreeMessage::decode(&[]), None);
        assert_eq!(AgreeMessage::decode(&[9]), None);
        assert_eq!(AgreeMessage::decode(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255]), None);
        let mut long = AgreeMessage::Excluded.encode();
        long.push(0);
        assert_eq!(AgreeMessage::decode(&long), None);
    }
}
