//! A [`Net`] over TCP, on any interface address (loopback in tests).
//!
//! Every call is non-blocking. `connect` and `accept` advance their handshakes; `test`
//! writes and reads a comm's control connection. Messages of 64 KiB and more go instead, in
//! pieces, over the comm's data connections, moved by helper threads of the comm
//! ([`helpers`]), as in NCCL's socket transport: `NCCL_SOCKET_NTHREADS` threads, each with
//! `NCCL_NSOCKS_PERTHREAD` data connections ([`StreamSettings`]; the listening side's
//! settings count, and travel in its handle). With 0 threads a comm is its control
//! connection alone and starts no threads: whoever calls `test` moves every byte. Every
//! connection gets the SO_SNDBUF and SO_RCVBUF asked for ([`SocketBuffers`],
//! `NCCL_SOCKET_SNDBUF` and `NCCL_SOCKET_RCVBUF`), each end its own.
//!
//! Handshake ([`handshake`]): the listen handle carries the listener's address, a random
//! magic and its streams; each connection of a comm greets with that magic, its comm's
//! number and its own. A connection whose greeting is wrong, late or missing, or that does
//! not fit its comm, is logged and dropped, and counted in [`Stats::strangers_refused`]; it
//! never disturbs the peer that was expected.
//!
//! `max_recvs` (how many buffers one `irecv` may carry) is 1 by default, like NCCL's socket
//! transport, and configurable ([`SocketNet::with_max_recvs`]) so that the proxy engine's
//! grouped receives can be tested without an IB NIC; [`SocketNet::stats`] counts them.
//! A comm of several senders ([`Net::listen_shared`]) taking several buffers a receive is
//! receiver-driven, as an IB NIC's: a message goes only once the receiver posted a receive
//! with its tag (`isend` answers "later" until then), so that senders of independent
//! messages may share it (see [`stream`]); every comm is, with
//! [`SocketNet::receiver_driven`] (the exported plugin: NCCL's PXN shares comms).
//!
//! Devices are interface addresses ([`SocketDevice`]): one for [`SocketNet::new`], one per
//! interface for [`SocketNet::with_devices`] (as NCCL's socket transport makes a device of
//! each interface `NCCL_SOCKET_IFNAME` allows). A listen handle carries its device's address,
//! which a peer reaches through its host's routes; a connection is made from its device's
//! address (bound to it), so that hosts routing by source address send it out of that
//! device. Handles may arrive padded with anything (NCCL passes 128-byte buffers): only
//! their first bytes count.

mod devices;
mod handshake;
mod helpers;
mod stream;
mod streams;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::lent::{LentBuffer, LentBytes};
use super::{
    CommConfig, Context, DeviceOffload, ListenComm, MemoryKind, MrHandle, Net, NetProperties, Opaque, PointerSupport, RecvBuffer, RecvComm, Request, SendComm,
    MAX_MESSAGE_BYTES, MAX_REQUESTS,
};
use crate::{Error, Result};
pub use devices::{choose_devices, MAX_DEVICES};
use handshake::{Accepted, Connecting, Listening};
pub use handshake::SocketBuffers;
use helpers::{DataPath, Direction};
use stream::{RecvState, SendState};
pub use streams::{StreamSettings, Streams, MAX_DATA_SOCKETS, MAX_THREADS, MIN_CORES_FOR_HELPERS};

/// TCP on one or more interface addresses.
pub struct SocketNet {
    devices: Vec<SocketDevice>,
    /// How each device's listeners ask their comms to move data.
    streams: Vec<Streams>,
    max_recvs: usize,
    /// Whether every comm is receiver-driven when `max_recvs` > 1 (the exported plugin:
    /// NCCL's nets of several receives are), or only shared ones ([`Net::listen_shared`]).
    receiver_driven: bool,
    /// SO_SNDBUF and SO_RCVBUF of every connection this net makes or accepts.
    buffers: SocketBuffers,
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
    /// The PCI vendor id of the interface's device as sysfs writes it (`0x1d0f`); `None`
    /// for virtual interfaces. Picks NCCL's cloud defaults of [`StreamSettings`].
    pub vendor: Option<String>,
}

/// Speed reported for interfaces whose speed sysfs does not know (loopback), as NCCL's
/// socket transport does.
const DEFAULT_SPEED_MBPS: u32 = 10_000;

impl SocketDevice {
    /// A device named after its address, with the default speed.
    pub fn address(ip: IpAddr) -> SocketDevice {
        SocketDevice { name: format!("socket:{ip}"), ip, speed_mbps: DEFAULT_SPEED_MBPS, pci_path: None, vendor: None }
    }

    /// The device of interface `name` at `ip`: its speed (`/sys/class/net/<name>/speed`),
    /// PCI device and vendor from sysfs, or the default speed and none where sysfs has
    /// nothing.
    pub fn interface(name: &str, ip: IpAddr) -> SocketDevice {
        let sysfs = std::path::Path::new("/sys/class/net").join(name);
        let speed = std::fs::read_to_string(sysfs.join("speed")).ok().and_then(|text| text.trim().parse::<i64>().ok());
        let speed_mbps = speed.and_then(|mbps| u32::try_from(mbps).ok()).filter(|&mbps| mbps > 0).unwrap_or(DEFAULT_SPEED_MBPS);
        let pci_path = std::fs::canonicalize(sysfs.join("device")).ok().map(|path| path.to_string_lossy().into_owned());
        let vendor = std::fs::read_to_string(sysfs.join("device/vendor")).ok().map(|text| text.trim().to_string());
        SocketDevice { name: name.to_string(), ip, speed_mbps, pci_path, vendor }
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
    /// Accepted connections dropped for a wrong, late or missing greeting, or one that
    /// does not fit its comm.
    pub strangers_refused: AtomicU64,
    /// Helper threads started (each comm starts its own when its first piece is dealt).
    pub helper_threads: AtomicU64,
    /// Wake-ups of sleeping helper threads for pieces dealt to them.
    pub helper_wakeups: AtomicU64,
    /// Bytes of data sockets moved by the comm's caller while its helper slept.
    pub bytes_moved_by_caller: AtomicU64,
    /// `isend` calls answered "later" on a receiver-driven comm: no notice cleared the
    /// message yet and it may not go ahead of one.
    pub sends_held: AtomicU64,
    /// Messages that arrived before a receive with a free buffer of their tag, kept by the
    /// receiver (their bytes copied twice).
    pub early_messages: AtomicU64,
    pub early_bytes: AtomicU64,
    /// Reads of a receiver-driven comm's control socket for notices (system calls), made
    /// by `isend` when neither a notice already read nor room ahead lets a message go.
    pub notice_reads: AtomicU64,
    /// Times a receiver-driven comm's sender, its room ahead used up, asked the receiver
    /// for the notices it held back (a header on the control socket).
    pub asks: AtomicU64,
    /// Writes of notices by a receiver-driven comm's receiver (system calls; it holds back
    /// those whose messages may go ahead of them to write several at once).
    pub notice_writes: AtomicU64,
    /// Bytes of message bodies read into a receive comm's stage with a header and then
    /// copied into their buffers (the rest of a body is read straight into its buffer).
    pub staged_body_bytes: AtomicU64,
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
    pub helper_threads: u64,
    pub helper_wakeups: u64,
    pub bytes_moved_by_caller: u64,
    pub sends_held: u64,
    pub early_messages: u64,
    pub early_bytes: u64,
    pub notice_reads: u64,
    pub asks: u64,
    pub notice_writes: u64,
    pub staged_body_bytes: u64,
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
            helper_threads: load(&self.helper_threads),
            helper_wakeups: load(&self.helper_wakeups),
            bytes_moved_by_caller: load(&self.bytes_moved_by_caller),
            sends_held: load(&self.sends_held),
            early_messages: load(&self.early_messages),
            early_bytes: load(&self.early_bytes),
            notice_reads: load(&self.notice_reads),
            asks: load(&self.asks),
            notice_writes: load(&self.notice_writes),
            staged_body_bytes: load(&self.staged_body_bytes),
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
    /// per `irecv` (at least 1), its streams the automatic ones ([`StreamSettings`]).
    pub fn with_devices(devices: Vec<SocketDevice>, max_recvs: usize) -> SocketNet {
        let streams = devices.iter().map(|device| StreamSettings::default().resolve(device.vendor.as_deref(), host_cores()).0).collect();
        SocketNet { devices, streams, max_recvs: max_recvs.max(1), receiver_driven: false, buffers: SocketBuffers::default(), stats: Arc::default() }
    }

    /// The same net with every comm receiver-driven when it takes several buffers a receive
    /// (as NCCL expects of such a net: its PXN shares comms), not only shared ones.
    pub fn receiver_driven(mut self) -> SocketNet {
        self.receiver_driven = true;
        self
    }

    /// Listens on `device`, its comms receiver-driven when `shared` or the net's are all,
    /// and several buffers a receive are taken.
    fn listen_as(&self, context: &Context, device: usize, shared: bool) -> Result<(Vec<u8>, ListenComm)> {
        context.get::<SocketContext>()?;
        let ip = self.device(device)?.ip;
        let (handle, listening) = Listening::bind(ip, self.streams[device], self.max_recvs > 1 && (shared || self.receiver_driven), self.buffers)?;
        Ok((handshake::encode_handle(&handle), Opaque::new(listening)))
    }

    /// The same net with its comms' helper threads and data sockets as `settings` say
    /// (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD); a value beyond NCCL's limits is
    /// lowered with a warning, as NCCL does.
    pub fn with_streams(mut self, settings: StreamSettings) -> SocketNet {
        self.streams = self
            .devices
            .iter()
            .map(|device| {
                let (streams, warnings) = settings.resolve(device.vendor.as_deref(), host_cores());
                for warning in warnings {
                    tracing::warn!(target: "oxccl::net", "NET/Socket: {warning}");
                }
                streams
            })
            .collect();
        if let Some(streams) = self.streams.first() {
            tracing::info!(target: "oxccl::net", "NET/Socket: {} helper thread(s) and {} data socket(s) per connection", streams.threads, streams.sockets);
        }
        self
    }

    /// The same net with `buffers` asked for every connection it makes or accepts
    /// (NCCL_SOCKET_SNDBUF, NCCL_SOCKET_RCVBUF).
    pub fn with_buffers(mut self, buffers: SocketBuffers) -> SocketNet {
        if buffers != SocketBuffers::default() {
            let say = |bytes: Option<usize>| bytes.map_or("the kernel's".to_string(), |b| format!("{b} bytes"));
            tracing::info!(target: "oxccl::net", "NET/Socket: SO_SNDBUF {} and SO_RCVBUF {} asked for each connection", say(buffers.send), say(buffers.recv));
        }
        self.buffers = buffers;
        self
    }

    /// How comms accepted on `device` move their data.
    pub fn streams(&self, device: usize) -> Result<Streams> {
        self.device(device)?;
        Ok(self.streams[device])
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn device(&self, device: usize) -> Result<&SocketDevice> {
        self.devices.get(device).ok_or_else(|| Error::InvalidArgument(format!("socket device {device} (there are {})", self.devices.len())))
    }

    fn refuse(&self, peer: SocketAddr, reason: &str) {
        tracing::warn!(target: "oxccl::net", "dropped a connection from {peer}: {reason}");
        self.stats.strangers_refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// A send comm: its state, shared with its requests. Dropping it (closing the comm) stops
/// and joins its helper threads.
struct SocketSendComm(Arc<Mutex<SendState>>);

/// A receive comm, as [`SocketSendComm`].
struct SocketRecvComm(Arc<Mutex<RecvState>>);

impl Drop for SocketSendComm {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).close();
    }
}

impl Drop for SocketRecvComm {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).close();
    }
}

/// What a request holds: its comm's state, its count of unfinished parts, and what to
/// report once done.
enum Pending {
    Send { state: Arc<Mutex<SendState>>, left: Arc<AtomicUsize>, len: usize },
    Recv { state: Arc<Mutex<RecvState>>, id: u64, left: Arc<AtomicUsize>, sizes: Option<Vec<usize>> },
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
        self.listen_as(context, device, false)
    }

    fn listen_shared(&self, context: &Context, device: usize) -> Result<(Vec<u8>, ListenComm)> {
        self.listen_as(context, device, true)
    }

    fn connect(&self, context: &Context, device: usize, handle: &[u8]) -> Result<Option<SendComm>> {
        let local = self.device(device)?.ip;
        let decoded = handshake::decode_handle(handle)?;
        let mut connecting = lock(&context.get::<SocketContext>()?.connecting, "the communicator's pending connections")?;
        let mut attempt = match connecting.remove(handle) {
            Some(attempt) => attempt,
            None => Connecting::start(local, &decoded, self.buffers)?,
        };
        // On error the attempt is dropped: the next call starts afresh.
        if !attempt.progress()? {
            connecting.insert(handle.to_vec(), attempt);
            return Ok(None);
        }
        let (control, data) = attempt.into_sockets();
        let data = self.data_path(Direction::Send, decoded.addr, data, decoded.streams);
        let state = SendState::new(control, data, self.stats.clone(), decoded.cleared);
        Ok(Some(Opaque::new(SocketSendComm(Arc::new(Mutex::new(state))))))
    }

    fn accept(&self, listen: &mut ListenComm) -> Result<Option<RecvComm>> {
        let listening = listen.get::<Listening>("listen comm")?;
        let (streams, cleared) = (listening.streams(), listening.cleared());
        let Some(Accepted { control, data, peer }) = listening.accept(&mut |peer, reason| self.refuse(peer, reason))? else {
            return Ok(None);
        };
        let data = self.data_path(Direction::Recv, peer, data, streams);
        let state = RecvState::new(control, data, self.stats.clone(), cleared);
        Ok(Some(Opaque::new(SocketRecvComm(Arc::new(Mutex::new(state))))))
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
        let state = comm.get::<SocketSendComm>("send comm")?.0.clone();
        let mut send = lock(&state, "send comm")?;
        // A grouped receive takes max_recvs messages per request, so the sending side keeps
        // that many times more in flight (the multi-receive contract).
        if send.queued() >= MAX_REQUESTS * self.max_recvs {
            return Ok(None);
        }
        if !send.clear(tag, len)? {
            self.stats.sends_held.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        // SAFETY: the caller's isend contract (valid and unchanged until done) is the one
        // LentBytes::new asks for; the value lives in the comm's queue (or its pieces in the
        // helper threads' queues) until sent, or until the comm is closed.
        let data = unsafe { LentBytes::new(data, len) }?;
        let left = send.push(data, tag)?;
        // Start at once: small messages usually leave before the first test.
        let progress = send.progress();
        drop(send);
        progress?;
        self.stats.isend_calls.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Opaque::new(Pending::Send { state, left, len })))
    }

    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> Result<Option<Request>> {
        if buffers.is_empty() || buffers.len() > self.max_recvs {
            return Err(Error::InvalidArgument(format!("irecv of {} buffers (this net takes 1..={})", buffers.len(), self.max_recvs)));
        }
        if handles.len() != buffers.len() {
            return Err(Error::InvalidArgument(format!("irecv of {} buffers with {} registrations", buffers.len(), handles.len())));
        }
        let state = comm.get::<SocketRecvComm>("receive comm")?.0.clone();
        let mut recv = lock(&state, "receive comm")?;
        if recv.queued() >= MAX_REQUESTS {
            return Ok(None);
        }
        let mut lent = Vec::with_capacity(buffers.len());
        for buffer in buffers {
            // SAFETY: the caller's irecv contract (valid and untouched until done) is the one
            // LentBuffer::new asks for; the value lives in the comm's queue (or its pieces in
            // the helper threads' queues) until filled, or until the comm is closed.
            lent.push((unsafe { LentBuffer::new(buffer.data, buffer.len) }?, buffer.tag));
        }
        let (id, left) = recv.push(lent);
        // The notice of a receiver-driven comm leaves now if it is due (its sender may wait
        // for it; a failure is the comm's, reported by `test`).
        recv.send_notices();
        drop(recv);
        self.stats.irecv_calls.fetch_add(1, Ordering::Relaxed);
        self.stats.irecv_buffers.fetch_add(buffers.len() as u64, Ordering::Relaxed);
        if buffers.len() > 1 {
            self.stats.irecv_grouped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Opaque::new(Pending::Recv { state, id, left, sizes: None })))
    }

    fn test(&self, request: &mut Request) -> Result<Option<Vec<usize>>> {
        // Acquire: a request's count reaches 0 after its bytes are in place (Release).
        match request.get::<Pending>("request")? {
            Pending::Send { state, left, len } => {
                if left.load(Ordering::Acquire) != 0 {
                    let progress = lock(state, "send comm")?.progress();
                    // A request completed before a later failure still reports done.
                    if left.load(Ordering::Acquire) != 0 {
                        progress?;
                        return Ok(None);
                    }
                }
                Ok(Some(vec![*len]))
            }
            Pending::Recv { state, id, left, sizes } => {
                if sizes.is_none() {
                    let mut recv = lock(state, "receive comm")?;
                    let progress = recv.progress();
                    if left.load(Ordering::Acquire) == 0 {
                        *sizes = recv.take_completed(*id);
                    }
                    if sizes.is_none() {
                        progress?;
                    }
                }
                Ok(sizes.clone())
            }
        }
    }

    fn close_send(&self, comm: SendComm) -> Result<()> {
        comm.get_ref::<SocketSendComm>("send comm")?;
        drop(comm);
        Ok(())
    }

    fn close_recv(&self, comm: RecvComm) -> Result<()> {
        comm.get_ref::<SocketRecvComm>("receive comm")?;
        drop(comm);
        Ok(())
    }

    fn close_listen(&self, comm: ListenComm) -> Result<()> {
        drop(comm);
        Ok(())
    }
}

impl SocketNet {
    /// The data path of a comm over `sockets` as `streams` say; none for a comm without
    /// data sockets.
    fn data_path(&self, direction: Direction, peer: SocketAddr, sockets: Vec<socket2::Socket>, streams: Streams) -> Option<DataPath> {
        (!sockets.is_empty()).then(|| DataPath::new(direction, peer, sockets, streams.threads, self.stats.clone()))
    }
}

/// The cores this process may run on.
fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn lock<'a, T>(mutex: &'a Mutex<T>, what: &str) -> Result<MutexGuard<'a, T>> {
    // A panic while a comm was locked may have left it half-updated: fail the comm.
    mutex.lock().map_err(|_| Error::Closed(format!("{what} is unusable after a panic")))
}

#[cfg(test)]
mod data_path_tests;
#[cfg(test)]
mod measurements;
#[cfg(test)]
mod tests;
