//! Socket plumbing shared by the root and the rank endpoints: listening, accepting with a
//! stop flag, connecting with retries and backoff.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::abort::AbortFlag;
use crate::error::{Error, Result};
use crate::log::target;

/// How often blocked accept loops look at their stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Connections still handshaking at once, per listener; more are dropped at once, so that
/// a flood of silent connections cannot exhaust threads.
const MAX_HANDSHAKING: usize = 256;

/// Binds a listener on `ip` (port 0 picks a free one).
pub fn listen(ip: IpAddr, port: u16) -> io::Result<TcpListener> {
    let addr = SocketAddr::new(ip, port);
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Accepts connections until `stop` is raised, handing each to `handle` on its own thread.
pub fn accept_loop(
    listener: TcpListener,
    stop: AbortFlag,
    what: &'static str,
    handle: impl Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let handle = Arc::new(handle);
    let in_flight = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name(format!("oxccl-{what}")).spawn(move || {
        while !stop.is_raised() {
            let mut fds = [nix::poll::PollFd::new(listener.as_fd(), nix::poll::PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(STOP_POLL.as_millis() as u16)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: target::BOOTSTRAP, "{what}: poll failed: {e}; listener closed");
                    return;
                }
            }
            let (stream, peer) = match listener.accept() {
                Ok(conn) => conn,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    tracing::warn!(target: target::BOOTSTRAP, "{what}: accept failed: {e}");
                    continue;
                }
            };
            if in_flight.load(Ordering::Acquire) >= MAX_HANDSHAKING {
                tracing::warn!(target: target::BOOTSTRAP, "{what}: dropping connection from {peer}: {MAX_HANDSHAKING} connections already handshaking");
                continue;
            }
            if stream.set_nonblocking(false).and_then(|()| stream.set_nodelay(true)).is_err() {
                continue;
            }
            in_flight.fetch_add(1, Ordering::AcqRel);
            let (handle, in_flight) = (handle.clone(), in_flight.clone());
            let spawned = std::thread::Builder::new().name(format!("oxccl-{what}-conn")).spawn(move || {
                let _guard = Decrement(&in_flight);
                handle(stream, peer);
            });
            if let Err(e) = spawned {
                tracing::warn!(target: target::BOOTSTRAP, "{what}: cannot start a thread for {peer}: {e}");
            }
        }
    })
}

struct Decrement<'a>(&'a AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a connect attempt treats a refused connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener may not be up yet (the root): retry until the deadline.
    Retry,
    /// The listener was up when its address was published (a peer): refused means gone.
    Fatal,
}

/// Connects to `addr` until `deadline`, backing off from 10 ms to 1 s between attempts;
/// gives up (with the last attempt's error) as soon as `stop` says so.
pub fn connect(addr: SocketAddr, what: &'static str, deadline: Instant, refused: Refused, stop: &dyn Fn() -> bool) -> Result<TcpStream> {
    let start = Instant::now();
    let mut backoff = Duration::from_millis(10);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let attempt = TcpStream::connect_timeout(&addr, remaining.max(Duration::from_millis(1)));
        let error = match attempt {
            Ok(stream) => {
                stream.set_nodelay(true).map_err(|e| Error::io("setting TCP_NODELAY", e))?;
                return Ok(stream);
            }
            Err(e) => e,
        };
        let retryable = match error.kind() {
            io::ErrorKind::ConnectionRefused => refused == Refused::Retry,
            io::ErrorKind::TimedOut | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionReset => true,
            _ => matches!(error.raw_os_error(), Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EAGAIN)),
        };
        let now = Instant::now();
        if !retryable || now + backoff >= deadline || stop() {
            return Err(Error::Connect { addr, what, waited: now - start, source: error });
        }
        tracing::trace!(target: target::BOOTSTRAP, "connecting to {what} {addr}: {error}; retrying in {backoff:?}");
        let retry = now + backoff;
        while Instant::now() < retry {
            if stop() {
                return Err(Error::Connect { addr, what, waited: start.elapsed(), source: error });
            }
            std::thread::sleep(retry.saturating_duration_since(Instant::now()).min(STOP_POLL));
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Sets a read timeout, treating "no timeout" as `None`.
pub fn set_read_timeout(stream: &TcpStream, timeout: Option<Duration>) -> Result<()> {
    stream
        .set_read_timeout(timeout.map(|t| t.max(Duration::from_millis(1))))
        .map_err(|e| Error::io("setting a socket timeout", e))
}

/// Which of `streams` have something to read (data, or the end of the stream), waiting at
/// most `timeout` for one to; interrupted waits count as nothing ready.
pub fn readable(streams: &[&TcpStream], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut fds: Vec<nix::poll::PollFd> = streams.iter().map(|s| nix::poll::PollFd::new(s.as_fd(), nix::poll::PollFlags::POLLIN)).collect();
    let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(millis)) {
        Ok(0) | Err(nix::errno::Errno::EINTR) => Ok(vec![false; streams.len()]),
        Ok(_) => Ok(fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect()),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// What a connection its peer only writes to in the end (a goodbye, a notice) holds.
pub enum Pending {
    Nothing,
    Data,
    /// End of stream or an error: the peer is gone.
    Closed,
}

/// Looks, without waiting or reading, at what `stream` holds.
pub fn pending(stream: &TcpStream) -> Pending {
    let mut byte = [0u8; 1];
    let _ = stream.set_nonblocking(true);
    let pending = match stream.peek(&mut byte) {
        Ok(0) => Pending::Closed,
        Ok(_) => Pending::Data,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Pending::Nothing,
        Err(_) => Pending::Closed,
    };
    let _ = stream.set_nonblocking(false);
    pending
}
