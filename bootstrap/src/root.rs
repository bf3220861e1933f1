//! The root service: accepts ranks' hellos for one job, sends everyone the address table,
//! and exits. It runs on its own threads in the process that created the id (or in rank 0
//! for `NCCL_COMM_ID` and launcher-derived ids).

use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
    let stop = Arc::new(AtomicBool::new(false));
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
            stop.store(true, Ordering::Release);
            let _ = accept.join();
            if let Ok(mut s) = served().lock() {
                s.remove(&addr);
            }
        })
        .map_err(|e| Error::io("starting the bootstrap root", e))?;
    Ok(())
}

fn run(addr: SocketAddr, id: UniqueId, timeouts: RootTimeouts, arrivals: mpsc::Receiver<(TcpStream, Hello)>) {
    let mut state = Rendezvous::new(*id.secret());
    let mut streams: Vec<Option<TcpStream>> = Vec::new();
    let mut deadline = Instant::now() + timeouts.join;
    loop {
        let (stream, hello) = match arrivals.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(arrival) => arrival,
            Err(_) => break,
        };
        let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        if !state.joined_any() {
            deadline = Instant::now() + timeouts.join;
        }
        // A joined rank whose connection has since closed (it died before the table went
        // out) is forgotten so that its replacement, or a timeout naming it, follows.
        for (rank, slot) in streams.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|s| !is_open(s)) {
                tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: rank {rank} left before the job was complete");
                *slot = None;
                state.handle_departure(rank as u32);
            }
        }
        if let Err(reason) = state.handle_hello(&hello) {
            refuse(stream, &peer, &reason);
            continue;
        }
        tracing::debug!(target: target::BOOTSTRAP, "bootstrap root {addr}: rank {}/{} joined from {peer}", hello.rank, hello.nranks);
        if streams.is_empty() {
            streams.resize_with(hello.nranks as usize, || None);
        }
        let _ = stream.set_read_timeout(None);
        streams[hello.rank as usize] = Some(stream);
        if let Some(table) = state.table() {
            let message = Message::Table(table);
            for (rank, stream) in streams.iter_mut().enumerate() {
                if let Some(Err(e)) = stream.as_mut().map(|s| wire::write_message(s, &message)) {
                    tracing::warn!(target: target::BOOTSTRAP, "bootstrap root {addr}: cannot send the table to rank {rank}: {e}");
                }
            }
            tracing::info!(target: target::BOOTSTRAP, "bootstrap root {addr}: all {} ranks joined", streams.len());
            return;
        }
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

/// Whether the peer still holds the connection open (no EOF or error pending).
fn is_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    let _ = stream.set_nonblocking(true);
    let open = match stream.peek(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    };
    let _ = stream.set_nonblocking(false);
    open
}
