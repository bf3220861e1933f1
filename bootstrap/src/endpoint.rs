//! One rank's network presence during and after bootstrap: its listener, its connections
//! to peers, and the mailbox that incoming control messages land in.
//!
//! Every incoming connection gets a reader thread: it checks the peer's hello within the
//! handshake timeout, then files each `Data` frame under (sender, communicator, tag).
//! Outgoing connections are opened on first use and kept. A peer whose connection ends
//! (EOF, reset) is marked failed, and a rank that sees a failure forwards an abort notice
//! to its ring successor, so that one death is known to every rank quickly and by name.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::abort::{any_raised, AbortFlag};
use crate::detect::{self, RingDetector, Suspicion};
use crate::error::{Error, Result};
use crate::id::{Secret, PROTOCOL_VERSION};
use crate::log::target;
use crate::rendezvous::{check_credentials, check_position};
use crate::root::{kind_name, read_hello, refuse};
use crate::sock::{self, Refused};
use crate::wire::{self, Hello, Message, HELLO_MAGIC, MAX_HANDSHAKE_FRAME};

/// A rank's endpoint. Dropping it closes every connection and stops its threads.
pub(crate) struct Endpoint {
    shared: Arc<Shared>,
}

/// Settings an endpoint needs from the config.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub timeout: Duration,
    pub handshake: Duration,
    pub max_frame: usize,
    /// Silence after which the ring predecessor counts as failed (None: never).
    pub heartbeat: Option<Duration>,
}

/// The communicator id heartbeats travel on: never a real communicator's.
const HEARTBEAT_COMM: u64 = u64::MAX;
/// The communicator id revocation notices travel on (the tag names the revoked one).
const REVOKE_COMM: u64 = u64::MAX - 1;

struct Shared {
    rank: u32,
    nranks: u32,
    secret: Secret,
    listen: SocketAddr,
    limits: Limits,
    table: OnceLock<Vec<SocketAddr>>,
    outgoing: Vec<Mutex<Option<TcpStream>>>,
    inbox: Mutex<Inbox>,
    arrived: Condvar,
    stop: AbortFlag,
    incoming: Mutex<Vec<TcpStream>>,
    /// The heartbeat detector, once started; fed with every message heard (ms since `epoch`).
    detector: Mutex<Option<RingDetector>>,
    epoch: Instant,
    /// Replies of finished exchanges ([`Endpoint::keep_answering`]) on their way to the
    /// replier thread (started on first use), so that neither a connection's reader
    /// (whose peer's heartbeats would go unread) nor an exchange's caller waits on a slow
    /// or unreachable peer.
    replies: Mutex<Option<std::sync::mpsc::Sender<(u64, Replies)>>>,
    /// This rank's connections to peers (their read side, which peers never write to but
    /// for a goodbye), watched by one thread for a peer that dies: see
    /// [`Shared::watch_outgoing`].
    watched: Mutex<Vec<(u32, Arc<TcpStream>)>>,
    /// Peers whose connection to this rank has a reader running: their end is reported by
    /// that reader, after whatever they sent before it (failure notices included).
    reading: Mutex<HashSet<u32>>,
    /// Whether a rank was ever counted dead or gone here (set with `Inbox::dead` and
    /// `Inbox::closed`), so that asking for them costs a load while nobody is.
    anyone_gone: AtomicBool,
}

/// Messages to send (to job ranks) on a finished exchange's namespace.
type Replies = Vec<(u32, Vec<u8>)>;

#[derive(Default)]
struct Inbox {
    queues: HashMap<(u32, u64, u64), VecDeque<Vec<u8>>>,
    /// Peers whose connection to us ended: nothing more will come from them.
    closed: HashSet<u32>,
    /// The first failure, once known.
    failure: Option<Failure>,
    /// Every rank known to have failed, with the reason first given for it. A communicator
    /// is broken when one of its members is here (or by a failure naming nobody: a job-wide
    /// abort); communicators of survivors (shrink) are not.
    dead: HashMap<u32, String>,
    /// Revoked communicators, with the reason.
    revoked: HashMap<u64, String>,
    /// Finished exchanges that still answer what comes for them (tag 0 of their
    /// namespace), newest last: [`Endpoint::keep_answering`].
    responders: VecDeque<(u64, Responder)>,
}

/// Answers a message (from a job rank) with messages to send (to job ranks).
pub type Responder = Box<dyn FnMut(u32, &[u8]) -> Replies + Send>;

/// How many finished exchanges [`Endpoint::keep_answering`] keeps (the oldest goes).
const RESPONDERS: usize = 64;

impl Inbox {
    /// The failure that breaks a communicator of `members` (job ranks), if any.
    fn breaking(&self, members: &[u32]) -> Option<Failure> {
        let first = self.failure.as_ref()?;
        // The first failure, when it concerns this communicator, is the one to report.
        if first.failed.is_empty() || first.failed.iter().any(|r| members.contains(r)) {
            return Some(first.clone());
        }
        members.iter().find_map(|m| self.dead.get(m).map(|reason| Failure { reason: reason.clone(), failed: vec![*m] }))
    }
}

#[derive(Clone, Debug)]
struct Failure {
    reason: String,
    failed: Vec<u32>,
}

impl Endpoint {
    /// Binds a listener and starts accepting peers. The table comes later.
    pub fn listen(listener: TcpListener, rank: u32, nranks: u32, secret: Secret, limits: Limits) -> Result<Endpoint> {
        let listen = listener.local_addr().map_err(|e| Error::io("reading the listener's address", e))?;
        let shared = Arc::new(Shared {
            rank,
            nranks,
            secret,
            listen,
            limits,
            table: OnceLock::new(),
            outgoing: (0..nranks).map(|_| Mutex::new(None)).collect(),
            inbox: Mutex::new(Inbox::default()),
            arrived: Condvar::new(),
            stop: AbortFlag::new(),
            incoming: Mutex::new(Vec::new()),
            detector: Mutex::new(None),
            epoch: Instant::now(),
            replies: Mutex::new(None),
            watched: Mutex::new(Vec::new()),
            reading: Mutex::new(HashSet::new()),
            anyone_gone: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        sock::accept_loop(listener, shared.stop.clone(), "bootstrap-peer", move |stream, peer| {
            if let Some(shared) = weak.upgrade() {
                Shared::serve_incoming(shared, stream, peer);
            }
        })
        .map_err(|e| Error::io("starting the bootstrap listener", e))?;
        let weak = Arc::downgrade(&shared);
        let stop = shared.stop.clone();
        std::thread::Builder::new()
            .name("oxccl-watch-out".into())
            .spawn(move || Shared::watch_outgoing(&weak, &stop))
            .map_err(|e| Error::io("starting the bootstrap's connection watcher", e))?;
        Ok(Endpoint { shared })
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.shared.listen
    }

    pub fn rank(&self) -> u32 {
        self.shared.rank
    }

    pub fn nranks(&self) -> u32 {
        self.shared.nranks
    }

    /// Our hello, for the root and for peers.
    pub fn hello(&self) -> Hello {
        let s = &self.shared;
        Hello { magic: HELLO_MAGIC, version: PROTOCOL_VERSION, secret: s.secret, rank: s.rank, nranks: s.nranks, listen: s.listen }
    }

    pub fn set_table(&self, table: Vec<SocketAddr>) {
        let _ = self.shared.table.set(table);
        // A peer may have died while this rank was still joining (its connection ended
        // before the table said where the ring goes): pass that news on now.
        let known = self.shared.inbox.lock().failure.clone();
        if let Some(failure) = known {
            self.shared.pass_on(&failure);
        }
    }

    /// Starts the heartbeat (when the limits ask for one): every fifth of the timeout this
    /// rank sends an empty message to its ring successor, and counts its predecessor as
    /// failed when nothing at all came from it for the whole timeout — a stopped or hung
    /// process closes no connection, so only silence shows it. A predecessor that said
    /// goodbye is not watched. The thread ends with the endpoint.
    pub fn start_heartbeat(&self) {
        let s = &self.shared;
        let Some(timeout) = s.limits.heartbeat else { return };
        if s.nranks < 2 {
            return;
        }
        let interval = detect::interval(timeout);
        *s.detector.lock() = Some(RingDetector::new(s.rank, s.nranks, timeout, s.now_ms()));
        let weak = Arc::downgrade(&self.shared);
        let stop = s.stop.clone();
        let spawned = std::thread::Builder::new().name("oxccl-heartbeat".into()).spawn(move || {
            while !stop.is_raised() {
                std::thread::sleep(interval);
                let Some(s) = weak.upgrade() else { return };
                if stop.is_raised() {
                    return;
                }
                let beat = {
                    // Failed ranks drop out of the ring, so that survivors keep watching each
                    // other (and a shrunk communicator stays covered).
                    let (dead, left): (Vec<u32>, Vec<u32>) = {
                        let inbox = s.inbox.lock();
                        (inbox.dead.keys().copied().collect(), inbox.closed.iter().copied().filter(|r| !inbox.dead.contains_key(r)).collect())
                    };
                    let mut detector = s.detector.lock();
                    let Some(detector) = detector.as_mut() else { return };
                    dead.into_iter().for_each(|r| detector.handle_dead(r));
                    left.into_iter().for_each(|r| detector.handle_left(r));
                    detector.poll(s.now_ms())
                };
                // A dead successor is found (and announced) by this send.
                if let Some(next) = beat.heartbeat_to {
                    let _ = s.send(next, &Message::Data { comm: HEARTBEAT_COMM, tag: 0, payload: Vec::new() }, &[]);
                }
                if let Some(Suspicion { rank, silent_ms, watched_next }) = beat.suspect {
                    let failure = Failure {
                        reason: format!("rank {rank} stopped answering: nothing from it for {silent_ms} ms (OXCCL_HEARTBEAT_TIMEOUT_MS={}); stopped or hung", timeout.as_millis()),
                        failed: vec![rank],
                    };
                    // The rank watched next learns it (and every failure known here) at once,
                    // so that its heartbeats come here before its credit runs out, even if
                    // the notice going round the ring is swallowed by another stopped rank.
                    if let Some(watched) = watched_next.filter(|&w| w != s.rank) {
                        let notice = Message::Abort { reason: failure.reason.clone(), failed: failure.failed.clone() };
                        let _ = std::iter::once(notice).chain(s.known_failures()).try_for_each(|m| s.send_quietly(watched, &m, &[]));
                    }
                    s.fail(failure);
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(target: target::BOOTSTRAP, "rank {}: no heartbeat thread ({e}): a stopped peer will only be found by timeouts", s.rank);
        }
    }

    /// How long one bootstrap step may wait.
    pub fn timeout(&self) -> Duration {
        self.shared.limits.timeout
    }

    /// The deadline of a wait starting now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.shared.limits.timeout
    }

    /// Sends one control message to `peer`, connecting on first use (a wait that ends when
    /// any of `aborts` is raised).
    pub fn send(&self, peer: u32, comm: u64, tag: u64, payload: &[u8], aborts: &[&AbortFlag]) -> Result<()> {
        self.shared.send(peer, &Message::Data { comm, tag, payload: payload.to_vec() }, aborts)
    }

    /// Opens the connection to `peer` now rather than at the first send.
    pub fn connect(&self, peer: u32, aborts: &[&AbortFlag]) -> Result<()> {
        self.shared.connected(peer, aborts).map(drop)
    }

    /// Waits for the next message from `peer` on (comm, tag); fails when a rank of
    /// `members` (the communicator's job ranks) is known to have failed or any of `aborts`
    /// is raised. A `revocable` wait also ends when the communicator is revoked.
    #[allow(clippy::too_many_arguments)]
    pub fn recv(&self, peer: u32, comm: u64, tag: u64, phase: &str, aborts: &[&AbortFlag], members: &[u32], revocable: bool) -> Result<Vec<u8>> {
        let s = &self.shared;
        let start = Instant::now();
        let deadline = start + s.limits.timeout;
        let mut inbox = s.inbox.lock();
        loop {
            if let Some(message) = inbox.queues.get_mut(&(peer, comm, tag)).and_then(VecDeque::pop_front) {
                return Ok(message);
            }
            if let Some(reason) = inbox.revoked.get(&comm).filter(|_| revocable) {
                return Err(Error::Aborted { reason: format!("{reason} (during {phase})") });
            }
            if let Some(f) = inbox.breaking(members) {
                return Err(f.to_error(phase));
            }
            if any_raised(aborts) {
                return Err(Error::Aborted { reason: format!("abort requested during {phase}") });
            }
            if inbox.closed.contains(&peer) {
                return Err(Error::PeerFailed { rank: peer, phase: phase.into(), reason: "connection closed".into() });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout { phase: format!("{phase}, waiting for rank {peer}"), waited: now - start });
            }
            // Wake at least every 100 ms to see an abort flag set without a notification.
            let wake = deadline.min(now + Duration::from_millis(100));
            s.arrived.wait_until(&mut inbox, wake);
        }
    }

    /// Takes the next message on (comm, tag) from any of `peers` (job ranks), waiting until
    /// `until` at most; `None` if nothing came by then. Failures do not end this wait (the
    /// caller asks [`Endpoint::dead_ranks`]), but wake it.
    pub fn recv_any(&self, comm: u64, tag: u64, peers: &[u32], until: Instant) -> Option<(u32, Vec<u8>)> {
        let s = &self.shared;
        let mut inbox = s.inbox.lock();
        loop {
            let found = peers.iter().find_map(|&p| inbox.queues.get_mut(&(p, comm, tag)).and_then(VecDeque::pop_front).map(|m| (p, m)));
            if found.is_some() {
                return found;
            }
            if Instant::now() >= until {
                return None;
            }
            let before = inbox.dead.len();
            s.arrived.wait_until(&mut inbox, until);
            if inbox.dead.len() != before {
                return None;
            }
        }
    }

    /// From now on, messages on (`comm`, tag 0) — those already waiting here and those to
    /// come — go to `responder`, on the connection's reader thread, and what it returns is
    /// sent: a finished agreement keeps answering its late peers for as long as this
    /// process is in the job (the newest [`RESPONDERS`] finished ones).
    pub fn keep_answering(&self, comm: u64, mut responder: Responder) {
        let replies = {
            let mut inbox = self.shared.inbox.lock();
            let waiting: Vec<(u32, u64, u64)> = inbox.queues.keys().filter(|(_, c, t)| *c == comm && *t == 0).copied().collect();
            let mut replies = Vec::new();
            for key in waiting {
                for payload in inbox.queues.remove(&key).unwrap_or_default() {
                    replies.extend(responder(key.0, &payload));
                }
            }
            if inbox.responders.len() >= RESPONDERS {
                inbox.responders.pop_front();
            }
            inbox.responders.push_back((comm, responder));
            replies
        };
        self.shared.queue_replies(comm, replies);
    }

    /// Revokes communicator `comm` here and tells its other live `members` (job ranks), so
    /// that their waits on it end too. Best effort: a member that cannot be reached is
    /// announced as failed.
    pub fn revoke(&self, comm: u64, members: &[u32], reason: String) {
        let dead: Vec<u32> = {
            let mut inbox = self.shared.inbox.lock();
            inbox.revoked.entry(comm).or_insert_with(|| reason.clone());
            self.shared.arrived.notify_all();
            inbox.dead.keys().copied().collect()
        };
        for &m in members.iter().filter(|&&m| m != self.shared.rank && !dead.contains(&m)) {
            let notice = Message::Data { comm: REVOKE_COMM, tag: comm, payload: reason.as_bytes().to_vec() };
            if let Err(e) = self.shared.send(m, &notice, &[]) {
                tracing::warn!(target: target::BOOTSTRAP, "rank {}: could not tell rank {m} of the revocation: {e}", self.shared.rank);
            }
        }
    }

    /// Why communicator `comm` was revoked, if it was.
    pub fn revoked(&self, comm: u64) -> Option<String> {
        self.shared.inbox.lock().revoked.get(&comm).cloned()
    }

    /// Every job rank known to have failed.
    pub fn dead_ranks(&self) -> Vec<u32> {
        self.shared.inbox.lock().dead.keys().copied().collect()
    }

    /// Every job rank that can no longer take part: failed, or gone (its connection here
    /// ended, with a goodbye or not: a goodbye means its process left the job).
    pub fn gone_ranks(&self) -> Vec<u32> {
        if !self.shared.anyone_gone.load(Ordering::Acquire) {
            return Vec::new();
        }
        let inbox = self.shared.inbox.lock();
        inbox.dead.keys().copied().chain(inbox.closed.iter().copied()).collect()
    }

    /// The failure that breaks a communicator of `members`, if one is known (never blocks
    /// on the network).
    pub fn failure(&self, phase: &str, members: &[u32]) -> Option<Error> {
        self.shared.inbox.lock().breaking(members).map(|f| f.to_error(phase))
    }

    /// Waits up to `limit` until a failure that breaks `members` is known here (a recorded
    /// failure wakes the wait), or an abort flag of `aborts` is raised; the failure, if any.
    pub fn failure_within(&self, phase: &str, members: &[u32], aborts: &[&AbortFlag], limit: Duration) -> Option<Error> {
        let s = &self.shared;
        let deadline = Instant::now() + limit;
        let mut inbox = s.inbox.lock();
        loop {
            if let Some(f) = inbox.breaking(members) {
                return Some(f.to_error(phase));
            }
            if any_raised(aborts) || Instant::now() >= deadline {
                return None;
            }
            s.arrived.wait_until(&mut inbox, deadline);
        }
    }

    /// Wakes every waiter so that it sees an abort flag.
    pub fn wake_all(&self) {
        let _guard = self.shared.inbox.lock();
        self.shared.arrived.notify_all();
    }

    /// Records a job-wide failure and tells the ring successor.
    pub fn fail(&self, reason: String, failed: Vec<u32>) {
        self.shared.fail(Failure { reason, failed });
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shared.stop.raise();
        // The goodbye goes both ways: a peer whose connection to this rank ends without
        // one counts this rank as dead (`Shared::watch_outgoing`).
        for mut stream in self.shared.incoming.lock().drain(..) {
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = wire::write_message(&mut stream, &Message::Bye);
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for slot in &self.shared.outgoing {
            if let Some(mut stream) = slot.lock().take() {
                let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                let _ = wire::write_message(&mut stream, &Message::Bye);
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl Failure {
    fn to_error(&self, phase: &str) -> Error {
        match self.failed.first() {
            Some(&rank) => Error::PeerFailed {
                rank,
                phase: phase.into(),
                reason: if self.failed.len() > 1 {
                    format!("{} (failed ranks {:?})", self.reason, self.failed)
                } else {
                    self.reason.clone()
                },
            },
            None => Error::Aborted { reason: self.reason.clone() },
        }
    }
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Sends to `peer`; a peer found dead (refused connection, failed write) is announced
    /// to the job before the error returns, as a closed connection is.
    fn send(&self, peer: u32, message: &Message, aborts: &[&AbortFlag]) -> Result<()> {
        let result = self.send_quietly(peer, message, aborts);
        if let Err(Error::PeerFailed { rank, reason, .. }) = &result {
            if !any_raised(aborts) {
                self.fail(Failure { reason: format!("rank {rank} unreachable ({reason})"), failed: vec![*rank] });
            }
        }
        result
    }

    /// Hands a responder's replies to the replier thread, starting it on first use (or
    /// sends them here if no thread can be started).
    fn queue_replies(self: &Arc<Self>, comm: u64, replies: Replies) {
        if replies.is_empty() {
            return;
        }
        let mut sender = self.replies.lock();
        if sender.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<(u64, Replies)>();
            let weak = Arc::downgrade(self);
            // The thread ends once the endpoint is gone (its sender with it).
            let spawned = std::thread::Builder::new().name("oxccl-replies".into()).spawn(move || {
                while let Ok((comm, replies)) = rx.recv() {
                    let Some(shared) = weak.upgrade() else { return };
                    shared.send_replies(comm, replies);
                }
            });
            match spawned {
                Ok(_) => *sender = Some(tx),
                Err(e) => {
                    drop(sender);
                    tracing::warn!(target: target::BOOTSTRAP, "rank {}: no replier thread ({e}): answering inline", self.rank);
                    return self.send_replies(comm, replies);
                }
            }
        }
        let _ = sender.as_ref().expect("started above").send((comm, replies));
    }

    /// Sends a responder's replies on (`comm`, tag 0); a peer found dead is announced.
    fn send_replies(&self, comm: u64, replies: Replies) {
        for (to, payload) in replies {
            if let Err(e) = self.send(to, &Message::Data { comm, tag: 0, payload }, &[]) {
                tracing::debug!(target: target::BOOTSTRAP, "rank {}: could not answer rank {to}: {e}", self.rank);
            }
        }
    }

    /// Sends without announcing a failure (the announcement itself goes this way).
    fn send_quietly(&self, peer: u32, message: &Message, aborts: &[&AbortFlag]) -> Result<()> {
        let mut slot = self.connected(peer, aborts)?;
        let stream = slot.as_mut().expect("connected() leaves a stream");
        if let Err(e) = wire::write_message(stream, message) {
            *slot = None;
            return Err(Error::PeerFailed { rank: peer, phase: "bootstrap send".into(), reason: format!("write failed: {e}") });
        }
        Ok(())
    }

    /// The connection to `peer`, opened (with our hello) on first use.
    fn connected(&self, peer: u32, aborts: &[&AbortFlag]) -> Result<parking_lot::MutexGuard<'_, Option<TcpStream>>> {
        let table = self.table.get().ok_or_else(|| Error::invalid("send before the bootstrap completed"))?;
        let addr = *table.get(peer as usize).ok_or_else(|| Error::invalid(format!("peer {peer} out of range")))?;
        let mut slot = self.outgoing[peer as usize].lock();
        if slot.is_none() {
            let failed = |reason: String| Error::PeerFailed { rank: peer, phase: "bootstrap connect".into(), reason };
            let deadline = Instant::now() + self.limits.timeout;
            let mut stream = sock::connect(addr, "bootstrap peer", deadline, Refused::Fatal, &|| any_raised(aborts))
                .map_err(|e| failed(format!("cannot connect to {addr}: {e}")))?;
            let hello = Message::Hello(Hello {
                magic: HELLO_MAGIC,
                version: PROTOCOL_VERSION,
                secret: self.secret,
                rank: self.rank,
                nranks: self.nranks,
                listen: self.listen,
            });
            wire::write_message(&mut stream, &hello).map_err(|e| failed(format!("hello to {addr}: {e}")))?;
            let _ = stream.set_write_timeout(Some(self.limits.timeout));
            match stream.try_clone() {
                Ok(read_side) => {
                    let mut watched = self.watched.lock();
                    watched.retain(|(p, _)| *p != peer);
                    watched.push((peer, Arc::new(read_side)));
                }
                Err(e) => tracing::debug!(target: target::BOOTSTRAP, "rank {}: connection to rank {peer} not watched: {e}", self.rank),
            }
            *slot = Some(stream);
        }
        Ok(slot)
    }

    fn serve_incoming(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr) {
        let hello = match read_hello(&mut stream, self.limits.handshake) {
            Ok(hello) => hello,
            Err(e) => {
                tracing::warn!(target: target::BOOTSTRAP, "rank {}: dropping connection from {peer}: {e}", self.rank);
                return;
            }
        };
        let checked = check_credentials(&hello, &self.secret)
            .and_then(|()| check_position(hello.rank, hello.nranks, Some(self.nranks)))
            .and_then(|()| if hello.rank == self.rank { Err("claims to be this rank".into()) } else { Ok(()) });
        if let Err(reason) = checked {
            refuse(stream, peer, &reason);
            return;
        }
        let from = hello.rank;
        if sock::set_read_timeout(&stream, None).is_err() {
            return;
        }
        if let Ok(clone) = stream.try_clone() {
            self.incoming.lock().push(clone);
        }
        self.reading.lock().insert(from);
        let end = loop {
            let message = wire::read_message(&mut stream, self.limits.max_frame);
            if message.is_ok() {
                if let Some(detector) = self.detector.lock().as_mut() {
                    detector.handle_heard(self.now_ms(), from);
                }
            }
            match message {
                Ok(Message::Data { comm: HEARTBEAT_COMM, .. }) => {}
                Ok(Message::Data { comm: REVOKE_COMM, tag: revoked, payload }) => {
                    let mut inbox = self.inbox.lock();
                    inbox.revoked.entry(revoked).or_insert_with(|| String::from_utf8_lossy(&payload).into_owned());
                    self.arrived.notify_all();
                }
                Ok(Message::Data { comm, tag, payload }) => {
                    let mut inbox = self.inbox.lock();
                    if let Some((_, responder)) = inbox.responders.iter_mut().find(|(c, _)| *c == comm && tag == 0) {
                        let replies = responder(from, &payload);
                        drop(inbox);
                        self.queue_replies(comm, replies);
                    } else {
                        inbox.queues.entry((from, comm, tag)).or_default().push_back(payload);
                        self.arrived.notify_all();
                    }
                }
                Ok(Message::Abort { reason, failed }) => {
                    // A rank already counted as failed (stopped, then resumed) is not
                    // believed: its silence made it blame others.
                    if !self.inbox.lock().dead.contains_key(&from) {
                        self.fail(Failure { reason, failed });
                    }
                }
                Ok(Message::Bye) => break String::new(),
                Ok(other) => break format!("unexpected {} after the handshake", kind_name(&other)),
                Err(e) => break e.to_string(),
            }
        };
        self.reading.lock().remove(&from);
        if self.stop.is_raised() {
            return;
        }
        let said_goodbye = end.is_empty();
        tracing::debug!(target: target::BOOTSTRAP, "rank {}: connection from rank {from} ended: {}", self.rank, if said_goodbye { "goodbye" } else { &end });
        // A connection that ends without a goodbye means the peer died: the death is
        // announced to the rest of the job before any local waiter hears of it, so that
        // this rank cannot exit with the news untold.
        if !said_goodbye {
            let why = if end.contains(wire::CLOSED_BETWEEN_FRAMES) { "its connection closed without a goodbye: the process exited or was killed".to_string() } else { end };
            self.fail(Failure { reason: format!("rank {from} disconnected ({why})"), failed: vec![from] });
        }
        let mut inbox = self.inbox.lock();
        inbox.closed.insert(from);
        self.anyone_gone.store(true, Ordering::Release);
        self.arrived.notify_all();
    }

    /// Watches this rank's connections to its peers (the thread started with the
    /// endpoint, until it stops). A peer never writes on a connection this rank opened,
    /// but for a goodbye when it leaves; so the connection ending without one means the
    /// peer's process died. Unless a reader of the peer's own connection to this rank will
    /// say so (after what the peer sent before), that is announced within a fifth of a
    /// second (held that long so that a failure notice on its way is known first): without this, a peer that died before it connected to anyone (just after
    /// a rendezvous, say) was found only by a failed write or the heartbeat timeout.
    fn watch_outgoing(weak: &std::sync::Weak<Shared>, stop: &AbortFlag) {
        const SLICE: Duration = Duration::from_millis(50);
        // Deaths seen here wait this long before they are announced, so that a failure
        // notice already travelling the ring (the failure that made the peer exit, say) is
        // known first and is the one errors name.
        const HOLD: Duration = Duration::from_millis(200);
        let mut held: Vec<(u32, String, Instant)> = Vec::new();
        while !stop.is_raised() {
            let Some(shared) = weak.upgrade() else { return };
            let due: Vec<(u32, String)> = {
                let now = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) = held.drain(..).partition(|(_, _, at)| now.duration_since(*at) >= HOLD);
                held = later;
                due.into_iter().map(|(peer, reason, _)| (peer, reason)).collect()
            };
            for (peer, reason) in due {
                shared.fail(Failure { reason: format!("rank {peer} disconnected ({reason})"), failed: vec![peer] });
            }
            let watched: Vec<(u32, Arc<TcpStream>)> = shared.watched.lock().clone();
            drop(shared);
            if watched.is_empty() {
                std::thread::sleep(SLICE);
                continue;
            }
            let streams: Vec<&TcpStream> = watched.iter().map(|(_, s)| &**s).collect();
            let ready = match sock::readable(&streams, SLICE) {
                Ok(ready) => ready,
                Err(e) => {
                    tracing::warn!(target: target::BOOTSTRAP, "connection watcher: poll failed: {e}; stopped");
                    return;
                }
            };
            let Some(shared) = weak.upgrade() else { return };
            for ((peer, stream), _) in watched.iter().zip(ready).filter(|(_, r)| *r) {
                let ended = shared.outgoing_ended(*peer, stream);
                if let Some(end) = ended {
                    shared.watched.lock().retain(|(p, s)| !(*p == *peer && Arc::ptr_eq(s, stream)));
                    // A peer with a connection to this rank still being read is reported
                    // by that reader, after the messages it sent before it died.
                    let reader_will_tell = shared.reading.lock().contains(peer);
                    if let Some(reason) = end.filter(|_| !reader_will_tell) {
                        held.push((*peer, reason, Instant::now()));
                    }
                }
            }
        }
    }

    /// What a readable connection to `peer` says: `None` if nothing after all, else
    /// `Some(None)` for a goodbye (or a refusal, logged) and `Some(Some(why))` for an end
    /// that means the peer died.
    fn outgoing_ended(&self, peer: u32, stream: &TcpStream) -> Option<Option<String>> {
        match sock::pending(stream) {
            sock::Pending::Nothing => return None,
            sock::Pending::Closed => return Some(Some("its connection closed without a goodbye: the process exited or was killed".into())),
            sock::Pending::Data => {}
        }
        let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
        match wire::read_message(&mut &*stream, MAX_HANDSHAKE_FRAME) {
            Ok(Message::Bye) => Some(None),
            Ok(Message::Refuse { reason }) => {
                tracing::warn!(target: target::BOOTSTRAP, "rank {}: rank {peer} refused this rank's connection: {reason}", self.rank);
                Some(None)
            }
            Ok(other) => Some(Some(format!("it sent an unexpected {} on this rank's connection", kind_name(&other)))),
            Err(Error::Timeout { .. }) => None,
            Err(e) => Some(Some(e.to_string())),
        }
    }

    /// Sends a failure notice to the first ring successor that has not failed (skipping the
    /// failed keeps the notice going round a ring they broke). When this failure changes
    /// that successor, the new one gets every failure known here: notices sent to the old
    /// one may have died with it (a stopped rank swallows them). Needs the table.
    fn pass_on(&self, failure: &Failure) -> Option<u32> {
        let known: Vec<(u32, String)> = self.inbox.lock().dead.iter().map(|(r, why)| (*r, why.clone())).collect();
        let dead = |r: &u32| known.iter().any(|(k, _)| k == r);
        let successors = || (1..self.nranks).map(|i| (self.rank + i) % self.nranks);
        let before = successors().find(|r| !dead(r));
        let next = successors().find(|r| !failure.failed.contains(r) && !dead(r));
        let next = next.filter(|_| self.table.get().is_some())?;
        let mut notices = vec![Message::Abort { reason: failure.reason.clone(), failed: failure.failed.clone() }];
        if before != Some(next) {
            notices.extend(known.into_iter().map(|(r, reason)| Message::Abort { reason, failed: vec![r] }));
        }
        match notices.iter().try_for_each(|notice| self.send_quietly(next, notice, &[])) {
            Ok(()) => tracing::debug!(target: target::BOOTSTRAP, "rank {}: failure notice passed to rank {next}", self.rank),
            Err(e) => tracing::warn!(target: target::BOOTSTRAP, "rank {}: could not pass the failure notice to rank {next}: {e}", self.rank),
        }
        Some(next)
    }

    /// Sends a failure notice straight to every live peer (but `skip`, told already) that
    /// this rank has a connection open to, opening none. A rank that exits on the news
    /// closes those connections; with the notice ahead of the close on each, a peer reads
    /// the failure before it reads this rank's end, and blames the rank that failed first
    /// rather than this one. A connection busy for 100 ms is passed over (the ring still
    /// carries the notice).
    fn tell_connected(&self, failure: &Failure, skip: Option<u32>) {
        const BUSY: Duration = Duration::from_millis(100);
        let dead: Vec<u32> = self.inbox.lock().dead.keys().copied().collect();
        let notice = Message::Abort { reason: failure.reason.clone(), failed: failure.failed.clone() };
        for peer in (0..self.nranks).filter(|p| *p != self.rank && Some(*p) != skip && !failure.failed.contains(p) && !dead.contains(p)) {
            let Some(mut slot) = self.outgoing[peer as usize].try_lock_for(BUSY) else { continue };
            let Some(stream) = slot.as_mut() else { continue };
            let _ = stream.set_write_timeout(Some(BUSY));
            if let Err(e) = wire::write_message(stream, &notice) {
                tracing::debug!(target: target::BOOTSTRAP, "rank {}: could not tell rank {peer} of the failure: {e}", self.rank);
                // Part of a frame may have gone: the connection can carry nothing more.
                *slot = None;
                continue;
            }
            let _ = stream.set_write_timeout(Some(self.limits.timeout));
        }
    }

    /// Every failure known here, as notices.
    fn known_failures(&self) -> Vec<Message> {
        self.inbox.lock().dead.iter().map(|(r, reason)| Message::Abort { reason: reason.clone(), failed: vec![*r] }).collect()
    }

    fn fail(&self, failure: Failure) {
        {
            let inbox = self.inbox.lock();
            let known = inbox.failure.is_some() && failure.failed.iter().all(|r| inbox.dead.contains_key(r));
            if known || self.stop.is_raised() {
                return;
            }
        }
        // Tell the first live ring successor (it forwards in turn) and the peers this rank
        // already has a connection to, then wake local waiters. Before the table is known
        // this cannot be done here; set_table does it then.
        let next = self.pass_on(&failure);
        self.tell_connected(&failure, next);
        let mut inbox = self.inbox.lock();
        tracing::warn!(target: target::BOOTSTRAP, "rank {}: {}", self.rank, failure.reason);
        for &r in &failure.failed {
            inbox.dead.entry(r).or_insert_with(|| failure.reason.clone());
        }
        self.anyone_gone.store(true, Ordering::Release);
        if inbox.failure.is_none() {
            inbox.failure = Some(failure);
        }
        self.arrived.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two endpoints of a 2-rank job wired by hand (no heartbeats): rank 0 connects to
    /// rank 1, which never connects back.
    fn pair() -> (Endpoint, Endpoint) {
        let limits = Limits { timeout: Duration::from_secs(20), handshake: Duration::from_secs(1), max_frame: 1 << 20, heartbeat: None };
        let listen = || sock::listen("127.0.0.1".parse().unwrap(), 0).unwrap();
        let (a, b) = (Endpoint::listen(listen(), 0, 2, [7; 32], limits).unwrap(), Endpoint::listen(listen(), 1, 2, [7; 32], limits).unwrap());
        let table = vec![a.listen_addr(), b.listen_addr()];
        a.set_table(table.clone());
        b.set_table(table);
        a.send(1, 5, 1, b"x", &[]).unwrap();
        assert_eq!(b.recv(0, 5, 1, "test", &[], &[0, 1], false).unwrap(), b"x");
        (a, b)
    }

    /// Waits up to 2 s for rank 1 to count as dead at `a`.
    fn dead_within(a: &Endpoint, bound: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < bound {
            if a.dead_ranks().contains(&1) {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// A peer whose only connection with this rank is this rank's own (it never wrote to
    /// this rank) is found dead as soon as that connection ends without a goodbye — not
    /// only at the next failed write or the heartbeat timeout; a peer that leaves with a
    /// goodbye is not.
    #[test]
    fn a_peer_dying_on_a_connection_it_never_wrote_to_is_found_at_once() {
        let (a, b) = pair();
        // Rank 1 "dies": its sockets close with no goodbye (what the kernel does for a
        // killed process).
        b.shared.stop.raise();
        for stream in b.shared.incoming.lock().drain(..) {
            stream.shutdown(std::net::Shutdown::Both).unwrap();
        }
        let took = dead_within(&a, Duration::from_secs(2)).expect("rank 1's death went unnoticed");
        assert!(took < Duration::from_millis(500), "{took:?}");
        let error = a.failure("test", &[0, 1]).expect("a failure");
        assert!(error.to_string().contains("rank 1 disconnected"), "{error}");

        let (a, b) = pair();
        drop(b);
        assert_eq!(dead_within(&a, Duration::from_millis(300)), None, "a goodbye was taken for a death");
    }

    /// A wait for a failure ends when one is recorded (not at its limit), and without one
    /// at its limit, or at once when an abort flag is raised.
    #[test]
    fn a_wait_for_a_failure_ends_when_one_is_recorded() {
        let (a, _b) = pair();
        let start = Instant::now();
        assert!(a.failure_within("test", &[0, 1], &[], Duration::from_millis(100)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(100));
        let aborted = AbortFlag::new();
        aborted.raise();
        let start = Instant::now();
        assert!(a.failure_within("test", &[0, 1], &[&aborted], Duration::from_secs(30)).is_none());
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        let start = Instant::now();
        let error = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                a.fail("rank 1 died".into(), vec![1]);
            });
            a.failure_within("test", &[0, 1], &[], Duration::from_secs(30))
        });
        assert!(matches!(error, Some(Error::PeerFailed { rank: 1, .. })), "{error:?}");
        assert!(start.elapsed() < Duration::from_secs(5), "woken only at the limit: {:?}", start.elapsed());
    }

    /// A rank that hears of a failure and dies at once (its program exits on the error)
    /// tells the peers it has a connection to before its connections close: they blame the
    /// rank that failed first, not it. Ranks 2 and 3 are endpoints; rank 1 is the one that
    /// failed, and rank 0 (rank 3's ring successor) a socket that never reads, so the ring
    /// carries the news no further and only rank 3's own notice can reach rank 2.
    #[test]
    fn a_rank_exiting_on_a_failure_is_not_blamed_for_it() {
        let limits = Limits { timeout: Duration::from_secs(20), handshake: Duration::from_secs(1), max_frame: 1 << 20, heartbeat: None };
        let listen = || sock::listen("127.0.0.1".parse().unwrap(), 0).unwrap();
        let (silent, failed) = (listen(), listen());
        let (c, d) = (Endpoint::listen(listen(), 2, 4, [7; 32], limits).unwrap(), Endpoint::listen(listen(), 3, 4, [7; 32], limits).unwrap());
        let table = vec![silent.local_addr().unwrap(), failed.local_addr().unwrap(), c.listen_addr(), d.listen_addr()];
        c.set_table(table.clone());
        d.set_table(table);
        d.send(2, 5, 1, b"x", &[]).unwrap();
        assert_eq!(c.recv(3, 5, 1, "test", &[], &[2, 3], false).unwrap(), b"x");

        d.fail("rank 1 died".into(), vec![1]);
        // Rank 3 exits: its sockets close with no goodbye.
        d.shared.stop.raise();
        for slot in &d.shared.outgoing {
            if let Some(stream) = slot.lock().take() {
                stream.shutdown(std::net::Shutdown::Both).unwrap();
            }
        }
        let start = Instant::now();
        let error = loop {
            if let Some(e) = c.failure("test", &[0, 1, 2, 3]) {
                break e;
            }
            assert!(start.elapsed() < Duration::from_secs(2), "rank 2 heard of no failure");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(matches!(error, Error::PeerFailed { rank: 1, .. }), "rank 2 blamed the wrong rank: {error}");
    }
}
