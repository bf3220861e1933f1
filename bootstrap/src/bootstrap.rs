//! [`Bootstrap`]: a job's ranks joined through the root, with the collective operations the
//! runtime needs before any data path exists.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::abort::AbortFlag;
use crate::agree::{AgreeMessage, Agreement, Outcome};
use crate::config::Config;
use crate::endpoint::{Endpoint, Limits};
use crate::error::{Error, Result};
use crate::id::UniqueId;
use crate::log::target;
use crate::root::{self, kind_name, RootTimeouts};
use crate::sock::{self, Refused};
use crate::wire::{self, Message};
use crate::{iface, NOCOLOR};

/// Tags at or above this value are the bootstrap's own; user tags must stay below.
pub const RESERVED_TAGS: u64 = 1 << 63;
const TAG_ALLGATHER: u64 = RESERVED_TAGS;
const TAG_BROADCAST: u64 = RESERVED_TAGS + 1;
const TAG_BARRIER: u64 = RESERVED_TAGS + 0x100; // + round
/// Mixed into the namespace of an agreement's messages.
const AGREEMENT: u64 = 0x4147_5245_454d_4e54; // "AGREEMNT"

/// The ranks of one communicator, connected for control traffic.
///
/// Created by [`Bootstrap::init`] (from a [`UniqueId`]), by [`Bootstrap::from_env`], or
/// by [`Bootstrap::split`] of another bootstrap (sharing its connections). Collective
/// operations must be called by every rank in the same order. Every wait ends with an
/// error naming the rank waited for when that rank dies, when the timeout passes, or when
/// [`Bootstrap::abort`] is called from any thread.
pub struct Bootstrap {
    endpoint: Arc<Endpoint>,
    /// Namespace of this communicator's messages on the shared connections.
    comm: u64,
    /// Endpoint ranks of this communicator's members, in rank order.
    members: Vec<u32>,
    rank: u32,
    /// Calls of split, of shrink and of the agreement so far: each kind counts apart, so
    /// that a split that failed on some ranks only (a rank died during its exchange) does
    /// not set the survivors' later shrinks and agreements apart.
    splits: AtomicU64,
    /// A split's result, until [`Bootstrap::created`]: the parent's members (job ranks),
    /// whose failures end this bootstrap's waits while `creating` is set. A split is
    /// collective over the parent: a rank that dies during it makes some members fail the
    /// split, and the others must not wait for those in the new communicator.
    parent_members: Vec<u32>,
    creating: AtomicBool,
    shrinks: AtomicU64,
    agreements: AtomicU64,
    /// Shared with whoever may abort the creation of this bootstrap (the flag given to
    /// [`Bootstrap::init`], [`Bootstrap::grow`], [`Bootstrap::split`] or
    /// [`Bootstrap::shrink`]); raised by [`Bootstrap::abort`].
    aborted: AbortFlag,
}

impl Bootstrap {
    /// Creates a unique id whose root this process serves, on the interface the config
    /// selects. Hand the id to every rank (MPI broadcast, file, environment), then call
    /// [`Bootstrap::init`] on each.
    pub fn create_id(config: &Config) -> Result<UniqueId> {
        Bootstrap::create_id_on(config, None, false)
    }

    /// [`Bootstrap::create_id`] for a job whose ranks all run on this machine (threads, or
    /// processes started here): the root listens on loopback unless NCCL_SOCKET_IFNAME says
    /// otherwise.
    pub fn create_local_id(config: &Config) -> Result<UniqueId> {
        Bootstrap::create_id_on(config, None, true)
    }

    fn create_id_on(config: &Config, at: Option<SocketAddr>, local_job: bool) -> Result<UniqueId> {
        let (listener, addr) = match at {
            Some(addr) => (sock::listen(addr.ip(), addr.port()).map_err(|e| Error::io(format!("listening on {addr}"), e))?, addr),
            None => {
                let ip = select_ip(config, None, local_job)?;
                let listener = sock::listen(ip, 0).map_err(|e| Error::io(format!("listening on {ip}"), e))?;
                let addr = listener.local_addr().map_err(|e| Error::io("reading the root's address", e))?;
                (listener, addr)
            }
        };
        let id = UniqueId::with_random_secret(addr)?;
        root::serve(listener, id, RootTimeouts::from_config(config))?;
        tracing::info!(target: target::BOOTSTRAP, "bootstrap root listening on {addr}");
        Ok(id)
    }

    /// Joins the job named by `id` as `rank` of `nranks`.
    ///
    /// Rank 0 serves the root itself when the id's root is not served by this process and
    /// its address can be bound here (ids from `NCCL_COMM_ID` and launchers).
    ///
    /// Raising `abort` (from another thread) ends every wait of the join (the root's
    /// answer, connections, later exchanges) with [`Error::Aborted`] within about 100 ms.
    /// The bootstrap keeps `abort` as its abort flag ([`Bootstrap::abort`] raises it).
    /// Pass `AbortFlag::new()` when nothing else will abort the join.
    pub fn init(id: &UniqueId, rank: u32, nranks: u32, config: &Config, abort: AbortFlag) -> Result<Bootstrap> {
        Bootstrap::join(id, rank, nranks, config, abort, None)
    }

    /// Joins `id` as this rank of a job of `nranks` that grows this communicator
    /// (ncclCommGrow: its members keep their ranks, new processes join with
    /// [`Bootstrap::init`] as the ranks above). `abort` is as for [`Bootstrap::init`];
    /// besides, while this rank waits at the rendezvous, a failure of a member of this
    /// communicator (or its abort or revocation) ends the join at once with that error,
    /// and the root is told, so that it gives up the rendezvous for every rank that came or
    /// comes: a member dying before it reaches the rendezvous costs the others the time
    /// its death takes to be noticed here, not the bootstrap timeout.
    pub fn grow(&self, id: &UniqueId, nranks: u32, config: &Config, abort: AbortFlag) -> Result<Bootstrap> {
        if nranks <= self.nranks() {
            return Err(Error::invalid(format!("grow to {nranks} ranks: the communicator already has {}", self.nranks())));
        }
        Bootstrap::join(id, self.rank, nranks, config, abort, Some(self))
    }

    /// [`Bootstrap::init`], watching `parent` while at the rendezvous when it is a grow.
    fn join(id: &UniqueId, rank: u32, nranks: u32, config: &Config, abort: AbortFlag, parent: Option<&Bootstrap>) -> Result<Bootstrap> {
        if nranks == 0 || rank >= nranks {
            return Err(Error::invalid(format!("rank {rank} of {nranks} ranks")));
        }
        let span = tracing::info_span!(target: target::BOOTSTRAP, "bootstrap", rank, nranks);
        let _enter = span.enter();
        if rank == 0 && !root::is_served_here(id.root()) {
            serve_root_if_here(id, config)?;
        }
        let limits = Limits { timeout: config.bootstrap_timeout, handshake: config.handshake_timeout, max_frame: config.max_frame_bytes, heartbeat: config.heartbeat_timeout };
        let ip = select_ip(config, Some(id.root().ip()), false)?;
        let listener = sock::listen(ip, 0).map_err(|e| Error::io(format!("listening on {ip}"), e))?;
        let endpoint = Endpoint::listen(listener, rank, nranks, *id.secret(), limits)?;
        let stop = || {
            if abort.is_raised() {
                return Some(Error::Aborted { reason: "abort requested while joining".into() });
            }
            parent.and_then(|p| p.check("grow").err())
        };
        let table = join_root(id, &endpoint, config, &stop)?;
        endpoint.set_table(table);
        let bootstrap = Bootstrap::new(Arc::new(endpoint), 0, (0..nranks).collect(), rank, abort);
        // Connect the ring eagerly: a successor learns of its predecessor's death from the
        // connection ending, from the first moment on.
        if nranks > 1 {
            bootstrap.endpoint.connect(bootstrap.next(), &[&bootstrap.aborted])?;
        }
        bootstrap.endpoint.start_heartbeat();
        tracing::info!(target: target::BOOTSTRAP, "rank {rank}/{nranks} bootstrapped, listening on {}", bootstrap.endpoint.listen_addr());
        Ok(bootstrap)
    }

    fn new(endpoint: Arc<Endpoint>, comm: u64, members: Vec<u32>, rank: u32, aborted: AbortFlag) -> Bootstrap {
        Bootstrap { endpoint, comm, members, rank, splits: AtomicU64::new(0), parent_members: Vec::new(), creating: AtomicBool::new(false), shrinks: AtomicU64::new(0), agreements: AtomicU64::new(0), aborted }
    }

    /// This rank's position in the communicator.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the communicator.
    pub fn nranks(&self) -> u32 {
        self.members.len() as u32
    }

    /// The address this rank's peers connect to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.endpoint.listen_addr()
    }

    /// This rank's position in the job the connections were made for (the root
    /// communicator's rank; differs from [`Bootstrap::rank`] after a split).
    pub fn job_rank(&self) -> u32 {
        self.endpoint.rank()
    }

    /// Gathers one fixed-size record from every rank; the result holds rank r's record at
    /// `r * record.len()`. Records of different sizes are an error on every rank.
    pub fn allgather(&self, record: &[u8]) -> Result<Vec<u8>> {
        self.allgather_with(record, &[&self.aborted])
    }

    /// [`Bootstrap::allgather`] whose waits end when any of `aborts` is raised.
    fn allgather_with(&self, record: &[u8], aborts: &[&AbortFlag]) -> Result<Vec<u8>> {
        let (n, len) = (self.nranks() as usize, record.len());
        let mut out = vec![0u8; n * len];
        out[self.rank as usize * len..][..len].copy_from_slice(record);
        // Ring: pass each record on n-1 times; FIFO order per connection keeps it straight.
        // A record of the wrong size is still passed on, so that every rank finishes the
        // ring and reports the mismatch rather than waiting for the rest.
        let mut carry = record.to_vec();
        let mut mismatch = None;
        for step in 0..n - 1 {
            self.send_with(self.next(), TAG_ALLGATHER, &carry, aborts)?;
            carry = self.recv_with(self.prev(), TAG_ALLGATHER, "allgather", aborts)?;
            let from = (self.rank as usize + n - step - 1) % n;
            if carry.len() == len {
                out[from * len..][..len].copy_from_slice(&carry);
            } else if mismatch.is_none() {
                mismatch = Some(format!("allgather records differ in size: rank {from} gave {} bytes, rank {} gave {len}", carry.len(), self.rank));
            }
        }
        match mismatch {
            None => Ok(out),
            Some(what) => Err(Error::invalid(what)),
        }
    }

    /// Broadcasts `data` from `root`: on return every rank holds the root's bytes.
    pub fn broadcast(&self, root: u32, data: &mut Vec<u8>) -> Result<()> {
        self.check_peer(root, "broadcast root")?;
        if self.rank == root {
            for peer in (0..self.nranks()).filter(|&p| p != root) {
                self.send_internal(peer, TAG_BROADCAST, data)?;
            }
        } else {
            *data = self.recv_internal(root, TAG_BROADCAST, "broadcast")?;
        }
        Ok(())
    }

    /// Returns once every rank has entered the barrier (dissemination: log2(n) rounds).
    pub fn barrier(&self) -> Result<()> {
        let n = self.nranks();
        let mut distance = 1;
        let mut round = 0;
        while distance < n {
            self.send_internal((self.rank + distance) % n, TAG_BARRIER + round, &[])?;
            self.recv_internal((self.rank + n - distance) % n, TAG_BARRIER + round, "barrier")?;
            distance *= 2;
            round += 1;
        }
        Ok(())
    }

    /// Sends `data` to `peer` under `tag` (below [`RESERVED_TAGS`]). Messages between two
    /// ranks with the same tag arrive in order.
    pub fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        self.check_user_tag(tag)?;
        self.check_peer(peer, "send peer")?;
        self.send_internal(peer, tag, data)
    }

    /// Receives the next message `peer` sent under `tag`.
    pub fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        self.check_user_tag(tag)?;
        self.check_peer(peer, "recv peer")?;
        self.recv_internal(peer, tag, "recv")
    }

    /// Takes the next message under `tag` from any of `peers`, waiting up to `wait`: the
    /// sender and the message, or `None` if nothing came by then (a failure or an abort
    /// also ends the wait early: ask [`Bootstrap::check`]). For a service that answers
    /// requests of whichever peer asks, between checks of its own state.
    pub fn recv_any(&self, tag: u64, peers: &[u32], wait: Duration) -> Result<Option<(u32, Vec<u8>)>> {
        self.check_user_tag(tag)?;
        for &peer in peers {
            self.check_peer(peer, "recv_any peer")?;
        }
        let job: Vec<u32> = peers.iter().map(|&p| self.members[p as usize]).collect();
        let until = Instant::now() + wait;
        Ok(self.endpoint.recv_any(self.comm, tag, &job, until).map(|(from, message)| {
            let rank = self.members.iter().position(|&m| m == from).expect("a peer of this communicator") as u32;
            (rank, message)
        }))
    }

    /// Splits the communicator: ranks passing the same `color` form a new one, ordered by
    /// `key` then by their rank here. [`NOCOLOR`] (-1) takes part in the exchange but joins
    /// nothing (`None`). Collective; reuses these connections (no new rendezvous).
    ///
    /// The exchange's waits end when `abort` is raised (another thread can stop a split
    /// run in the background: the non-blocking split) or this bootstrap is aborted; the
    /// new bootstrap keeps `abort` as its abort flag. Pass `AbortFlag::new()` when nothing
    /// else will abort the split.
    pub fn split(&self, color: i32, key: i32, abort: AbortFlag) -> Result<Option<Bootstrap>> {
        let mut record = [0u8; 8];
        record[..4].copy_from_slice(&color.to_le_bytes());
        record[4..].copy_from_slice(&key.to_le_bytes());
        let all = self.allgather_with(&record, &[&self.aborted, &abort])?;
        let entries: Vec<(i32, i32)> = all
            .chunks_exact(8)
            .map(|c| (i32::from_le_bytes(c[..4].try_into().expect("4 bytes")), i32::from_le_bytes(c[4..].try_into().expect("4 bytes"))))
            .collect();
        if let Some((rank, (bad, _))) = entries.iter().enumerate().find(|(_, (c, _))| *c < 0 && *c != NOCOLOR) {
            return Err(Error::invalid(format!("split color {bad} from rank {rank}: colors must be >= 0 or NCCL_SPLIT_NOCOLOR (-1)")));
        }
        let sequence = self.splits.fetch_add(1, Ordering::Relaxed);
        if color == NOCOLOR {
            return Ok(None);
        }
        let mut group: Vec<(i32, u32)> =
            entries.iter().enumerate().filter(|(_, (c, _))| *c == color).map(|(r, (_, k))| (*k, r as u32)).collect();
        group.sort_unstable();
        let rank = group.iter().position(|&(_, r)| r == self.rank).expect("this rank passed this color") as u32;
        let members = group.iter().map(|&(_, r)| self.members[r as usize]).collect();
        let comm = mix(&[self.comm, sequence, color as u64]);
        let mut child = Bootstrap::new(self.endpoint.clone(), comm, members, rank, abort);
        child.parent_members = self.members.clone();
        child.creating.store(true, Ordering::Release);
        Ok(Some(child))
    }

    /// The communicator of this one's ranks minus `exclude` (this communicator's ranks, for
    /// example the failed ones), in the same order, over the same connections: no message
    /// is exchanged, so dead ranks have no part in it. Every survivor must pass the same
    /// list, having shrunk this communicator as often before (splits do not count); waits
    /// of the new communicator ignore failures of the excluded ranks.
    ///
    /// The result keeps `abort` as its abort flag, so that another thread can stop the
    /// exchanges that follow (a communicator built on it); pass `AbortFlag::new()` when
    /// nothing else will abort them.
    pub fn shrink(&self, exclude: &[u32], abort: AbortFlag) -> Result<Bootstrap> {
        if let Some(bad) = exclude.iter().find(|&&r| r >= self.nranks()) {
            return Err(Error::invalid(format!("shrink: rank {bad} out of range for {} ranks", self.nranks())));
        }
        if exclude.contains(&self.rank) {
            return Err(Error::invalid(format!("shrink: this rank ({}) is in the exclusion list", self.rank)));
        }
        let mut sorted: Vec<u32> = exclude.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let members: Vec<u32> = (0..self.nranks()).filter(|r| sorted.binary_search(r).is_err()).map(|r| self.members[r as usize]).collect();
        let rank = members.iter().position(|&m| m == self.members[self.rank as usize]).expect("this rank survives") as u32;
        let sequence = self.shrinks.fetch_add(1, Ordering::Relaxed);
        let mut parts = vec![self.comm, sequence, 0x5348_5249_4e4b]; // "SHRINK"
        parts.extend(sorted.iter().map(|&r| r as u64));
        Ok(Bootstrap::new(self.endpoint.clone(), mix(&parts), members, rank, abort))
    }

    /// Agrees with the other live ranks on which ranks of this communicator failed
    /// (`MPIX_Comm_agree` on the failed group; the protocol is in [`crate::agree`]): every
    /// rank that returns `Ok` returns the same sorted list, which holds every rank any of
    /// them knew as failed and never a rank that returned. Collective over the live ranks;
    /// dead ones are never waited for (a rank is found dead by its closed connections, the
    /// heartbeats or a failure notice). Ranks this one learns are failed through the
    /// agreement are announced to the job. A rank the others count as failed gets
    /// [`Error::Excluded`]. Works after [`Bootstrap::abort`] (it is how survivors recover);
    /// bounded by the bootstrap timeout.
    ///
    /// Another thread can stop it: it returns [`Error::Aborted`] within about 100 ms of
    /// `abort` being raised (this bootstrap's own abort flag is not looked at: agreeing is
    /// how an aborted communicator recovers). Pass `&AbortFlag::new()` when nothing else
    /// will abort the agreement.
    pub fn agree_failed(&self, abort: &AbortFlag) -> Result<Vec<u32>> {
        let n = self.nranks();
        let namespace = mix(&[self.comm, self.agreements.fetch_add(1, Ordering::Relaxed), AGREEMENT]);
        // A rank that left the job (said goodbye: say, its init failed here after the
        // others' succeeded) cannot take part either.
        let dead_here = || -> Vec<u32> {
            let dead = self.endpoint.gone_ranks();
            (0..n).filter(|&r| dead.contains(&self.members[r as usize])).collect()
        };
        let mut agreement = Agreement::new(self.rank, n, dead_here());
        let mut announced = agreement.suspected().clone();
        let start = Instant::now();
        let deadline = start + self.endpoint.timeout();
        // For the log: messages sent and received, and the time spent sending.
        let (mut sent, mut received, mut sending) = (0u32, 0u32, Duration::ZERO);
        loop {
            while let Some((to, message)) = agreement.poll_transmit() {
                let send_start = Instant::now();
                // A failed send announces the peer's failure, which comes back below.
                let _ = self.endpoint.send(self.members[to as usize], namespace, 0, &message.encode(), &[]);
                sending += send_start.elapsed();
                sent += 1;
            }
            let adopted: Vec<u32> = agreement.suspected().difference(&announced).copied().collect();
            for r in adopted {
                self.endpoint.fail(format!("rank {r} counted as failed by the agreement on failed ranks"), vec![self.members[r as usize]]);
                announced.insert(r);
            }
            if self.endpoint.dead_ranks().contains(&self.members[self.rank as usize]) {
                return Err(Error::Excluded { rank: self.rank, by: "a failure notice naming it".into() });
            }
            match agreement.outcome() {
                Some(Outcome::Decided(failed)) => {
                    // Ranks still gathering echoes may ask this one after it returned.
                    let members = self.members.clone();
                    let mut finished = agreement;
                    self.endpoint.keep_answering(
                        namespace,
                        Box::new(move |from, payload| {
                            let (Some(from), Some(message)) = (members.iter().position(|&m| m == from), AgreeMessage::decode(payload)) else { return Vec::new() };
                            finished.handle_message(from as u32, message);
                            std::iter::from_fn(|| finished.poll_transmit()).map(|(to, m)| (members[to as usize], m.encode())).collect()
                        }),
                    );
                    tracing::info!(target: target::BOOTSTRAP, "rank {}: agreed on failed ranks {failed:?} in {:?} ({sent} messages sent, taking {sending:?}; {received} received)", self.rank, start.elapsed());
                    return Ok(failed.into_iter().collect());
                }
                Some(Outcome::Excluded { by }) => return Err(Error::Excluded { rank: self.rank, by: format!("rank {by}") }),
                None => {}
            }
            if abort.is_raised() {
                return Err(Error::Aborted { reason: format!("abort requested while agreeing on the failed ranks (rank {})", self.rank) });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout { phase: format!("agreeing on the failed ranks (rank {}: {agreement:?})", self.rank), waited: now - start });
            }
            if let Some((from, payload)) = self.endpoint.recv_any(namespace, 0, &self.members, deadline.min(now + Duration::from_millis(100))) {
                let from = self.members.iter().position(|&m| m == from).expect("recv_any takes from members") as u32;
                received += 1;
                match AgreeMessage::decode(&payload) {
                    Some(message) => agreement.handle_message(from, message),
                    None => tracing::warn!(target: target::BOOTSTRAP, "rank {}: dropping a malformed agreement message from rank {from}", self.rank),
                }
            }
            for r in dead_here() {
                agreement.handle_suspect(r);
            }
        }
    }

    /// Ends the creation of a split's result: from now on only failures of its own members
    /// end its waits (before, those of the parent's members did too). The runtime calls
    /// it once the communicator built on the bootstrap is ready.
    pub fn created(&self) {
        self.creating.store(false, Ordering::Release);
    }

    /// The job ranks whose failures end this bootstrap's waits.
    fn watched(&self) -> &[u32] {
        if self.creating.load(Ordering::Acquire) {
            &self.parent_members
        } else {
            &self.members
        }
    }

    /// Makes every current and future wait of this communicator return an error. Callable
    /// from any thread; returns at once.
    pub fn abort(&self) {
        self.aborted.raise();
        self.endpoint.wake_all();
    }

    /// Revokes the communicator (ncclCommRevoke): every wait of its data path and of user
    /// messages, here and on every other live member, ends with an error promptly (the
    /// notice goes straight to each member); the bootstrap's own operations (split,
    /// shrink, agreement) keep working. Callable from any thread.
    pub fn revoke(&self) {
        self.endpoint.revoke(self.comm, &self.members, format!("communicator revoked by rank {}", self.rank));
    }

    /// Why the communicator was revoked (here or by another member), if it was.
    pub fn revoked(&self) -> Option<String> {
        self.endpoint.revoked(self.comm)
    }

    /// Returns the error a wait would end with now — a peer's failure, an abort or a
    /// revocation — without waiting. Data paths poll it so that a dead peer ends their
    /// waits too.
    pub fn check(&self, phase: &str) -> Result<()> {
        if self.aborted.is_raised() {
            return Err(Error::Aborted { reason: format!("abort requested during {phase}") });
        }
        if let Some(reason) = self.revoked() {
            return Err(Error::Aborted { reason: format!("{reason} (during {phase})") });
        }
        match self.endpoint.failure(phase, self.watched()) {
            Some(e) => self.to_comm_ranks(Err(e)),
            None => Ok(()),
        }
    }

    /// [`Bootstrap::check`], waiting up to `limit` for a peer's failure to become known
    /// (an abort ends the wait at once).
    pub fn check_within(&self, phase: &str, limit: Duration) -> Result<()> {
        self.check(phase)?;
        match self.endpoint.failure_within(phase, self.watched(), &[&self.aborted], limit) {
            Some(e) => self.to_comm_ranks(Err(e)),
            None => self.check(phase),
        }
    }

    /// Members (ranks of this communicator) that left the job: their process closed its
    /// connections, with a goodbye or not. One that left normally finished everything it
    /// was going to send (a departing communicator waits for its messages to be taken), so
    /// a wait on it can only end by its timeout. Never blocks on the network.
    pub fn departed(&self) -> Vec<u32> {
        let gone = self.endpoint.gone_ranks();
        if gone.is_empty() {
            return gone;
        }
        (0..self.nranks()).filter(|&r| gone.contains(&self.members[r as usize])).collect()
    }

    /// Tells every rank that the job failed, naming the failed ranks (best effort), and
    /// makes this rank's waits fail.
    pub fn announce_failure(&self, reason: &str, failed: &[u32]) {
        let job_ranks = failed.iter().filter_map(|&r| self.members.get(r as usize).copied()).collect();
        self.endpoint.fail(reason.to_string(), job_ranks);
    }

    fn next(&self) -> u32 {
        (self.rank + 1) % self.nranks()
    }

    fn prev(&self) -> u32 {
        (self.rank + self.nranks() - 1) % self.nranks()
    }

    fn check_peer(&self, peer: u32, what: &str) -> Result<()> {
        if peer >= self.nranks() {
            return Err(Error::invalid(format!("{what} {peer} out of range for {} ranks", self.nranks())));
        }
        Ok(())
    }

    fn check_user_tag(&self, tag: u64) -> Result<()> {
        if tag >= RESERVED_TAGS {
            return Err(Error::invalid(format!("tag {tag:#x} is reserved (user tags are below 2^63)")));
        }
        Ok(())
    }

    fn send_internal(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        self.send_with(peer, tag, data, &[&self.aborted])
    }

    fn send_with(&self, peer: u32, tag: u64, data: &[u8], aborts: &[&AbortFlag]) -> Result<()> {
        let result = self.endpoint.send(self.members[peer as usize], self.comm, tag, data, aborts);
        self.to_comm_ranks(result)
    }

    fn recv_internal(&self, peer: u32, tag: u64, phase: &str) -> Result<Vec<u8>> {
        self.recv_with(peer, tag, phase, &[&self.aborted])
    }

    fn recv_with(&self, peer: u32, tag: u64, phase: &str, aborts: &[&AbortFlag]) -> Result<Vec<u8>> {
        // Waits of the user's and the data path's messages end when the communicator is
        // revoked; the bootstrap's own (split, shrink after a revoke) do not.
        let revocable = tag < RESERVED_TAGS;
        let result = self.endpoint.recv(self.members[peer as usize], self.comm, tag, phase, aborts, self.watched(), revocable);
        if let Err(Error::Timeout { .. }) = &result {
            // A rank that stops answering is announced as failed so the rest of the job
            // stops waiting for it too.
            self.endpoint.fail(format!("rank {peer} did not answer during {phase}"), vec![self.members[peer as usize]]);
        }
        self.to_comm_ranks(result)
    }

    /// Errors name job ranks; translate them to this communicator's ranks where possible.
    fn to_comm_ranks<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|e| match e {
            Error::PeerFailed { rank, phase, reason } => match self.members.iter().position(|&m| m == rank) {
                Some(r) => Error::PeerFailed { rank: r as u32, phase, reason },
                None => Error::PeerFailed { rank, phase, reason: format!("{reason} (job rank {rank}, not in this communicator)") },
            },
            other => other,
        })
    }
}

/// Picks the listen address for this rank from the config and the machine's interfaces.
pub(crate) fn select_ip(config: &Config, toward: Option<IpAddr>, local_job: bool) -> Result<IpAddr> {
    let interfaces = iface::list()?;
    iface::select(&interfaces, config.socket_ifname.as_ref(), config.socket_family, toward, local_job)
}

/// Rank 0 of an id it did not create: serve the root if its address is on this machine.
fn serve_root_if_here(id: &UniqueId, config: &Config) -> Result<()> {
    match sock::listen(id.root().ip(), id.root().port()) {
        Ok(listener) => {
            tracing::info!(target: target::BOOTSTRAP, "rank 0 serves the bootstrap root at {}", id.root());
            root::serve(listener, *id, RootTimeouts::from_config(config))
        }
        Err(e) if matches!(e.kind(), std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AddrNotAvailable) => {
            tracing::info!(target: target::BOOTSTRAP, "bootstrap root {} is served elsewhere ({e})", id.root());
            Ok(())
        }
        Err(e) => Err(Error::io(format!("listening on the bootstrap root address {}", id.root()), e)),
    }
}

/// Sends this rank's hello to the root and waits for the table. `stop` is asked every
/// 25 ms: the error it gives ends the join, and the root is told (so that the other
/// ranks do not wait for this one).
fn join_root(id: &UniqueId, endpoint: &Endpoint, config: &Config, stop: &dyn Fn() -> Option<Error>) -> Result<Vec<std::net::SocketAddr>> {
    let deadline = endpoint.deadline();
    let connected = sock::connect(id.root(), "bootstrap root", deadline, Refused::Retry, &|| stop().is_some());
    let mut stream: TcpStream = match (connected, stop()) {
        (Ok(stream), _) => stream,
        (Err(_), Some(cause)) => return Err(cause),
        (Err(e), None) => return Err(e),
    };
    wire::write_message(&mut stream, &Message::Hello(endpoint.hello()))
        .map_err(|e| Error::io(format!("sending the hello to the bootstrap root {}", id.root()), e))?;
    // The root answers once every rank joined, or aborts the job after its own timeout.
    let wait = config.bootstrap_timeout + config.handshake_timeout + Duration::from_secs(1);
    let started = Instant::now();
    let (root, rank) = (id.root(), endpoint.rank());
    match wait_readable(&stream, started + wait, stop) {
        Ok(()) => {}
        Err(Error::Timeout { .. }) => return Err(Error::Timeout { phase: format!("waiting for the bootstrap root {root}"), waited: started.elapsed() }),
        Err(cause) => {
            let failed = match &cause {
                Error::PeerFailed { rank, .. } => vec![*rank],
                _ => Vec::new(),
            };
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = wire::write_message(&mut stream, &Message::Abort { reason: cause.to_string(), failed });
            return Err(cause);
        }
    }
    // The answer has started to arrive: read it whole, within what is left of the wait.
    sock::set_read_timeout(&stream, Some(wait.saturating_sub(started.elapsed()).max(Duration::from_millis(100))))?;
    match wire::read_message(&mut stream, config.max_frame_bytes) {
        Ok(Message::Table(table)) if table.len() == endpoint.nranks() as usize => Ok(table),
        Ok(Message::Table(table)) => Err(Error::wire("table", format!("{} entries for {} ranks", table.len(), endpoint.nranks()))),
        Ok(Message::Refuse { reason }) => Err(Error::RefusedByRoot { root, rank, reason }),
        Ok(Message::Abort { reason, failed }) => match failed.first() {
            Some(&first) => Err(Error::PeerFailed { rank: first, phase: "bootstrap".into(), reason: format!("{reason} (failed ranks {failed:?})") }),
            None => Err(Error::Aborted { reason }),
        },
        Ok(other) => Err(Error::wire("root answer", format!("unexpected {}", kind_name(&other)))),
        Err(Error::Timeout { .. }) => Err(Error::Timeout { phase: format!("waiting for the bootstrap root {root}"), waited: started.elapsed() }),
        Err(Error::Wire { reason, .. }) if reason.contains("truncated") => Err(Error::Aborted { reason: format!("bootstrap root {root} closed the connection") }),
        Err(e) => Err(e),
    }
}

/// Waits until `stream` has data (or was closed) without reading it, asking `stop` every
/// 25 ms (its error ends the wait); `Timeout` at `deadline`.
fn wait_readable(stream: &TcpStream, deadline: Instant, stop: &dyn Fn() -> Option<Error>) -> Result<()> {
    loop {
        if let Some(cause) = stop() {
            return Err(cause);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::Timeout { phase: "waiting for the bootstrap root".into(), waited: Duration::ZERO });
        }
        let slice = (deadline - now).clamp(Duration::from_millis(1), Duration::from_millis(25));
        match sock::readable(&[stream], slice) {
            Ok(ready) if ready[0] => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(Error::io("waiting for the bootstrap root's answer", e)),
        }
    }
}

/// Mixes words into a communicator id (splitmix64 steps): equal inputs give equal ids on
/// every rank.
fn mix(words: &[u64]) -> u64 {
    words.iter().fold(0x243f_6a88_85a3_08d3u64, |acc, &w| {
        let mut z = acc ^ w.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agree::{Ballot, RankSet};

    /// A rank that returned from an agreement still answers it: ranks 0 and 1 agree that
    /// rank 2 failed and return; rank 2 (alive) then proposes on that agreement to rank 0,
    /// which answers through its endpoint (a queued message would go unanswered).
    #[test]
    fn a_finished_agreement_still_answers() {
        let mut config = Config::defaults();
        config.set("OXCCL_BOOTSTRAP_TIMEOUT_MS", "20000").unwrap();
        let id = Bootstrap::create_local_id(&config).unwrap();
        // Passed once ranks 0 and 1 returned, and once rank 2 is done (they stay in the job);
        // bounded, so that a rank that failed early makes the test fail, not hang.
        let returned = Arc::new(AtomicU64::new(0));
        let asked = Arc::new(AtomicU64::new(0));
        // Passed once every rank left the barrier: a rank still in it when rank 2 is
        // declared failed would fail its barrier instead of reaching the agreement.
        let past_barrier = Arc::new(AtomicU64::new(0));
        let meet = |count: &AtomicU64| -> std::result::Result<(), String> {
            count.fetch_add(1, Ordering::AcqRel);
            let deadline = Instant::now() + Duration::from_secs(30);
            while count.load(Ordering::Acquire) < 3 {
                if Instant::now() > deadline {
                    return Err("a rank never came".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        };
        let ranks: Vec<_> = (0..3u32)
            .map(|rank| {
                let (config, returned, asked, past_barrier) = (config.clone(), returned.clone(), asked.clone(), past_barrier.clone());
                std::thread::spawn(move || -> std::result::Result<Option<AgreeMessage>, String> {
                    let b = Bootstrap::init(&id, rank, 3, &config, AbortFlag::new()).map_err(|e| e.to_string())?;
                    b.barrier().map_err(|e| e.to_string())?;
                    meet(&past_barrier)?;
                    if rank == 0 {
                        b.announce_failure("test: rank 2 is declared failed", &[2]);
                    }
                    if rank < 2 {
                        let agreed = b.agree_failed(&AbortFlag::new()).map_err(|e| e.to_string());
                        meet(&returned)?;
                        meet(&asked)?;
                        let agreed = agreed?;
                        return if agreed == [2] { Ok(None) } else { Err(format!("rank {rank} agreed on {agreed:?}")) };
                    }
                    meet(&returned)?;
                    let namespace = mix(&[b.comm, 0, AGREEMENT]);
                    let propose = AgreeMessage::Propose { ballot: Ballot { round: 9, coordinator: 2 }, failed: RankSet::new() };
                    let sent = b.endpoint.send(b.members[0], namespace, 0, &propose.encode(), &[]);
                    // (recv_any also returns when a failure becomes known: wait on.)
                    let deadline = Instant::now() + Duration::from_secs(5);
                    let mut answer = None;
                    while answer.is_none() && Instant::now() < deadline {
                        answer = b.endpoint.recv_any(namespace, 0, &[b.members[0]], deadline).map(|(_, bytes)| AgreeMessage::decode(&bytes));
                    }
                    meet(&asked)?;
                    sent.map_err(|e| e.to_string())?;
                    Ok(answer.flatten())
                })
            })
            .collect();
        let results: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results[0], Ok(None));
        assert_eq!(results[1], Ok(None));
        // Rank 0 counts rank 2 as failed: it tells it so.
        assert_eq!(results[2], Ok(Some(AgreeMessage::Excluded)));
    }
}
