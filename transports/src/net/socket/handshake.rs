//! Making a comm's connections: the listen handle, the greeting every connection opens
//! with, and the sorting of accepted connections into comms.
//!
//! A comm is one control connection (number 0) and the data connections (1 ..= sockets)
//! that the listener's handle asks for. The connecting side opens them all at once, each
//! greeting with the handle's magic, a random number naming its comm, its own number and
//! the comm's count of data connections. The listening side sorts greeted connections by
//! comm and hands a comm out once every one of its connections is there. A connection
//! whose greeting is wrong, late or missing, that carries a number already taken or out of
//! range, or that belongs to a comm not complete in time is dropped and reported (the
//! caller logs and counts it); it never disturbs the comm that was expected.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::{Streams, MAX_DATA_SOCKETS, MAX_THREADS};
use crate::net::HANDLE_MAX_BYTES;
use crate::{Error, Result};

/// First bytes of listen handles and greetings: the format's name and version.
/// OXS6: messages of at most 128 KiB go whole over the control socket on a comm with data
/// sockets (OXS5 sent them in pieces from 64 KiB: ends of both formats would disagree on
/// where such a message's bytes are).
const PROTOCOL: [u8; 4] = *b"OXS6";
/// Protocol (4), magic (u64 LE), comm (u64 LE), connection number (u8), data connections (u8).
pub(super) const GREETING_BYTES: usize = 22;
/// How long a comm's connections being made may take before `connect` gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an accepted connection may take to greet, and a comm to have all its
/// connections greeted, before they are dropped.
const GREETING_TIMEOUT: Duration = Duration::from_secs(10);
/// Accepted connections waiting for their greeting, and comms waiting for the rest of
/// their connections; beyond this the oldest is dropped, so that a flood of strangers
/// cannot grow memory without bound.
const MAX_ARRIVING: usize = 128;
const MAX_GROUPS: usize = 64;

/// SO_SNDBUF and SO_RCVBUF asked for every connection of a comm, control and data
/// (NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF, which NCCL's socket transport applies to its
/// sockets alike); `None`: the kernel's sizing. Each side applies its own: the connecting
/// side before it connects, the listening side once it accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketBuffers {
    pub send: Option<usize>,
    pub recv: Option<usize>,
}

impl SocketBuffers {
    /// NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF of `config`.
    pub fn from_config(config: &oxccl_bootstrap::Config) -> SocketBuffers {
        SocketBuffers { send: config.socket_send_buffer, recv: config.socket_recv_buffer }
    }

    fn apply(&self, socket: &Socket) -> Result<()> {
        set_buffer(self.send, "SO_SNDBUF", "NCCL_SOCKET_SNDBUF", |bytes| socket.set_send_buffer_size(bytes))?;
        set_buffer(self.recv, "SO_RCVBUF", "NCCL_SOCKET_RCVBUF", |bytes| socket.set_recv_buffer_size(bytes))
    }
}

/// Sets one buffer `option` (what `variable` asked) when asked; socket2 passes the size to
/// setsockopt as an int, so a larger one is refused rather than wrapped.
fn set_buffer(bytes: Option<usize>, option: &str, variable: &str, set: impl FnOnce(usize) -> std::io::Result<()>) -> Result<()> {
    let Some(bytes) = bytes else { return Ok(()) };
    if libc::c_int::try_from(bytes).is_err() {
        return Err(Error::InvalidArgument(format!("{variable}={bytes}: more than setsockopt takes (2147483647 bytes)")));
    }
    set(bytes).map_err(|e| Error::io(format!("setting {option} to {bytes} bytes ({variable})"), e))
}

/// What a listen handle says: where to connect, the magic to greet with, and how the
/// listener wants the comm's data moved (its threads and data connections: the listening
/// side decides, as in NCCL's socket transport), and whether its comms are receiver-driven
/// (a message goes only once its receive is posted: see `stream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Handle {
    pub addr: SocketAddr,
    pub magic: u64,
    pub streams: Streams,
    pub cleared: bool,
}

/// Handle bytes: protocol (4), magic (u64 LE), threads (u8), data sockets (u8), flags (u8:
/// bit 0 receiver-driven), port (u16 LE), family (4 or 6), address; whatever follows is
/// padding.
pub(super) fn encode_handle(handle: &Handle) -> Vec<u8> {
    let mut bytes = PROTOCOL.to_vec();
    bytes.extend_from_slice(&handle.magic.to_le_bytes());
    // Streams are at most MAX_THREADS and MAX_DATA_SOCKETS, which fit a byte.
    bytes.push(handle.streams.threads as u8);
    bytes.push(handle.streams.sockets as u8);
    bytes.push(u8::from(handle.cleared));
    bytes.extend_from_slice(&handle.addr.port().to_le_bytes());
    match handle.addr.ip() {
        IpAddr::V4(ip) => {
            bytes.push(4);
            bytes.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            bytes.push(6);
            bytes.extend_from_slice(&ip.octets());
        }
    }
    debug_assert!(bytes.len() <= HANDLE_MAX_BYTES);
    bytes
}

pub(super) fn decode_handle(bytes: &[u8]) -> Result<Handle> {
    let bad = |reason: String| Error::Malformed { what: "socket listen handle", reason };
    if bytes.len() < 18 || bytes[..4] != PROTOCOL {
        return Err(bad("not a socket-net handle of this version".into()));
    }
    let magic = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    let streams = Streams { threads: usize::from(bytes[12]), sockets: usize::from(bytes[13]) };
    if !streams.is_valid() {
        return Err(bad(format!("{} helper threads and {} data sockets (at most {MAX_THREADS} threads, {MAX_DATA_SOCKETS} sockets, the same number on each thread)", streams.threads, streams.sockets)));
    }
    let cleared = match bytes[14] {
        0 => false,
        1 => true,
        flags => return Err(bad(format!("unknown flags {flags:#x}"))),
    };
    let port = u16::from_le_bytes([bytes[15], bytes[16]]);
    let ip = match (bytes[17], &bytes[18..]) {
        (4, rest) if rest.len() >= 4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&rest[..4]).expect("4 bytes"))),
        (6, rest) if rest.len() >= 16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&rest[..16]).expect("16 bytes"))),
        _ => return Err(bad("bad address family or length".into())),
    };
    Ok(Handle { addr: SocketAddr::new(ip, port), magic, streams, cleared })
}

/// What a connection says first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Greeting {
    pub magic: u64,
    /// A random number naming the connecting side's comm.
    pub comm: u64,
    /// 0: the control connection; 1 ..= `sockets`: data connection `number - 1`.
    pub number: u8,
    pub sockets: u8,
}

impl Greeting {
    pub(super) fn encode(&self) -> [u8; GREETING_BYTES] {
        let mut bytes = [0u8; GREETING_BYTES];
        bytes[..4].copy_from_slice(&PROTOCOL);
        bytes[4..12].copy_from_slice(&self.magic.to_le_bytes());
        bytes[12..20].copy_from_slice(&self.comm.to_le_bytes());
        bytes[20] = self.number;
        bytes[21] = self.sockets;
        bytes
    }

    fn decode(bytes: &[u8; GREETING_BYTES], magic: u64) -> std::result::Result<Greeting, String> {
        if bytes[..4] != PROTOCOL || bytes[4..12] != magic.to_le_bytes() {
            return Err("wrong greeting (not the peer this handle was given to)".into());
        }
        let comm = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        Ok(Greeting { magic, comm, number: bytes[20], sockets: bytes[21] })
    }
}

/// A comm's connections being made: the control connection and its data connections, all
/// at once.
pub(super) struct Connecting {
    addr: SocketAddr,
    started: Instant,
    attempts: Vec<Attempt>,
}

/// One connection being made.
struct Attempt {
    socket: Socket,
    connected: bool,
    greeting: [u8; GREETING_BYTES],
    written: usize,
}

impl Connecting {
    /// Starts the connections to `handle` from the device's address `local`: each bound to
    /// it (when of the same family), so that their traffic leaves by that device where the
    /// host routes by source address (rails), as an RDMA NIC's does; each with `buffers`.
    pub(super) fn start(local: IpAddr, handle: &Handle, buffers: SocketBuffers) -> Result<Connecting> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| Error::io("naming a comm", std::io::Error::other(e.to_string())))?;
        let comm = u64::from_le_bytes(random);
        let sockets = handle.streams.sockets as u8;
        let attempts = (0..=sockets)
            .map(|number| Attempt::start(local, handle.addr, buffers, Greeting { magic: handle.magic, comm, number, sockets }))
            .collect::<Result<Vec<_>>>()?;
        Ok(Connecting { addr: handle.addr, started: Instant::now(), attempts })
    }

    /// Advances every connection; true once all are connected and greeted.
    pub(super) fn progress(&mut self) -> Result<bool> {
        let mut done = true;
        for attempt in &mut self.attempts {
            done &= attempt.progress(self.addr)?;
        }
        if !done && self.started.elapsed() > CONNECT_TIMEOUT {
            return Err(Error::Timeout { what: "a comm's TCP connections", waited: self.started.elapsed() });
        }
        Ok(done)
    }

    /// The control connection and the data connections, in order.
    pub(super) fn into_sockets(self) -> (Socket, Vec<Socket>) {
        let mut sockets = self.attempts.into_iter().map(|attempt| attempt.socket);
        let control = sockets.next().expect("a comm has a control connection");
        (control, sockets.collect())
    }
}

impl Attempt {
    fn start(local: IpAddr, addr: SocketAddr, buffers: SocketBuffers, greeting: Greeting) -> Result<Attempt> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(|e| Error::io("creating a socket", e))?;
        if local.is_ipv4() == addr.is_ipv4() && !local.is_unspecified() && local.is_loopback() == addr.ip().is_loopback() {
            socket.bind(&SocketAddr::new(local, 0).into()).map_err(|e| Error::io(format!("binding a connection to {addr} to the device's address {local}"), e))?;
        }
        socket.set_nonblocking(true).map_err(|e| Error::io("making a socket non-blocking", e))?;
        socket.set_tcp_nodelay(true).map_err(|e| Error::io("setting TCP_NODELAY", e))?;
        buffers.apply(&socket)?;
        let connected = match socket.connect(&addr.into()) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
            Err(e) => return Err(Error::io(format!("connecting to {addr}"), e)),
        };
        Ok(Attempt { socket, connected, greeting: greeting.encode(), written: 0 })
    }

    /// Advances the connection; true once connected and greeted.
    fn progress(&mut self, addr: SocketAddr) -> Result<bool> {
        if !self.connected {
            if let Some(e) = self.socket.take_error().map_err(|e| Error::io("reading a socket's error", e))? {
                return Err(Error::io(format!("connecting to {addr}"), e));
            }
            match self.socket.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Ok(false),
                Err(e) => return Err(Error::io(format!("connecting to {addr}"), e)),
            }
        }
        while self.written < GREETING_BYTES {
            match self.socket.send_with_flags(&self.greeting[self.written..], libc::MSG_NOSIGNAL) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(format!("greeting {addr}"), e)),
            }
        }
        Ok(true)
    }
}

/// What a listen comm holds.
pub(super) struct Listening {
    listener: TcpListener,
    magic: u64,
    streams: Streams,
    cleared: bool,
    buffers: SocketBuffers,
    arriving: VecDeque<Arriving>,
    groups: VecDeque<Group>,
}

/// An accepted connection that has not greeted yet.
struct Arriving {
    socket: Socket,
    peer: SocketAddr,
    since: Instant,
    greeting: [u8; GREETING_BYTES],
    read: usize,
}

/// The greeted connections of one comm, by number.
struct Group {
    comm: u64,
    since: Instant,
    connections: Vec<Option<(Socket, SocketAddr)>>,
}

/// A comm whose connections all arrived: the control connection, the data connections in
/// order, and the peer's address (its control connection's).
pub(super) struct Accepted {
    pub control: Socket,
    pub data: Vec<Socket>,
    pub peer: SocketAddr,
}

impl Listening {
    /// Listens on `ip` for comms that move their data as `streams` says, receiver-driven
    /// when `cleared`, their connections given `buffers` once accepted.
    pub(super) fn bind(ip: IpAddr, streams: Streams, cleared: bool, buffers: SocketBuffers) -> Result<(Handle, Listening)> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| Error::io(format!("listening on {ip}"), e))?;
        listener.set_nonblocking(true).map_err(|e| Error::io("making the listener non-blocking", e))?;
        let addr = listener.local_addr().map_err(|e| Error::io("reading the listener's address", e))?;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| Error::io("choosing a magic", std::io::Error::other(e.to_string())))?;
        let magic = u64::from_le_bytes(random);
        let listening = Listening { listener, magic, streams, cleared, buffers, arriving: VecDeque::new(), groups: VecDeque::new() };
        Ok((Handle { addr, magic, streams, cleared }, listening))
    }

    /// How this listener's comms move their data.
    pub(super) fn streams(&self) -> Streams {
        self.streams
    }

    /// Whether this listener's comms are receiver-driven.
    pub(super) fn cleared(&self) -> bool {
        self.cleared
    }

    /// Accepts what has arrived and reads greetings; a comm once all its connections are
    /// here. Every connection dropped is passed to `refuse` with the reason.
    pub(super) fn accept(&mut self, refuse: &mut dyn FnMut(SocketAddr, &str)) -> Result<Option<Accepted>> {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    stream.set_nonblocking(true).map_err(|e| Error::io("making an accepted socket non-blocking", e))?;
                    let arriving = Arriving { socket: Socket::from(stream), peer, since: Instant::now(), greeting: [0; GREETING_BYTES], read: 0 };
                    self.arriving.push_back(arriving);
                    if self.arriving.len() > MAX_ARRIVING {
                        let oldest = self.arriving.pop_front().expect("longer than the limit");
                        refuse(oldest.peer, "too many connections waiting to greet");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("accepting", e)),
            }
        }
        let mut index = 0;
        while index < self.arriving.len() {
            match self.arriving[index].progress(self.magic) {
                Ok(None) if self.arriving[index].since.elapsed() < GREETING_TIMEOUT => index += 1,
                Ok(None) => {
                    let arriving = self.arriving.remove(index).expect("index is in range");
                    refuse(arriving.peer, "no greeting in time");
                }
                Ok(Some(greeting)) => {
                    let arriving = self.arriving.remove(index).expect("index is in range");
                    if let Some(accepted) = self.sort(arriving, greeting, refuse)? {
                        return Ok(Some(accepted));
                    }
                }
                Err(reason) => {
                    let arriving = self.arriving.remove(index).expect("index is in range");
                    refuse(arriving.peer, &reason);
                }
            }
        }
        self.expire(refuse);
        Ok(None)
    }

    /// Files a greeted connection with its comm; the comm if it is now complete.
    fn sort(&mut self, arriving: Arriving, greeting: Greeting, refuse: &mut dyn FnMut(SocketAddr, &str)) -> Result<Option<Accepted>> {
        let expected = self.streams.sockets;
        if usize::from(greeting.sockets) != expected {
            refuse(arriving.peer, &format!("its comm has {} data connections, this listener's {expected}", greeting.sockets));
            return Ok(None);
        }
        if usize::from(greeting.number) > expected {
            refuse(arriving.peer, &format!("connection number {} of a comm of {} connections", greeting.number, expected + 1));
            return Ok(None);
        }
        let position = match self.groups.iter().position(|group| group.comm == greeting.comm) {
            Some(position) => position,
            None => {
                self.groups.push_back(Group { comm: greeting.comm, since: Instant::now(), connections: (0..=expected).map(|_| None).collect() });
                if self.groups.len() > MAX_GROUPS {
                    let oldest = self.groups.pop_front().expect("longer than the limit");
                    oldest.refuse(refuse, "too many comms waiting for their connections");
                }
                self.groups.len() - 1
            }
        };
        let group = &mut self.groups[position];
        let slot = &mut group.connections[usize::from(greeting.number)];
        if slot.is_some() {
            refuse(arriving.peer, &format!("a second connection numbered {} of one comm", greeting.number));
            return Ok(None);
        }
        arriving.socket.set_tcp_nodelay(true).map_err(|e| Error::io("setting TCP_NODELAY", e))?;
        self.buffers.apply(&arriving.socket)?;
        *slot = Some((arriving.socket, arriving.peer));
        if group.connections.iter().any(Option::is_none) {
            return Ok(None);
        }
        let group = self.groups.remove(position).expect("position is in range");
        let mut connections = group.connections.into_iter().map(|slot| slot.expect("every connection is here"));
        let (control, peer) = connections.next().expect("a comm has a control connection");
        Ok(Some(Accepted { control, data: connections.map(|(socket, _)| socket).collect(), peer }))
    }

    /// Drops the comms whose connections did not all arrive in time.
    fn expire(&mut self, refuse: &mut dyn FnMut(SocketAddr, &str)) {
        let (late, waiting): (Vec<Group>, Vec<Group>) = self.groups.drain(..).partition(|group| group.since.elapsed() >= GREETING_TIMEOUT);
        self.groups.extend(waiting);
        for group in late {
            group.refuse(refuse, "the rest of its comm's connections did not arrive in time");
        }
    }
}

impl Group {
    fn refuse(self, refuse: &mut dyn FnMut(SocketAddr, &str), why: &str) {
        let here = self.connections.iter().filter(|slot| slot.is_some()).count();
        let reason = format!("{why} ({here} of {} here)", self.connections.len());
        for (_, peer) in self.connections.into_iter().flatten() {
            refuse(peer, &reason);
        }
    }
}

impl Arriving {
    /// Reads the greeting; it once complete and right, an error if it is wrong.
    fn progress(&mut self, magic: u64) -> std::result::Result<Option<Greeting>, String> {
        while self.read < GREETING_BYTES {
            match (&self.socket).read(&mut self.greeting[self.read..]) {
                Ok(0) => return Err("closed before greeting".into()),
                Ok(n) => self.read += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading its greeting: {e}")),
            }
        }
        Greeting::decode(&self.greeting, magic).map(Some)
    }
}
