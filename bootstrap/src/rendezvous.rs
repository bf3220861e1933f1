//! The root's bookkeeping, without sockets: who has joined, who is refused, when the table
//! is complete. The driver in [`crate::root`] feeds it hellos and asks it for verdicts.

use std::net::SocketAddr;

use crate::id::{secrets_match, Secret, PROTOCOL_VERSION};
use crate::wire::{Hello, HELLO_MAGIC};

/// Why a hello was turned away. The text goes back to the peer and into the log.
pub type Refusal = String;

/// Checks a hello's credentials: magic, protocol version and secret.
pub fn check_credentials(hello: &Hello, secret: &Secret) -> Result<(), Refusal> {
    if hello.magic != HELLO_MAGIC {
        return Err(format!("bad magic {:02x?}", hello.magic));
    }
    if hello.version != PROTOCOL_VERSION {
        return Err(format!("protocol version {}, expected {PROTOCOL_VERSION}", hello.version));
    }
    if !secrets_match(&hello.secret, secret) {
        return Err("wrong secret (not a member of this job)".into());
    }
    Ok(())
}

/// Checks that `rank` of `nranks` is a sane position.
pub fn check_position(rank: u32, nranks: u32, expected_nranks: Option<u32>) -> Result<(), Refusal> {
    if nranks == 0 {
        return Err("job size 0".into());
    }
    if let Some(expected) = expected_nranks {
        if nranks != expected {
            return Err(format!("says the job has {nranks} ranks, others say {expected}"));
        }
    }
    if rank >= nranks {
        return Err(format!("rank {rank} out of range for {nranks} ranks"));
    }
    Ok(())
}

/// Why a rendezvous was given up, and the ranks to blame: every rank that joined, or
/// comes later, is told (a [`crate::wire::Message::Abort`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub failed: Vec<u32>,
}

/// The rendezvous of one job at its root.
#[derive(Debug)]
pub struct Rendezvous {
    secret: Secret,
    nranks: Option<u32>,
    listen: Vec<Option<SocketAddr>>,
    failure: Option<Failure>,
}

impl Rendezvous {
    pub fn new(secret: Secret) -> Rendezvous {
        Rendezvous { secret, nranks: None, listen: Vec::new(), failure: None }
    }

    /// Handles one rank's hello: accepted (recorded) or refused with the reason. A refused
    /// hello changes nothing, so the legitimate ranks carry on.
    pub fn handle_hello(&mut self, hello: &Hello) -> Result<(), Refusal> {
        check_credentials(hello, &self.secret)?;
        check_position(hello.rank, hello.nranks, self.nranks)?;
        if self.nranks.is_none() {
            self.nranks = Some(hello.nranks);
            self.listen = vec![None; hello.nranks as usize];
        }
        let slot = &mut self.listen[hello.rank as usize];
        if slot.is_some() {
            return Err(format!("rank {} joined twice", hello.rank));
        }
        *slot = Some(hello.listen);
        Ok(())
    }

    /// A joined rank's connection closed before the table went out: it died (a rank that
    /// gives up says so first, [`Rendezvous::handle_given_up`]). The job cannot complete
    /// without it, so the rendezvous fails at once, naming it, rather than leaving the
    /// others to wait out the timeout.
    pub fn handle_departure(&mut self, rank: u32) {
        if self.failure.is_none() && self.table().is_none() {
            self.failure = Some(Failure { reason: format!("rank {rank} left before every rank had joined (its connection to the root closed)"), failed: vec![rank] });
        }
    }

    /// A joined rank gave up joining (aborted, or saw `failed` die — for a grow, members
    /// of the communicator being grown): the rendezvous fails with its reason.
    pub fn handle_given_up(&mut self, rank: u32, reason: &str, failed: Vec<u32>) {
        if self.failure.is_none() && self.table().is_none() {
            self.failure = Some(Failure { reason: format!("rank {rank} gave up joining: {reason}"), failed });
        }
    }

    /// Why the rendezvous failed, if it did.
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    /// Every rank's listen address, once all have joined (never after a failure).
    pub fn table(&self) -> Option<Vec<SocketAddr>> {
        if self.listen.is_empty() || self.failure.is_some() {
            return None;
        }
        self.listen.iter().copied().collect()
    }

    /// Ranks that have not joined (empty before the first hello: the size is unknown).
    pub fn missing(&self) -> Vec<u32> {
        (0..self.listen.len() as u32).filter(|&r| self.listen[r as usize].is_none()).collect()
    }

    pub fn joined_any(&self) -> bool {
        self.listen.iter().any(Option::is_some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(rank: u32, nranks: u32, secret: u8) -> Hello {
        Hello {
            magic: HELLO_MAGIC,
            version: PROTOCOL_VERSION,
            secret: [secret; 32],
            rank,
            nranks,
            listen: format!("127.0.0.1:{}", 1000 + rank).parse().unwrap(),
        }
    }

    #[test]
    fn completes_when_every_rank_joined_in_any_order() {
        let mut r = Rendezvous::new([1; 32]);
        for rank in [2, 0, 3, 1] {
            assert!(r.table().is_none());
            r.handle_hello(&hello(rank, 4, 1)).unwrap();
        }
        let table = r.table().unwrap();
        assert_eq!(table[3].port(), 1003);
    }

    #[test]
    fn refusals_leave_the_state_unchanged() {
        let mut r = Rendezvous::new([1; 32]);
        r.handle_hello(&hello(0, 2, 1)).unwrap();
        let cases = [
            (hello(1, 2, 9), "secret"),
            (hello(5, 2, 1), "out of range"),
            (hello(0, 2, 1), "twice"),
            (hello(1, 3, 1), "3 ranks"),
            (Hello { version: 99, ..hello(1, 2, 1) }, "version"),
            (Hello { magic: *b"GET ", ..hello(1, 2, 1) }, "magic"),
        ];
        for (h, word) in cases {
            let reason = r.handle_hello(&h).unwrap_err();
            assert!(reason.contains(word), "{reason}");
        }
        assert_eq!(r.missing(), vec![1]);
        r.handle_hello(&hello(1, 2, 1)).unwrap();
        assert!(r.table().is_some());
    }

    #[test]
    fn a_departure_before_the_table_fails_the_rendezvous_naming_the_rank() {
        let mut r = Rendezvous::new([1; 32]);
        r.handle_hello(&hello(0, 3, 1)).unwrap();
        r.handle_hello(&hello(2, 3, 1)).unwrap();
        r.handle_departure(2);
        assert_eq!(r.failure().unwrap().failed, vec![2]);
        assert!(r.failure().unwrap().reason.contains("rank 2 left"), "{:?}", r.failure());
        // The last rank coming does not complete a failed rendezvous; the first reason stays.
        r.handle_hello(&hello(1, 3, 1)).unwrap();
        r.handle_given_up(0, "abort requested", vec![]);
        assert!(r.table().is_none());
        assert_eq!(r.failure().unwrap().failed, vec![2]);
    }

    #[test]
    fn a_rank_giving_up_fails_the_rendezvous_with_its_reason() {
        let mut r = Rendezvous::new([1; 32]);
        r.handle_hello(&hello(1, 3, 1)).unwrap();
        r.handle_given_up(1, "rank 0 failed during grow", vec![0]);
        let failure = r.failure().unwrap();
        assert_eq!(failure.failed, vec![0]);
        assert!(failure.reason.contains("rank 1 gave up joining: rank 0 failed"), "{failure:?}");
    }

    #[test]
    fn a_complete_rendezvous_ignores_later_departures() {
        let mut r = Rendezvous::new([1; 32]);
        r.handle_hello(&hello(0, 1, 1)).unwrap();
        r.handle_departure(0);
        assert!(r.failure().is_none());
        assert!(r.table().is_some());
    }
}
