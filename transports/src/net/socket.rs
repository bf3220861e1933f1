//! A [`Net`] over TCP, on any interface address (loopback in tests).
//!
//! Everything is non-blocking and progressed by the caller's calls: `connect` and `accept`
//! advance their handshakes, and `test` moves a comm's queued bytes. The net starts no
//! threads, so a proxy engine drives many comms from its one progress thread (as NCCL's
//! proxy drives its socket plugin, minus the plugin's helper threads: one TCP connection
//! per comm is enough for loopback and for the runtime's tests).
//!
//! Handshake: the listen handle carries the listener's address and a random magic; the
//! connecting side greets with that magic. A connection whose greeting is wrong, late or
//! missing is logged and dropped, and counted in [`Stats::strangers_refused`]; it never
//! disturbs the peer that was expected.
//!
//! `max_recvs` (how many buffers one `irecv` may carry) is 1 by default, like NCCL's socket
//! transport, and configurable ([`SocketNet::with_max_recvs`]) so that the proxy engine's
//! grouped receives can be tested without an IB NIC; [`SocketNet::stats`] counts them.
//!
//! Devices are interface addresses ([`SocketDevice`]): one for [`SocketNet::new`], one per
//! interface for [`SocketNet::with_devices`] (as NCCL's socket transport makes a device of
//! each interface `NCCL_SOCKET_IFNAME` allows). A listen handle carries its device's address,
//! which a peer reaches through its host's routes; a connection is made from its device's
//! address (bound to it), so that hosts routing by source address send it out of that
//! device. Handles may
//! arrive padded with anything (NCCL passes 128-byte buffers): only their first bytes count.

mod stream;

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::lent::{LentBuffer, LentBytes};
use super::{
    CommConfig, Context, DeviceOffload, ListenComm, MemoryKind, MrHandle, Net, NetProperties, Opaque, PointerSupport, RecvBuffer, RecvComm, Request, SendComm,
    HANDLE_MAX_BYTES, MAX_MESSAGE_BYTES, MAX_REQUESTS,
};
use crate::{Error, Result};
use stream::{RecvState, SendState};

/// First bytes of listen handles and greetings: the format's name and version.
const PROTOCOL: [u8; 4] = *b"OXS1";
const GREETING_BYTES: usize = 12;
/// How long a connection being made may take before `connect` gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an accepted connection may take to greet before it is dropped.
const GREETING_TIMEOUT: Duration = Duration::from_secs(10);
/// Accepted connections waiting for their greeting; beyond this the oldest is dropped, so
/// that a flood of strangers cannot grow memory without bound.
const MAX_ARRIVING: usize = 64;

/// TCP on one or more interface addresses.
pub struct SocketNet {
    devices: Vec<SocketDevice>,
    max_recvs: usize,
    stats: Arc<Stats>,
}

/// One device of a socket net: an interface address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketDevice {
    /// What properties report: the interface's name.
    pub name: String,
    pub ip: IpAddr,
    pub speed_mbps: u32,
    /// The sysfs path of the interface's PCI device; `None` for virtual interfaces.
    pub pci_path: Option<String>,
}

/// Speed reported for interfaces whose speed sysfs does not know (loopback), as NCCL's
/// socket transport does.
const DEFAULT_SPEED_MBPS: u32 = 10_000;

impl SocketDevice {
    /// A device named after its address, with the default speed.
    pub fn address(ip: IpAddr) -> SocketDevice {
        SocketDevice { name: format!("socket:{ip}"), ip, speed_mbps: DEFAULT_SPEED_MBPS, pci_path: None }
    }

    /// The device of interface `name` at `ip`: its speed (`/sys/class/net/<name>/speed`)
    /// and PCI device from sysfs, or the default speed and none where sysfs has nothing.
    pub fn interface(name: &str, ip: IpAddr) -> SocketDevice {
        let sysfs = std::path::Path::new("/sys/class/net").join(name);
        let speed = std::fs::read_to_string(sysfs.join("speed")).ok().and_then(|text| text.trim().parse::<i64>().ok());
        let speed_mbps = speed.and_then(|mbps| u32::try_from(mbps).ok()).filter(|&mbps| mbps > 0).unwrap_or(DEFAULT_SPEED_MBPS);
        let pci_path = std::fs::canonicalize(sysfs.join("device")).ok().map(|path| path.to_string_lossy().into_owned());
        SocketDevice { name: name.to_string(), ip, speed_mbps, pci_path }
    }
}

/// What a communicator's context holds: connections being made, by listen handle, until
/// `connect` returns them.
#[derive(Default)]
struct SocketContext {
    connecting: Mutex<HashMap<Vec<u8>, Connecting>>,
}

/// Counters of what the net did, for tests and for checking that receives were grouped.
#[derive(Debug, Default)]
pub struct Stats {
    pub isend_calls: AtomicU64,
    pub irecv_calls: AtomicU64,
    /// Buffers over all `irecv` calls.
    pub irecv_buffers: AtomicU64,
    /// `irecv` calls that carried more than one buffer.
    pub irecv_grouped: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Accepted connections dropped for a wrong, late or missing greeting.
    pub strangers_refused: AtomicU64,
}

/// A copy of [`Stats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub isend_calls: u64,
    pub irecv_calls: u64,
    pub irecv_buffers: u64,
    pub irecv_grouped: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub strangers_refused: u64,
}

impl Stats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StatsSnapshot {
            isend_calls: load(&self.isend_calls),
            irecv_calls: load(&self.irecv_calls),
            irecv_buffers: load(&self.irecv_buffers),
            irecv_grouped: load(&self.irecv_grouped),
            bytes_sent: load(&self.bytes_sent),
            bytes_received: load(&self.bytes_received),
            strangers_refused: load(&self.strangers_refused),
        }
    }
}

impl SocketNet {
    /// A net on interface address `ip`, one receive per `irecv` (as NCCL's socket transport).
    pub fn new(ip: IpAddr) -> SocketNet {
        SocketNet::with_max_recvs(ip, 1)
    }

    /// A net that accepts up to `max_recvs` buffers per `irecv` (at least 1).
    pub fn with_max_recvs(ip: IpAddr, max_recvs: usize) -> SocketNet {
        SocketNet::with_devices(vec![SocketDevice::address(ip)], max_recvs)
    }

    /// A net with one device per entry of `devices`, each taking up to `max_recvs` buffers
    /// per `irecv` (at least 1).
    pub fn with_devices(devices: Vec<SocketDevice>, max_recvs: usize) -> SocketNet {
        SocketNet { devices, max_recvs: max_recvs.max(1), stats: Arc::default() }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn device(&self, device: usize) -> Result<&SocketDevice> {
        self.devices.get(device).ok_or_else(|| Error::InvalidArgument(format!("socket device {device} (there are {})", self.devices.len())))
    }
}

/// What a listen comm holds.
struct Listening {
    listener: TcpListener,
    magic: u64,
    arriving: VecDeque<Arriving>,
}

/// An accepted connection that has not greeted yet.
struct Arriving {
    socket: Socket,
    peer: SocketAddr,
    since: Instant,
    greeting: [u8; GREETING_BYTES],
    read: usize,
}

/// A connection being made.
struct Connecting {
    socket: Socket,
    addr: SocketAddr,
    started: Instant,
    connected: bool,
    greeting: [u8; GREETING_BYTES],
    written: usize,
}

/// What a request holds: its comm's state, its id there, and its result once known.
enum Pending {
    Send { state: Arc<Mutex<SendState>>, id: u64, len: usize },
    Recv { state: Arc<Mutex<RecvState>>, id: u64, sizes: Option<Vec<usize>> },
}

/// A registration: the socket net reads and writes host memory as it is, so this only
/// records what was registered.
#[allow(dead_code)] // kept for debugging output
#[derive(Debug)]
struct Registration {
    data: usize,
    len: usize,
}

impl Net for SocketNet {
    fn name(&self) -> &str {
        "Socket"
    }

    fn init(&self, _comm_id: u64, _config: &CommConfig) -> Result<Context> {
        Ok(Context::new(SocketContext::default()))
    }

    fn finalize(&self, context: Context) -> Result<()> {
        // Dropping the attempts closes their sockets.
        drop(context.into_inner::<SocketContext>()?);
        Ok(())
    }

    fn devices(&self) -> Result<usize> {
        Ok(self.devices.len())
    }

    fn properties(&self, device: usize) -> Result<NetProperties> {
        let SocketDevice { name, speed_mbps, pci_path, .. } = self.device(device)?.clone();
        Ok(NetProperties {
            name,
            pci_path,
            // Devices with one guid share a port: each interface is its own.
            guid: device as u64,
            ptr_support: PointerSupport { host: true, cuda: false, dmabuf: false },
            reg_is_global: false,
            force_flush: false,
            speed_mbps,
            port: 0,
            latency_us: 0.0,
            max_comms: 65536,
            max_recvs: self.max_recvs,
            offload: DeviceOffload::Host,
            max_p2p_bytes: MAX_MESSAGE_BYTES,
            max_coll_bytes: MAX_MESSAGE_BYTES,
        })
    }

    fn listen(&self, context: &Context, device: usize) -> Result<(Vec<u8>, ListenComm)> {
        context.get::<SocketContext>()?;
        let ip = self.device(device)?.ip;
        let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| Error::io(format!("listening on {ip}"), e))?;
        listener.set_nonblocking(true).map_err(|e| Error::io("making the listener non-blocking", e))?;
        let addr = listener.local_addr().map_err(|e| Error::io("reading the listener's address", e))?;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| Error::io("choosing a magic", std::io::Error::other(e.to_string())))?;
        let magic = u64::from_le_bytes(random);
        Ok((encode_handle(addr, magic), Opaque::new(Listening { listener, magic, arriving: VecDeque::new() })))
    }

    fn connect(&self, context: &Context, device: usize, handle: &[u8]) -> Result<Option<SendComm>> {
        let local = self.device(device)?.ip;
        let (addr, magic) = decode_handle(handle)?;
        let mut connecting = lock(&context.get::<SocketContext>()?.connecting, "the communicator's pending connections")?;
        let mut attempt = match connecting.remove(handle) {
            Some(attempt) => attempt,
            None => Connecting::start(local, addr, magic)?,
        };
        // On error the attempt is dropped: the next call starts afresh.
        match attempt.progress()? {
            true => {
                let state = SendState::new(attempt.socket, self.stats.clone());
                Ok(Some(Opaque::new(Arc::new(Mutex::new(state)))))
            }
            false => {
                connecting.insert(handle.to_vec(), attempt);
                Ok(None)
            }
        }
    }

    fn accept(&self, listen: &mut ListenComm) -> Result<Option<RecvComm>> {
        let listening = listen.get::<Listening>("listen comm")?;
        loop {
            match listening.listener.accept() {
                Ok((stream, peer)) => {
                    stream.set_nonblocking(true).map_err(|e| Error::io("making an accepted socket non-blocking", e))?;
                    let arriving = Arriving { socket: Socket::from(stream), peer, since: Instant::now(), greeting: [0; GREETING_BYTES], read: 0 };
                    listening.arriving.push_back(arriving);
                    if listening.arriving.len() > MAX_ARRIVING {
                        let oldest = listening.arriving.pop_front().expect("longer than the limit");
                        self.refuse(&oldest, "too many connections waiting to greet");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("accepting", e)),
            }
        }
        let mut index = 0;
        while index < listening.arriving.len() {
            let arriving = &mut listening.arriving[index];
            match arriving.progress(listening.magic) {
                Ok(true) => {
                    let arriving = listening.arriving.remove(index).expect("index is in range");
                    arriving.socket.set_tcp_nodelay(true).map_err(|e| Error::io("setting TCP_NODELAY", e))?;
                    let state = RecvState::new(arriving.socket, self.stats.clone());
                    return Ok(Some(Opaque::new(Arc::new(Mutex::new(state)))));
                }
                Ok(false) if arriving.since.elapsed() < GREETING_TIMEOUT => index += 1,
                Ok(false) => {
                    let arriving = listening.arriving.remove(index).expect("index is in range");
                    self.refuse(&arriving, "no greeting in time");
                }
                Err(reason) => {
                    let arriving = listening.arriving.remove(index).expect("index is in range");
                    self.refuse(&arriving, &reason);
                }
            }
        }
        Ok(None)
    }

    fn reg_mr(&self, _comm: &mut Opaque, data: *mut u8, len: usize, kind: MemoryKind) -> Result<MrHandle> {
        match kind {
            MemoryKind::Host => Ok(Opaque::new(Registration { data: data as usize, len })),
            MemoryKind::Cuda => Err(Error::Unsupported("the socket net moves host memory only".into())),
        }
    }

    fn dereg_mr(&self, _comm: &mut Opaque, handle: MrHandle) -> Result<()> {
        handle.get_ref::<Registration>("memory registration")?;
        Ok(())
    }

    unsafe fn isend(&self, comm: &mut SendComm, data: *const u8, len: usize, tag: u32, _handle: &MrHandle) -> Result<Option<Request>> {
        if len > MAX_MESSAGE_BYTES {
            return Err(Error::InvalidArgument(format!("message of {len} bytes (at most {MAX_MESSAGE_BYTES})")));
        }
        let state = comm.get::<Arc<Mutex<SendState>>>("send comm")?.clone();
        let mut send = lock(&state, "send comm")?;
        // A grouped receive takes max_recvs messages per request, so the sending side keeps
        // that many times more in flight (the multi-receive contract).
        if send.queued() >= MAX_REQUESTS * self.max_recvs {
            return Ok(None);
        }
        // SAFETY: the caller's isend contract (valid and unchanged until done) is the one
        // LentBytes::new asks for; the value lives in the comm's queue until sent.
        let data = unsafe { LentBytes::new(data, len) }?;
        let id = send.push(data, tag);
        // Start at once: small messages usually leave before the first test.
        let progress = send.progress();
        drop(send);
        progress?;
        self.stats.isend_calls.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Opaque::new(Pending::Send { state, id, len })))
    }

    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> Result<Option<Request>> {
        if buffers.is_empty() || buffers.len() > self.max_recvs {
            return Err(Error::InvalidArgument(format!("irecv of {} buffers (this net takes 1..={})", buffers.len(), self.max_recvs)));
        }
        if handles.len() != buffers.len() {
            return Err(Error::InvalidArgument(format!("irecv of {} buffers with {} registrations", buffers.len(), handles.len())));
        }
        let state = comm.get::<Arc<Mutex<RecvState>>>("receive comm")?.clone();
        let mut recv = lock(&state, "receive comm")?;
        if recv.queued() >= MAX_REQUESTS {
            return Ok(None);
        }
        let mut lent = Vec::with_capacity(buffers.len());
        for buffer in buffers {
            // SAFETY: the caller's irecv contract (valid and untouched until done) is the one
            // LentBuffer::new asks for; the value lives in the comm's queue until filled.
            lent.push((unsafe { LentBuffer::new(buffer.data, buffer.len) }?, buffer.tag));
        }
        let id = recv.push(lent);
        drop(recv);
        self.stats.irecv_calls.fetch_add(1, Ordering::Relaxed);
        self.stats.irecv_buffers.fetch_add(buffers.len() as u64, Ordering::Relaxed);
        if buffers.len() > 1 {
            self.stats.irecv_grouped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Opaque::new(Pending::Recv { state, id, sizes: None })))
    }

    fn test(&self, request: &mut Request) -> Result<Option<Vec<usize>>> {
        match request.get::<Pending>("request")? {
            Pending::Send { state, id, len } => {
                let mut send = lock(state, "send comm")?;
                if !send.is_done(*id) {
                    send.progress()?;
                }
                Ok(send.is_done(*id).then(|| vec![*len]))
            }
            Pending::Recv { state, id, sizes } => {
                if sizes.is_none() {
                    let mut recv = lock(state, "receive comm")?;
                    // A request completed before a later failure still reports its sizes.
                    let progress = recv.progress();
                    *sizes = recv.take_completed(*id);
                    if sizes.is_none() {
                        progress?;
                    }
                }
                Ok(sizes.clone())
            }
        }
    }

    fn close_send(&self, comm: SendComm) -> Result<()> {
        drop(comm);
        Ok(())
    }

    fn close_recv(&self, comm: RecvComm) -> Result<()> {
        drop(comm);
        Ok(())
    }

    fn close_listen(&self, comm: ListenComm) -> Result<()> {
        drop(comm);
        Ok(())
    }
}

impl SocketNet {
    fn refuse(&self, arriving: &Arriving, reason: &str) {
        tracing::warn!(target: "oxccl::net", "dropped a connection from {}: {reason}", arriving.peer);
        self.stats.strangers_refused.fetch_add(1, Ordering::Relaxed);
    }
}

impl Connecting {
    /// A connection to `addr` from the device's address `local`: bound to it (when of the
    /// same family), so that its traffic leaves by that device where the host routes by
    /// source address (rails), as an RDMA NIC's does.
    fn start(local: IpAddr, addr: SocketAddr, magic: u64) -> Result<Connecting> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(|e| Error::io("creating a socket", e))?;
        if local.is_ipv4() == addr.is_ipv4() && !local.is_unspecified() && local.is_loopback() == addr.ip().is_loopback() {
            socket.bind(&SocketAddr::new(local, 0).into()).map_err(|e| Error::io(format!("binding a connection to {addr} to the device's address {local}"), e))?;
        }
        socket.set_nonblocking(true).map_err(|e| Error::io("making a socket non-blocking", e))?;
        socket.set_tcp_nodelay(true).map_err(|e| Error::io("setting TCP_NODELAY", e))?;
        let connected = match socket.connect(&addr.into()) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
            Err(e) => return Err(Error::io(format!("connecting to {addr}"), e)),
        };
        Ok(Connecting { socket, addr, started: Instant::now(), connected, greeting: greeting(magic), written: 0 })
    }

    /// Advances the handshake; true once connected and greeted.
    fn progress(&mut self) -> Result<bool> {
        if !self.connected {
            if let Some(e) = self.socket.take_error().map_err(|e| Error::io("reading a socket's error", e))? {
                return Err(Error::io(format!("connecting to {}", self.addr), e));
            }
            match self.socket.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                    if self.started.elapsed() > CONNECT_TIMEOUT {
                        return Err(Error::Timeout { what: "a TCP connection", waited: self.started.elapsed() });
                    }
                    return Ok(false);
                }
                Err(e) => return Err(Error::io(format!("connecting to {}", self.addr), e)),
            }
        }
        while self.written < GREETING_BYTES {
            match self.socket.send_with_flags(&self.greeting[self.written..], libc::MSG_NOSIGNAL) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(format!("greeting {}", self.addr), e)),
            }
        }
        Ok(true)
    }
}

impl Arriving {
    /// Reads the greeting; true once it is complete and right, an error if it is wrong.
    fn progress(&mut self, magic: u64) -> std::result::Result<bool, String> {
        while self.read < GREETING_BYTES {
            match (&self.socket).read(&mut self.greeting[self.read..]) {
                Ok(0) => return Err("closed before greeting".into()),
                Ok(n) => self.read += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading its greeting: {e}")),
            }
        }
        if self.greeting != greeting(magic) {
            return Err("wrong greeting (not the peer this handle was given to)".into());
        }
        Ok(true)
    }
}

fn greeting(magic: u64) -> [u8; GREETING_BYTES] {
    let mut bytes = [0u8; GREETING_BYTES];
    bytes[..4].copy_from_slice(&PROTOCOL);
    bytes[4..].copy_from_slice(&magic.to_le_bytes());
    bytes
}

/// Handle bytes: protocol (4), magic (u64 LE), port (u16 LE), family (4 or 6), address;
/// whatever follows is padding.
fn encode_handle(addr: SocketAddr, magic: u64) -> Vec<u8> {
    let mut handle = PROTOCOL.to_vec();
    handle.extend_from_slice(&magic.to_le_bytes());
    handle.extend_from_slice(&addr.port().to_le_bytes());
    match addr.ip() {
        IpAddr::V4(ip) => {
            handle.push(4);
            handle.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            handle.push(6);
            handle.extend_from_slice(&ip.octets());
        }
    }
    debug_assert!(handle.len() <= HANDLE_MAX_BYTES);
    handle
}

fn decode_handle(handle: &[u8]) -> Result<(SocketAddr, u64)> {
    let bad = |reason: &str| Error::Malformed { what: "socket listen handle", reason: reason.into() };
    if handle.len() < 15 || handle[..4] != PROTOCOL {
        return Err(bad("not a socket-net handle of this version"));
    }
    let magic = u64::from_le_bytes(handle[4..12].try_into().expect("8 bytes"));
    let port = u16::from_le_bytes([handle[12], handle[13]]);
    let ip = match (handle[14], &handle[15..]) {
        (4, rest) if rest.len() >= 4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&rest[..4]).expect("4 bytes"))),
        (6, rest) if rest.len() >= 16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&rest[..16]).expect("16 bytes"))),
        _ => return Err(bad("bad address family or length")),
    };
    Ok((SocketAddr::new(ip, port), magic))
}

fn lock<'a, T>(mutex: &'a Mutex<T>, what: &str) -> Result<MutexGuard<'a, T>> {
    // A panic while a comm was locked may have left it half-updated: fail the comm.
    mutex.lock().map_err(|_| Error::Closed(format!("{what} is unusable after a panic")))
}

#[cfg(test)]
mod tests;
