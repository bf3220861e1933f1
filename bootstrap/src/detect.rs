//! The heartbeat failure detector's decisions, without I/O: whom to send a heartbeat to and
//! whom to count as failed, given what was heard and when.
//!
//! Each rank sends a heartbeat to its live ring successor every [`interval`] and watches
//! its live ring predecessor: a predecessor silent for longer than the timeout is
//! suspected, and watching moves on to the next live predecessor (failed ranks drop out of
//! the ring, so survivors keep watching each other). A predecessor that said goodbye is not
//! watched. The endpoint's heartbeat thread drives a [`RingDetector`] with the clock and
//! the sockets; `bootstrap/tests/fault_sim.rs` drives many with a virtual clock.

use std::collections::BTreeSet;
use std::time::Duration;

/// How often a rank sends heartbeats for a given timeout: a fifth of it, within 10 ms..1 s.
pub fn interval(timeout: Duration) -> Duration {
    (timeout / 5).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// One rank's heartbeat bookkeeping. Times are milliseconds on the driver's clock.
#[derive(Debug)]
pub struct RingDetector {
    me: u32,
    n: u32,
    timeout_ms: u64,
    /// When each rank was last heard from.
    heard: Vec<u64>,
    dead: BTreeSet<u32>,
    left: BTreeSet<u32>,
    /// The predecessor watched at the last poll.
    watching: Option<u32>,
    last_poll: Option<u64>,
}

/// What one [`RingDetector::poll`] asks of the driver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    /// Send a heartbeat to this rank.
    pub heartbeat_to: Option<u32>,
    /// Count this rank as failed (announce it).
    pub suspect: Option<Suspicion>,
}

/// A predecessor found silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspicion {
    pub rank: u32,
    pub silent_ms: u64,
    /// The predecessor watched from now on: tell it of every failure known here directly,
    /// so that it sends its heartbeats here before its credit runs out (a notice going
    /// round the ring may be lost in a stopped rank, and the ranks between may have failed).
    pub watched_next: Option<u32>,
}

impl RingDetector {
    /// Rank `me` of `n`, counting every rank as heard at `now_ms`.
    pub fn new(me: u32, n: u32, timeout: Duration, now_ms: u64) -> RingDetector {
        RingDetector { me, n, timeout_ms: timeout.as_millis() as u64, heard: vec![now_ms; n as usize], dead: BTreeSet::new(), left: BTreeSet::new(), watching: None, last_poll: None }
    }

    /// Anything at all arrived from `from` at `now_ms`.
    pub fn handle_heard(&mut self, now_ms: u64, from: u32) {
        if let Some(h) = self.heard.get_mut(from as usize) {
            *h = (*h).max(now_ms);
        }
    }

    /// `rank` is known to have failed (by any means): it leaves the ring.
    pub fn handle_dead(&mut self, rank: u32) {
        if rank < self.n && rank != self.me {
            self.dead.insert(rank);
        }
    }

    /// `rank` left the job with a goodbye: its silence is no failure.
    pub fn handle_left(&mut self, rank: u32) {
        if rank < self.n {
            self.left.insert(rank);
        }
    }

    /// Whether `rank` is counted as failed here.
    pub fn is_dead(&self, rank: u32) -> bool {
        self.dead.contains(&rank)
    }

    /// Called every [`interval`]: the heartbeat to send and the predecessor to suspect.
    pub fn poll(&mut self, now_ms: u64) -> Beat {
        let n = self.n;
        if n < 2 {
            return Beat::default();
        }
        let alive = |r: &u32| !self.dead.contains(r);
        // A successor that left is sent nothing: its connection is gone, and a failed send
        // would announce it as failed.
        let next = (1..n).map(|i| (self.me + i) % n).find(|r| alive(r) && !self.left.contains(r));
        let prev = (1..n).map(|i| (self.me + n - i) % n).find(alive);
        let Some(prev) = prev else { return Beat::default() };
        // A poll far later than the interval means this rank was itself stopped or starved:
        // its predecessor's silence may be its own, so it gets credit too.
        let stalled = self.last_poll.is_some_and(|last| now_ms.saturating_sub(last) > self.timeout_ms);
        self.last_poll = Some(now_ms);
        if self.watching != Some(prev) || stalled {
            // Watching a new predecessor starts now (its failed successor may have been
            // found by a notice or a closed connection, not by this detector): give it half
            // a timeout of credit, as its heartbeats went to that successor until it learnt.
            // After a stall, the same.
            self.watching = Some(prev);
            let credit = now_ms.saturating_sub(self.timeout_ms / 2);
            self.heard[prev as usize] = self.heard[prev as usize].max(credit);
        }
        let silent_ms = now_ms.saturating_sub(self.heard[prev as usize]);
        let mut beat = Beat { heartbeat_to: next, suspect: None };
        if !self.left.contains(&prev) && silent_ms > self.timeout_ms {
            self.dead.insert(prev);
            let watched_next = (1..n).map(|i| (self.me + n - i) % n).find(|r| !self.dead.contains(r));
            beat.suspect = Some(Suspicion { rank: prev, silent_ms, watched_next });
            // The next poll watches `watched_next`, with credit from then.
        }
        beat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_predecessor_is_suspected_after_the_timeout_then_the_next() {
        let mut d = RingDetector::new(2, 4, Duration::from_millis(100), 0);
        assert_eq!(d.poll(50), Beat { heartbeat_to: Some(3), suspect: None });
        d.handle_heard(60, 0);
        assert_eq!(d.poll(101).suspect, Some(Suspicion { rank: 1, silent_ms: 101, watched_next: Some(0) }));
        // Rank 0, heard at 60, is watched from 150 with half a timeout of credit: suspected
        // once silent past 200.
        assert_eq!(d.poll(150).suspect, None);
        assert_eq!(d.poll(200).suspect, None);
        assert_eq!(d.poll(201).suspect.map(|s| s.rank), Some(0));
        assert_eq!(d.poll(210).heartbeat_to, Some(3));
    }

    #[test]
    fn a_predecessor_watched_after_a_notice_gets_credit() {
        let mut d = RingDetector::new(3, 4, Duration::from_millis(100), 0);
        assert_eq!(d.poll(20).suspect, None);
        // Rank 2 dies and is announced at 5000; rank 1 was last heard at start.
        d.handle_dead(2);
        assert_eq!(d.poll(5000).suspect, None);
        assert_eq!(d.poll(5049).suspect, None);
        d.handle_heard(5040, 1);
        assert_eq!(d.poll(5139).suspect, None);
        assert_eq!(d.poll(5141).suspect.map(|s| s.rank), Some(1));
    }

    #[test]
    fn a_rank_that_was_itself_stopped_does_not_blame_its_predecessor() {
        let mut d = RingDetector::new(1, 3, Duration::from_millis(100), 0);
        assert_eq!(d.poll(20).suspect, None);
        // No poll for 5 s (SIGSTOP): the predecessor is silent for as long, but gets credit.
        assert_eq!(d.poll(5020).suspect, None);
        assert_eq!(d.poll(5040).suspect, None);
        assert_eq!(d.poll(5060).suspect, None);
        assert_eq!(d.poll(5080).suspect.map(|s| s.rank), Some(0));
    }

    #[test]
    fn a_predecessor_that_left_is_not_suspected() {
        let mut d = RingDetector::new(1, 3, Duration::from_millis(100), 0);
        d.handle_left(0);
        assert_eq!(d.poll(1000).suspect, None);
        assert_eq!(d.poll(1000).heartbeat_to, Some(2));
        d.handle_dead(2);
        assert_eq!(d.poll(1000).heartbeat_to, None);
    }
}
