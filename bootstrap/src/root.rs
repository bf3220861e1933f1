//! The root service: accepts ranks' hellos for one job, sends everyone the address table,
//! and exits. It runs on its own threads in the process that created the id (or in rank 0
//! for `NCCL_COMM_ID` and launcher-derived ids).

use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::abort::AbortFlag;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::id::UniqueId;
use crate::log::target;
use crate::rendezvous::{check_credentials, check_position, Rendezvous};
use crate::sock;
use crate::wire::{self, Hello, Message, MAX_HANDSHAKE_FRAME};

/// Roots served by this process, so that rank 0 does not try to serve an id twice.
fn served() -> &'static Mutex<HashSet<SocketAddr>> {
    static SERVED: OnceLock<Mutex<HashSet<SocketAddr>>> = OnceLock::new();
    SERVED.get_or_init(Default::default)
}

/// Whether this process serves the root at `addr`.
pub fn is_served_here(addr: SocketAddr) -> bool {
    served().lock().map(|s| s.contains(&addr)).unwrap_or(false)
}

/// Timeouts the root works under.
#[derive(Clone, Copy, Debug)]
pub struct RootTimeouts {
    /// How long ranks have to join (counted from the root's start for the first hello, and
    /// from the first hello for the rest).
    pub join: Duration,
    /// How long a connection may stay silent before its hello.
    pub handshake: Duration,
}

impl RootTimeouts {
    pub fn from_config(config: &Config) -> RootTimeouts {
        RootTimeouts { join: config.bootstrap_timeout, handshake: config.handshake_timeout }
    }
}

/// Records that this process serves the root at `addr`.
pub fn mark_served(addr: SocketAddr) {
    if let Ok(mut s) = served().lock() {
        s.insert(addr);
    }
}

/// Starts serving `id`'s root on `listener` (bound to `id.root()`, or to every address at
/// its port).
pub fn serve(listener: TcpListener, id: UniqueId, timeouts: RootTimeouts) -> Result<()> {
    let addr = id.root();
    mark_served(addr);
    let stop = AbortFlag::new();
    let (joins, arrivals) = mpsc::channel::<(TcpStream, Hello)>();
    let secret = *id.secret();
    let accept = sock::accept_loop(listener, stop.clone(), "bootstrap-root", move |mut stream, peer| {
        // Credentials are checked here, on the connection's own thread, so a silent or
        // hostile peer never holds up the root's loop.
        match read_hello(&mut stream, timeouts.handshake) {
            Ok(hello) => match check_credentials(&hello, &secret).and_then(|()| check_position(hello.rank, hello.nranks, None)) {
                Ok(()) => {
                    let _ = joins.send((stream, hello));
                }
                Err(reason) => refuse(stream, peer, &reason),
            },
            Err(e) => {
                tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: dropping connection from {peer}: {e}");
            }
        }
    })
    .map_err(|e| Error::io("starting the bootstrap root", e))?;
    std::thread::Builder::new()
        .name("oxccl-bootstrap-root".into())
        .spawn(move || {
            run(addr, id, timeouts, arrivals);
            stop.raise();
            let _ = accept.join();
            if let Ok(mut s) = served().lock() {
                s.remove(&addr);
            }
        })
        .map_err(|e| Error::io("starting the bootstrap root", e))?;
    Ok(())
}

/// How often the root looks at the connections of the ranks that joined, for one that
/// closed (died) or sent word that it gave up.
const WATCH: Duration = Duration::from_millis(20);

fn run(addr: SocketAddr, id: UniqueId, timeouts: RootTimeouts, arrivals: mpsc::Receiver<(TcpStream, Hello)>) {
    let mut state = Rendezvous::new(*id.secret());
    let mut streams: Vec<Option<TcpStream>> = Vec::new();
    let mut deadline = Instant::now() + timeouts.join;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let arrival = match arrivals.recv_timeout((deadline - now).min(WATCH)) {
            Ok(arrival) => Some(arrival),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // What the joined ranks said before a hello counts first: the last rank must not
        // complete a rendezvous that one of them already gave up.
        watch_joined(addr, &mut state, &mut streams);
        if let Some((stream, hello)) = arrival {
            if !state.joined_any() {
                deadline = Instant::now() + timeouts.join;
            }
            if arrive(addr, &mut state, &mut streams, stream, &hello) {
                return;
            }
        }
    }
    if state.failure().is_some() {
        // Everyone who came was told; later comers were told until now.
        return;
    }
    let missing = state.missing();
    let reason = if missing.is_empty() {
        format!("no rank joined within {:?}", timeouts.join)
    } else {
        format!("ranks {missing:?} did not join within {:?}", timeouts.join)
    };
    tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: {reason}; aborting the job");
    let notice = Message::Abort { reason, failed: missing };
    for stream in streams.iter_mut().flatten() {
        let _ = wire::write_message(stream, &notice);
    }
}

/// Handles one rank's hello; true once the table went out (the root's work is done).
fn arrive(addr: SocketAddr, state: &mut Rendezvous, streams: &mut Vec<Option<TcpStream>>, mut stream: TcpStream, hello: &Hello) -> bool {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    if let Some(failure) = state.failure() {
        // A rank coming after the rendezvous failed learns why at once.
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = wire::write_message(&mut stream, &Message::Abort { reason: failure.reason.clone(), failed: failure.failed.clone() });
        return false;
    }
    if let Err(reason) = state.handle_hello(hello) {
        refuse(stream, &peer, &reason);
        return false;
    }
    tracing::debug!(target: target::BOOTSTRAP, "bootstrap root {addr}: rank {}/{} joined from {peer}", hello.rank, hello.nranks);
    if streams.is_empty() {
        streams.resize_with(hello.nranks as usize, || None);
    }
    let _ = stream.set_read_timeout(None);
    streams[hello.rank as usize] = Some(stream);
    let Some(table) = state.table() else { return false };
    let message = Message::Table(table);
    for (rank, stream) in streams.iter_mut().enumerate() {
        if let Some(Err(e)) = stream.as_mut().map(|s| wire::write_message(s, &message)) {
            tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: cannot send the table to rank {rank}: {e}");
        }
    }
    tracing::info!(target: target::BOOTSTRAP, "bootstrap root {addr}: all {} ranks joined", streams.len());
    true
}

/// Looks at the joined ranks' connections: one that closed (the rank died) or that says
/// its rank gave up fails the rendezvous, and every joined rank is told at once, so that
/// none waits out the join timeout for a rank that will not come.
fn watch_joined(addr: SocketAddr, state: &mut Rendezvous, streams: &mut [Option<TcpStream>]) {
    // One poll over every joined connection (this runs at each hello: per-connection
    // checks would cost a large job's root n² system calls), then a look at the ready ones.
    let ready: Vec<usize> = {
        let (ranks, joined): (Vec<usize>, Vec<&TcpStream>) = streams.iter().enumerate().filter_map(|(r, s)| s.as_ref().map(|s| (r, s))).unzip();
        let ready = sock::readable(&joined, Duration::ZERO).unwrap_or_default();
        ranks.into_iter().zip(ready).filter_map(|(r, ready)| ready.then_some(r)).collect()
    };
    for rank in ready {
        let slot = &mut streams[rank];
        let Some(stream) = slot.as_mut() else { continue };
        match sock::pending(stream) {
            sock::Pending::Nothing => {}
            sock::Pending::Closed => {
                tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: rank {rank} left before the job was complete");
                state.handle_departure(rank as u32);
                *slot = None;
            }
            sock::Pending::Data => {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
                match wire::read_message(stream, MAX_HANDSHAKE_FRAME) {
                    Ok(Message::Abort { reason, failed }) => {
                        tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: rank {rank} gave up joining: {reason}");
                        state.handle_given_up(rank as u32, &reason, failed);
                    }
                    other => {
                        let what = other.map_or_else(|e| e.to_string(), |m| format!("an unexpected {}", kind_name(&m)));
                        tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: rank {rank} sent {what}; counted as gone");
                        state.handle_departure(rank as u32);
                    }
                }
                *slot = None;
            }
        }
    }
    let Some(failure) = state.failure() else { return };
    if streams.iter().all(Option::is_none) {
        return; // told already
    }
    tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: {}; aborting the job", failure.reason);
    let notice = Message::Abort { reason: failure.reason.clone(), failed: failure.failed.clone() };
    for mut stream in streams.iter_mut().filter_map(Option::take) {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = wire::write_message(&mut stream, &notice);
    }
}

/// Reads a hello within the handshake timeout.
pub fn read_hello(stream: &mut TcpStream, timeout: Duration) -> Result<Hello> {
    sock::set_read_timeout(stream, Some(timeout))?;
    match wire::read_message(stream, MAX_HANDSHAKE_FRAME) {
        Ok(Message::Hello(hello)) => Ok(hello),
        Ok(other) => Err(Error::wire("handshake", format!("expected a hello, got {}", kind_name(&other)))),
        Err(Error::Timeout { phase, .. }) => Err(Error::Timeout { phase: format!("handshake ({phase})"), waited: timeout }),
        Err(e) => Err(e),
    }
}

/// Tells a peer why it is turned away, logs it and closes the connection.
pub fn refuse(mut stream: TcpStream, peer: impl std::fmt::Display, reason: &str) {
    tracing::warn!(target: target::BOOTSTRAP, "refusing connection from {peer}: {reason}");
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = wire::write_message(&mut stream, &Message::Refuse { reason: reason.into() });
    let _ = stream.flush();
}

pub fn kind_name(message: &Message) -> &'static str {
    match message {
        Message::Hello(_) => "hello",
        Message::Table(_) => "table",
        Message::Refuse { .. } => "refusal",
        Message::Abort { .. } => "abort notice",
        Message::Data { .. } => "data",
        Message::Bye => "goodbye",
    }
}
