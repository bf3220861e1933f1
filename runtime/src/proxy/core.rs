//! What a network link of the proxy decides, without I/O: no Net calls, no FIFO access, no
//! clock of its own. The edge (`super`) asks a link's core for its next step, giving it
//! what it sees (free or filled FIFO slots, the time), does the step (a Net call), and
//! tells the core how it went. Everything the proxy decides is here: when to connect or
//! accept and for how long, which slots to send, how many receives to post at once
//! (grouping up to the Net's `max_recvs` only messages the executor announced as
//! independent), which tags they carry, when a link is idle.
//!
//! Both ends count messages from 0 and tag message k with k (wrapping): a multi-receive's
//! tags pick each message's buffer (the Net's contract), and the receiving side's buffers
//! are consecutive FIFO slots, so message k lands in slot k.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Why a link cannot go on: the edge turns this into the link's failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stall {
    pub what: &'static str,
    pub waited: Duration,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} did not happen within {:?}", self.what, self.waited)
    }
}

/// The next thing a sending link does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendStep {
    /// Call the Net's `connect` with the peer's handle (again).
    Connect,
    /// `isend` the `slot`-th filled FIFO slot (counted from the oldest not yet released)
    /// with `tag`.
    Send { slot: usize, tag: u32 },
    /// `test` the oldest send in flight.
    Test,
    /// Nothing to do until something changes.
    Idle,
}

/// The next thing a receiving link does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvStep {
    /// Call the Net's `accept` on the listening comm (again).
    Accept,
    /// `irecv` `count` buffers: the free FIFO slots from the `first`-th on (counted from the
    /// oldest free slot), tags from `tag` on.
    Post { first: usize, count: usize, tag: u32 },
    /// `test` the oldest receive in flight.
    Test,
    /// Nothing to do until something changes.
    Idle,
}

/// A sending link's state.
#[derive(Debug)]
pub(crate) struct SendCore {
    /// When connecting must have succeeded; `None` once connected.
    connect_by: Option<(Instant, Duration)>,
    /// Sends posted and not yet completed (they are the oldest filled slots).
    in_flight: usize,
    /// The next message's number.
    next: u64,
    /// The Net refused a send (busy): none is tried again in this pass before one
    /// completes.
    refused: bool,
    /// Messages announced and not yet sent to completion (for [`SendCore::active`]);
    /// below 0 while sends completed before their announcement reached the proxy (the
    /// executor announces, then fills: a pass may drain the mailbox between the two and
    /// still see the slot).
    announced: i64,
}

impl SendCore {
    /// A link that must connect within `timeout` from `now`.
    pub fn new(now: Instant, timeout: Duration) -> SendCore {
        SendCore { connect_by: Some((now + timeout, timeout)), in_flight: 0, next: 0, refused: false, announced: 0 }
    }

    /// A new pass of the proxy over its links begins: a refused send may be tried again.
    pub fn new_pass(&mut self) {
        self.refused = false;
    }

    /// The next step, `filled` FIFO slots being ready (sends in flight included).
    pub fn next(&mut self, filled: usize, now: Instant) -> Result<SendStep, Stall> {
        if let Some((by, timeout)) = self.connect_by {
            if now >= by {
                return Err(Stall { what: "connecting to the peer", waited: timeout });
            }
            return Ok(SendStep::Connect);
        }
        if !self.refused && filled > self.in_flight {
            return Ok(SendStep::Send { slot: self.in_flight, tag: self.next as u32 });
        }
        Ok(if self.in_flight > 0 { SendStep::Test } else { SendStep::Idle })
    }

    pub fn connected(&mut self) {
        self.connect_by = None;
    }

    /// The number of the message the next [`SendStep::Send`] sends (counted from 0 over the
    /// link's life).
    pub fn next_message(&self) -> u64 {
        self.next
    }

    /// The Net took the send of [`SendStep::Send`].
    pub fn sent(&mut self) {
        self.in_flight += 1;
        self.next += 1;
    }

    /// The Net refused the send (too many in flight).
    pub fn refused(&mut self) {
        self.refused = true;
    }

    /// The oldest send completed: its slot may be released.
    pub fn completed(&mut self) {
        debug_assert!(self.in_flight > 0, "a completion without a send in flight");
        self.in_flight -= 1;
        self.refused = false;
        self.announced -= 1;
    }

    /// `messages` more will be sent (by an operation starting now).
    pub fn announce(&mut self, messages: u64) {
        self.announced += messages as i64;
    }

    /// Whether announced messages are still to be sent, or sends are in flight.
    pub fn active(&self) -> bool {
        self.announced > 0 || self.in_flight > 0 || self.connect_by.is_some()
    }
}

/// A receiving link's state.
#[derive(Debug)]
pub(crate) struct RecvCore {
    /// When the peer must have connected; `None` once accepted.
    accept_by: Option<(Instant, Duration)>,
    max_recvs: usize,
    /// Announced batches not yet posted, in order: (messages, independent).
    announced: VecDeque<(u64, bool)>,
    /// Receives in flight, oldest first: how many slots each carries.
    in_flight: VecDeque<usize>,
    /// Slots handed to receives in flight.
    posted: usize,
    /// The next message's number.
    next: u64,
    /// The Net refused a receive (busy): none is tried again in this pass before one
    /// completes.
    refused: bool,
}

impl RecvCore {
    /// A link whose peer must connect within `timeout` from `now`, over a Net that takes up
    /// to `max_recvs` buffers in one receive.
    pub fn new(now: Instant, timeout: Duration, max_recvs: usize) -> RecvCore {
        RecvCore { accept_by: Some((now + timeout, timeout)), max_recvs: max_recvs.max(1), announced: VecDeque::new(), in_flight: VecDeque::new(), posted: 0, next: 0, refused: false }
    }

    /// `messages` more will arrive; `independent` when the sender sends them all without
    /// waiting for this rank, so that their receives may be posted together (a grouped
    /// receive completes only when all its buffers are filled: dependent messages, such
    /// as a ring's, would deadlock in one).
    pub fn announce(&mut self, messages: u64, independent: bool) {
        if messages > 0 {
            self.announced.push_back((messages, independent));
        }
    }

    /// A new pass of the proxy over its links begins: a refused receive may be tried again.
    pub fn new_pass(&mut self) {
        self.refused = false;
    }

    /// The next step, `free` FIFO slots being free (those handed to receives included).
    pub fn next(&mut self, free: usize, now: Instant) -> Result<RecvStep, Stall> {
        if let Some((by, timeout)) = self.accept_by {
            if now >= by {
                return Err(Stall { what: "the peer's connection", waited: timeout });
            }
            return Ok(RecvStep::Accept);
        }
        let unposted = free.saturating_sub(self.posted);
        if let (false, Some(&(left, independent))) = (self.refused, self.announced.front()) {
            let count = (if independent { self.max_recvs } else { 1 }).min(unposted).min(left as usize);
            if count > 0 {
                return Ok(RecvStep::Post { first: self.posted, count, tag: self.next as u32 });
            }
        }
        Ok(if self.in_flight.is_empty() { RecvStep::Idle } else { RecvStep::Test })
    }

    pub fn accepted(&mut self) {
        self.accept_by = None;
    }

    /// Whether the messages [`RecvStep::Post`] offers are independent (see
    /// [`RecvCore::announce`]): only those may share a receive with another link's.
    pub fn offers_independent(&self) -> bool {
        self.announced.front().is_some_and(|&(_, independent)| independent)
    }

    /// The Net took the receive of [`RecvStep::Post`] for `count` buffers.
    pub fn posted(&mut self, count: usize) {
        self.in_flight.push_back(count);
        self.posted += count;
        self.next += count as u64;
        if let Some(front) = self.announced.front_mut() {
            front.0 -= count as u64;
            if front.0 == 0 {
                self.announced.pop_front();
            }
        }
    }

    /// The Net refused the receive (too many in flight).
    pub fn refused(&mut self) {
        self.refused = true;
    }

    /// The oldest receive completed; how many slots it filled, to publish in order.
    pub fn completed(&mut self) -> usize {
        let count = self.in_flight.pop_front().expect("a completion without a receive in flight");
        self.posted -= count;
        self.refused = false;
        count
    }

    /// Whether announced messages are still to be received, or receives are in flight.
    pub fn active(&self) -> bool {
        !self.announced.is_empty() || !self.in_flight.is_empty() || self.accept_by.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        // A fixed origin keeps the tests independent of the clock.
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *ORIGIN.get_or_init(Instant::now) + Duration::from_millis(ms)
    }

    #[test]
    fn a_sender_connects_then_sends_each_filled_slot_once_in_order() {
        let mut s = SendCore::new(at(0), Duration::from_secs(1));
        assert_eq!(s.next(3, at(1)), Ok(SendStep::Connect));
        s.connected();
        assert_eq!(s.next(0, at(1)), Ok(SendStep::Idle));
        for k in 0..2 {
            assert_eq!(s.next(2, at(1)), Ok(SendStep::Send { slot: k, tag: k as u32 }));
            s.sent();
        }
        assert_eq!(s.next(2, at(1)), Ok(SendStep::Test), "both filled slots are in flight");
        s.completed();
        // The released slot is gone from `filled`: the FIFO now shows 1 filled + 1 new.
        assert_eq!(s.next(2, at(1)), Ok(SendStep::Send { slot: 1, tag: 2 }));
    }

    #[test]
    fn a_send_completed_before_its_announcement_arrived_leaves_the_link_idle() {
        let mut s = SendCore::new(at(0), Duration::from_secs(1));
        s.connected();
        assert!(!s.active());
        assert_eq!(s.next(1, at(0)), Ok(SendStep::Send { slot: 0, tag: 0 }), "filled before the announcement was drained");
        s.sent();
        assert!(s.active(), "in flight");
        s.completed();
        s.announce(1);
        assert!(!s.active(), "the late announcement is of the message already sent");
        s.announce(2);
        assert!(s.active(), "two more to come");
    }

    #[test]
    fn a_refused_send_waits_for_a_completion() {
        let mut s = SendCore::new(at(0), Duration::from_secs(1));
        s.connected();
        assert_eq!(s.next(2, at(0)), Ok(SendStep::Send { slot: 0, tag: 0 }));
        s.sent();
        assert_eq!(s.next(2, at(0)), Ok(SendStep::Send { slot: 1, tag: 1 }));
        s.refused();
        assert_eq!(s.next(2, at(0)), Ok(SendStep::Test), "no second try in this pass before a completion");
        s.completed();
        assert_eq!(s.next(1, at(0)), Ok(SendStep::Send { slot: 0, tag: 1 }), "the refused message is retried with its tag");
        s.refused();
        assert_eq!(s.next(1, at(0)), Ok(SendStep::Idle), "nothing in flight: the pass ends");
        s.new_pass();
        assert_eq!(s.next(1, at(0)), Ok(SendStep::Send { slot: 0, tag: 1 }), "and the next pass tries again");
    }

    #[test]
    fn connecting_and_accepting_give_up_at_their_deadline() {
        let mut s = SendCore::new(at(0), Duration::from_millis(100));
        assert_eq!(s.next(0, at(99)), Ok(SendStep::Connect));
        assert_eq!(s.next(0, at(100)), Err(Stall { what: "connecting to the peer", waited: Duration::from_millis(100) }));
        let mut r = RecvCore::new(at(0), Duration::from_millis(50), 8);
        assert_eq!(r.next(8, at(10)), Ok(RecvStep::Accept));
        assert!(r.next(8, at(60)).unwrap_err().to_string().contains("the peer's connection did not happen within 50ms"));
    }

    #[test]
    fn independent_messages_are_received_in_groups_up_to_max_recvs_dependent_ones_alone() {
        let mut r = RecvCore::new(at(0), Duration::from_secs(1), 4);
        r.accepted();
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Idle), "nothing announced, nothing posted");
        r.announce(6, true);
        r.announce(2, false);
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Post { first: 0, count: 4, tag: 0 }));
        r.posted(4);
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Post { first: 4, count: 2, tag: 4 }), "the rest of the independent batch");
        r.posted(2);
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Post { first: 6, count: 1, tag: 6 }), "dependent: one at a time");
        r.posted(1);
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Post { first: 7, count: 1, tag: 7 }));
        r.posted(1);
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Test));
        assert_eq!(r.completed(), 4);
        assert!(r.active());
        for expected in [2, 1, 1] {
            assert_eq!(r.completed(), expected);
        }
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Idle));
        assert!(!r.active());
    }

    #[test]
    fn receives_are_posted_only_into_free_slots() {
        let mut r = RecvCore::new(at(0), Duration::from_secs(1), 8);
        r.accepted();
        r.announce(10, true);
        assert_eq!(r.next(3, at(0)), Ok(RecvStep::Post { first: 0, count: 3, tag: 0 }));
        r.posted(3);
        assert_eq!(r.next(3, at(0)), Ok(RecvStep::Test), "every free slot is taken");
        r.refused();
        assert_eq!(r.completed(), 3);
        // The executor has not consumed the three slots yet: still 0 free beyond them.
        assert_eq!(r.next(0, at(0)), Ok(RecvStep::Idle));
        assert_eq!(r.next(8, at(0)), Ok(RecvStep::Post { first: 0, count: 7, tag: 3 }));
    }
}
