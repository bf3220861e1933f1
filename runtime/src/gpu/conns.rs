//! GPU connections: for every connection end a plan uses and this rank lacks, the memory
//! the other end writes into is allocated here and announced to the peer through the
//! bootstrap. Between ranks of one host a receiving end owns the FIFO (tail word, its own
//! counter, then the slots) in its GPU's memory; a sending end owns the head word and its
//! counter. Each side opens the other's memory: directly when both ranks are threads of
//! one process (peer access enabled between their GPUs), through CUDA IPC when they are
//! processes of one host.
//!
//! Between hosts each end is a FIFO of its own in pinned host memory mapped into its GPU
//! (oxccl_transports::fifo's layout, shared with this rank's network proxy), which the
//! proxy moves over the Net: the receiving end listens and announces the Net's handle, the
//! sending end connects to it (in the proxy thread). Only the counter is GPU memory. A Net
//! that reached GPU memory (NCCL_PTR_CUDA) could take the slots from GPU memory instead;
//! the socket Net cannot, so the slots are host memory. A send that PXN routes through a
//! rank of this host on the receiver's rail (`pxn::Rails::route`) writes instead into a
//! FIFO in a shared-memory segment that rank made (`pxn::relay`), registered with this
//! GPU; that rank's proxy sends it.
//!
//! Every rank sends all its announcements before it waits for any, so setup cannot
//! deadlock; each wait is the bootstrap's (timed, aborted by failures).

use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHashSet};

use oxccl_bootstrap::Bootstrap;
use oxccl_kernels::device::{conn, ll, DevConn};
use oxccl_transports::fifo::{self, Geometry, Region};

use super::driver::{Device, DeviceMemory, HostRegistration, IpcMemory, MappedHost};
use super::encode::End;
use crate::error::{Error, Result};
use crate::proxy::ll::LlSlots;
use crate::proxy::{Direction, Driver, NetConnection, NetLinks};
use crate::pxn::{relay, Hop, Rails};

/// Bootstrap tags of the announcements (per channel), apart from the host transports'.
const FIFO_TAG: u64 = 1 << 61;
const HEAD_TAG: u64 = (1 << 61) | (1 << 40);
const INBOX_TAG: u64 = (1 << 61) | (1 << 41);
/// Bytes before the slots of a FIFO (tail, counter; the slots start 128-byte aligned).
const HEADER: usize = 128;
/// The first byte of an announcement over the bootstrap: GPU memory to open (a [`Record`]
/// follows), or a Net listen handle.
const KIND_PEER: u8 = 1;
const KIND_NET: u8 = 2;

/// Who announces memory: the process (to tell threads of one process from processes) and
/// the host (to refuse ranks on other hosts, which the GPU backend cannot reach).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    pub pid: u32,
    pub host: u64,
}

impl Origin {
    pub fn here(host_id: &str) -> Origin {
        use std::hash::Hasher;
        let mut h = rustc_hash::FxHasher::default();
        h.write(host_id.as_bytes());
        Origin { pid: std::process::id(), host: h.finish() }
    }
}

/// One announcement: where the memory is, and how to open it.
struct Record {
    origin: Origin,
    ordinal: i32,
    ptr: u64,
    ipc: [u8; 64],
}

const RECORD_BYTES: usize = 4 + 8 + 4 + 8 + 64;

impl Record {
    fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RECORD_BYTES);
        b.extend_from_slice(&self.origin.pid.to_le_bytes());
        b.extend_from_slice(&self.origin.host.to_le_bytes());
        b.extend_from_slice(&self.ordinal.to_le_bytes());
        b.extend_from_slice(&self.ptr.to_le_bytes());
        b.extend_from_slice(&self.ipc);
        b
    }

    fn from_bytes(b: &[u8], peer: usize) -> Result<Record> {
        if b.len() != RECORD_BYTES {
            return Err(Error::transport(format!("rank {peer} sent a GPU connection record of {} bytes, expected {RECORD_BYTES}", b.len())));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Record { origin: Origin { pid: u32_at(0), host: u64_at(4) }, ordinal: u32_at(12) as i32, ptr: u64_at(16), ipc: b[24..88].try_into().expect("64 bytes") })
    }
}

/// The other end's memory, as this GPU reaches it.
enum Remote {
    /// A thread of this process: the address itself (peer access enabled).
    Direct(u64),
    /// Another process on this host.
    Ipc(IpcMemory),
}

impl Remote {
    fn ptr(&self) -> u64 {
        match self {
            Remote::Direct(p) => *p,
            Remote::Ipc(m) => m.ptr,
        }
    }
}

/// This process's connection memory that is still allocated, by address: a rank writes
/// from the host into a peer's memory (its goodbye flag, [`Connections::with_live_peer_inboxes`])
/// only while the peer's allocation is here. A rank that failed frees its memory at once,
/// without meeting its peers: a thread of this process that is its peer must not write
/// into it then (its address may already be another allocation's). Peers in other
/// processes hold IPC mappings, which keep the memory.
static ALLOCATED: LazyLock<Mutex<FxHashSet<u64>>> = LazyLock::new(Default::default);

/// Connection memory of this rank, listed in [`ALLOCATED`] while allocated.
struct Local(DeviceMemory);

impl Local {
    fn new(memory: DeviceMemory) -> Local {
        ALLOCATED.lock().insert(memory.ptr);
        Local(memory)
    }
}

impl std::ops::Deref for Local {
    type Target = DeviceMemory;

    fn deref(&self) -> &DeviceMemory {
        &self.0
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // Unlisted first (waiting for a write in progress, which holds the list), freed
        // after (the field's drop).
        ALLOCATED.lock().remove(&self.0.ptr);
    }
}

struct Opened {
    conn: DevConn,
    memory: EndMemory,
}

/// What an open connection end holds.
enum EndMemory {
    /// Between GPUs of one host. Field order: the peer's memory is closed before ours is
    /// freed.
    Peer { _remote: Remote, local: Local },
    /// Over the network: the FIFO this rank's proxy shares (freed when both let it go: the
    /// proxy's links are closed before a communicator's memory is freed), and this end's
    /// counter. A relayed send's FIFO is another rank's segment, registered with this GPU
    /// (field order: unregistered before this process unmaps it).
    Net { _registration: Option<HostRegistration>, region: Arc<Region>, counter: DeviceMemory, bytes: usize },
}

impl EndMemory {
    fn bytes(&self) -> usize {
        match self {
            EndMemory::Peer { local, .. } => local.bytes,
            EndMemory::Net { counter, bytes, .. } => counter.bytes + bytes,
        }
    }
}

/// This rank's GPU connection ends.
#[derive(Default)]
pub(crate) struct Connections {
    ends: FxHashMap<End, Opened>,
    /// The LL kernels' inboxes, by kind: the peers' as opened here, then this rank's.
    inboxes: Vec<(Inbox, Vec<Remote>, Local)>,
    /// GPUs of this process that peers live on (kept retained for peer access).
    peers: Vec<Device>,
}

/// Which LL kernel an inbox serves (each kind is set up once, at init).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inbox {
    /// The direct kernel's (small collectives).
    Direct,
    /// The point-to-point kernel's (small sends and receives).
    PointToPoint,
    /// The `gone` flags every wait watches (`DevWatch::gone`): a u32 per rank, which that
    /// rank raises when it leaves.
    Gone,
}

/// What setting up connections needs.
pub(crate) struct Setup<'a> {
    pub boot: &'a Bootstrap,
    pub device: &'a Device,
    pub origin: Origin,
    pub geometry: Geometry,
    /// Whether connections between GPUs get LL slots (calls may run LL on one host).
    pub peer_ll: bool,
    /// Which ranks share this rank's host: the others are reached over `net`.
    pub same_host: &'a [bool],
    pub net: &'a NetLinks,
    /// Which NIC each network send leaves by (a kernel's FIFO is this process's memory:
    /// no PXN relay through another rank).
    pub rails: &'a Rails,
}

impl Connections {
    /// Connects every end of `ends` this rank lacks.
    pub fn ensure(&mut self, ends: &[End], cx: &Setup) -> Result<()> {
        let new: Vec<End> = ends.iter().copied().filter(|e| !self.ends.contains_key(e)).collect();
        if new.is_empty() {
            return Ok(());
        }
        cx.device.bind()?;
        let me = cx.boot.rank() as usize;
        // Between GPUs: the header (tail, counter), the Simple slots, then the LL slots if
        // calls may run LL.
        let simple_bytes = HEADER + cx.geometry.slots * cx.geometry.slot_bytes;
        let ll_bytes = if cx.peer_ll { cx.geometry.slots * ll::SLOT_BYTES } else { 0 };
        let fifo_bytes = simple_bytes + ll_bytes;
        // Announce everything first: the memory a peer of this host opens, or the Net
        // handle a peer on another host connects to.
        let mut pending = Vec::with_capacity(new.len());
        for &end in &new {
            let link = end.link();
            if !cx.same_host[link.peer] {
                if let End::Recv(_) = end {
                    let (region, memory) = net_fifo(cx.geometry)?;
                    // A relayed sender's connection comes from its relaying rank, whose end a
                    // failure names.
                    let device = cx.rails.receive_device(me, link.channel);
                    let sender = cx.rails.carrier(link.peer, me, link.channel, false);
                    let (handle, _) = cx.net.listen(link, sender, region.clone(), Driver::Device, device, Some(memory.ll))?;
                    cx.net.record(NetConnection { from: link.peer, to: me, channel: link.channel, proxy: sender, send: false, device, nic: cx.net.device_name(device) });
                    cx.boot.send(link.peer as u32, FIFO_TAG + link.channel as u64, &[&[KIND_NET][..], &handle].concat())?;
                    pending.push(Pending::Listening(region, memory));
                } else {
                    pending.push(Pending::Connecting);
                }
                continue;
            }
            let (bytes, tag) = match end {
                End::Recv(_) => (fifo_bytes, FIFO_TAG),
                End::Send(_) => (HEADER, HEAD_TAG),
            };
            let memory = Local::new(DeviceMemory::zeroed(bytes)?);
            let ipc = memory.ipc_handle()?;
            let record = Record { origin: cx.origin, ordinal: cx.device.ordinal, ptr: memory.ptr, ipc };
            cx.boot.send(link.peer as u32, tag + link.channel as u64, &[&[KIND_PEER][..], &record.to_bytes()].concat())?;
            pending.push(Pending::Peer(memory));
        }
        // Then open what the peers announced.
        for (end, pending) in new.into_iter().zip(pending) {
            let link = end.link();
            let opened = match pending {
                Pending::Peer(memory) => {
                    let tag = match end {
                        End::Recv(_) => HEAD_TAG,
                        End::Send(_) => FIFO_TAG,
                    };
                    let record = Record::from_bytes(announced(&cx.boot.recv(link.peer as u32, tag + link.channel as u64)?, KIND_PEER, link.peer)?, link.peer)?;
                    let remote = self.open(&record, link.peer, cx)?;
                    let (mine, theirs) = (memory.ptr, remote.ptr());
                    let (slot_bytes, slots, peer) = (cx.geometry.slot_bytes as u64, cx.geometry.slots as u32, link.peer as u32);
                    // The FIFO is the receiver's memory, the head the sender's.
                    let (fifo, head) = match end {
                        End::Recv(_) => (mine, theirs),
                        End::Send(_) => (theirs, mine),
                    };
                    let (ll_slots, flags, ll_slot_bytes) = match cx.peer_ll {
                        true => (fifo + simple_bytes as u64, conn::PEER_LL, ll::SLOT_BYTES as u32),
                        false => (0, 0, 0),
                    };
                    let conn = DevConn { slots_base: fifo + HEADER as u64, tail: fifo, head, counter: mine + 8, slot_bytes, ll_slots, slots, peer, flags, ll_slot_bytes, ..DevConn::default() };
                    tracing::debug!(target: crate::log_target::P2P, "GPU {} {end:?} connected ({})", cx.device.ordinal, if matches!(remote, Remote::Direct(_)) { "same process" } else { "CUDA IPC" });
                    Opened { conn, memory: EndMemory::Peer { _remote: remote, local: memory } }
                }
                Pending::Listening(region, memory) => net_end(end, region, None, &memory, cx)?,
                Pending::Connecting => {
                    let handle = cx.boot.recv(link.peer as u32, FIFO_TAG + link.channel as u64)?;
                    let handle = announced(&handle, KIND_NET, link.peer)?;
                    // GPU links carry collectives and send/recv alike: the collectives' rule.
                    match cx.rails.route(me, link.peer, link.channel, false) {
                        Hop::Direct { device } => {
                            let (region, memory) = net_fifo(cx.geometry)?;
                            cx.net.connect(link, handle, region.clone(), Driver::Device, device, Some(memory.ll), None)?;
                            cx.net.record(NetConnection { from: me, to: link.peer, channel: link.channel, proxy: me, send: true, device, nic: cx.net.device_name(device) });
                            net_end(end, region, None, &memory, cx)?
                        }
                        Hop::Relay { proxy, device } => {
                            let region = relay::ask(cx.boot, proxy, link, handle, device, cx.geometry, ll::SLOT_BYTES, false)?;
                            let (start, bytes) = region.segment_memory().ok_or_else(|| Error::Internal("a PXN relay FIFO that is not a shared segment".into()))?;
                            // SAFETY: the segment stays mapped while `region` lives, which
                            // the end holds past the registration (EndMemory's field order).
                            let registration = unsafe { HostRegistration::new(start, bytes) }?;
                            let memory = MappedFifo { device: registration.device, ll: LlSlots { base: region.tail_memory().0 as usize, slot_bytes: ll::SLOT_BYTES } };
                            cx.net.relayed(link, region.clone(), proxy);
                            cx.net.record(NetConnection { from: me, to: link.peer, channel: link.channel, proxy, send: true, device, nic: cx.rails.rail(proxy, device).unwrap_or("?").to_string() });
                            net_end(end, region, Some(registration), &memory, cx)?
                        }
                    }
                }
            };
            self.ends.insert(end, opened);
        }
        Ok(())
    }

    /// Messages this rank's kernels posted on its network sending ends that the proxy has
    /// not sent yet.
    pub fn net_unsent(&self) -> u64 {
        self.ends.iter().filter_map(|(end, opened)| match (&opened.memory, end.direction()) {
            (EndMemory::Net { region, .. }, Direction::Send) => Some(region.in_flight()),
            _ => None,
        }).sum()
    }

    /// Whether this rank has network connection ends.
    pub fn any_net(&self) -> bool {
        self.ends.values().any(|o| matches!(o.memory, EndMemory::Net { .. }))
    }

    /// Whether `end` goes over the network.
    pub fn is_net(&self, end: &End) -> bool {
        self.ends.get(end).is_some_and(|o| matches!(o.memory, EndMemory::Net { .. }))
    }

    /// Allocates this rank's inbox of `kind` (`bytes`, zeroed, then a table of every
    /// rank's inbox address as this GPU reaches it), announces it to every peer and opens
    /// theirs (collective). The addresses of this rank's inbox and of the table.
    pub fn inboxes(&mut self, kind: Inbox, bytes: usize, cx: &Setup) -> Result<(u64, u64)> {
        if self.inboxes.iter().any(|(k, ..)| *k == kind) {
            return Err(Error::Internal(format!("the {kind:?} inboxes are set up once")));
        }
        let tag = INBOX_TAG + kind as u64;
        let (n, rank) = (cx.boot.nranks() as usize, cx.boot.rank() as usize);
        cx.device.bind()?;
        let table_at = bytes.next_multiple_of(16);
        let memory = Local::new(DeviceMemory::zeroed(table_at + n * 8)?);
        let record = Record { origin: cx.origin, ordinal: cx.device.ordinal, ptr: memory.ptr, ipc: memory.ipc_handle()? }.to_bytes();
        let peers = || (0..n).filter(move |&p| p != rank);
        for peer in peers() {
            cx.boot.send(peer as u32, tag, &record)?;
        }
        let mut table = vec![memory.ptr; n];
        let mut remotes = Vec::with_capacity(n - 1);
        for peer in peers() {
            let record = Record::from_bytes(&cx.boot.recv(peer as u32, tag)?, peer)?;
            let remote = self.open(&record, peer, cx)?;
            table[peer] = remote.ptr();
            remotes.push(remote);
        }
        memory.upload_at(table_at, bytemuck::cast_slice(&table))?;
        let addresses = (memory.ptr, memory.ptr + table_at as u64);
        self.inboxes.push((kind, remotes, memory));
        Ok(addresses)
    }

    /// Calls `write` with the peers' inboxes of `kind` as this GPU reaches them (none before
    /// they are set up), less those of peers in this process whose memory is freed, and
    /// keeps those allocated until `write` returns: what it writes there must have landed
    /// by then.
    pub fn with_live_peer_inboxes<R>(&self, kind: Inbox, write: impl FnOnce(&[u64]) -> R) -> R {
        let allocated = ALLOCATED.lock();
        let live: Vec<u64> = self
            .inboxes
            .iter()
            .filter(|(k, ..)| *k == kind)
            .flat_map(|(_, remotes, _)| remotes.iter())
            .filter(|r| match r {
                Remote::Direct(ptr) => allocated.contains(ptr),
                Remote::Ipc(_) => true,
            })
            .map(Remote::ptr)
            .collect();
        write(&live)
    }

    fn open(&mut self, record: &Record, peer: usize, cx: &Setup) -> Result<Remote> {
        if !cx.same_host[peer] {
            return Err(Error::Internal(format!("rank {peer} is on another host: its GPU memory cannot be opened here")));
        }
        if record.origin.host != cx.origin.host {
            return Err(Error::invalid(format!("rank {peer} is on another host: the GPU backend connects the ranks of one node only (use the host backend across nodes)")));
        }
        if record.origin.pid != cx.origin.pid {
            return Ok(Remote::Ipc(IpcMemory::open(&record.ipc)?));
        }
        if record.ordinal != cx.device.ordinal && !self.peers.iter().any(|d| d.ordinal == record.ordinal) {
            let peer_device = Device::open(record.ordinal as usize)?;
            cx.device.enable_peer_access(&peer_device)?;
            self.peers.push(peer_device);
        }
        Ok(Remote::Direct(record.ptr))
    }

    /// Bytes of memory this rank allocated for its connection ends (GPU memory, and the
    /// network FIFOs' pinned host memory) and inboxes.
    pub fn bytes(&self) -> usize {
        self.ends.values().map(|o| o.memory.bytes()).sum::<usize>() + self.inboxes.iter().map(|(_, _, m)| m.bytes).sum::<usize>()
    }

    /// The table a launch indexes: the ends in `ends`' order (all connected).
    pub fn table(&self, ends: &[End]) -> Result<Vec<DevConn>> {
        ends.iter().map(|e| self.ends.get(e).map(|o| o.conn).ok_or_else(|| Error::Internal(format!("{e:?} is not connected")))).collect()
    }
}

/// An end announced and not yet opened.
enum Pending {
    /// Between GPUs of one host: this end's memory, announced.
    Peer(Local),
    /// A network receiving end listening on its FIFO.
    Listening(Arc<Region>, MappedFifo),
    /// A network sending end, to connect once the peer's handle is here.
    Connecting,
}

/// The mapped host memory of a network FIFO: the device address of its start, and its LL
/// slots (host addresses), which follow the Simple ones.
#[derive(Clone, Copy)]
struct MappedFifo {
    device: u64,
    ll: LlSlots,
}

/// A network FIFO of `geometry` in pinned host memory mapped into the GPU (the context is
/// current), owned by the region, with an LL slot (`ll::SLOT_BYTES`) per slot after its
/// Simple slots.
fn net_fifo(geometry: Geometry) -> Result<(Arc<Region>, MappedFifo)> {
    let bytes = net_fifo_bytes(geometry);
    let memory = MappedHost::zeroed(bytes.div_ceil(4))?;
    let (host, device) = (memory.host(), memory.device);
    let ll = LlSlots { base: host as usize + geometry.region_bytes(), slot_bytes: ll::SLOT_BYTES };
    // SAFETY: the mapping is page-aligned and holds the header page and the slots
    // (region_bytes); it lives in the region's owner, and only the region's two ends touch
    // it: this rank's proxy and its kernels, through the FIFO protocol.
    let region = unsafe { Region::lent(geometry, host, host.add(fifo::HEADER_BYTES), Box::new(memory)) }.map_err(|e| Error::from_transport("lending a network FIFO its mapped memory", e))?;
    Ok((region, MappedFifo { device, ll }))
}

/// The open network end `end` over `region` (mapped at `memory`; through `registration`
/// for a relayed send's segment).
fn net_end(end: End, region: Arc<Region>, registration: Option<HostRegistration>, memory: &MappedFifo, cx: &Setup) -> Result<Opened> {
    // The message count, then (a sending end's) the last head its kernel read.
    let counter = DeviceMemory::zeroed(16)?;
    let base = memory.device;
    let geometry = cx.geometry;
    let conn = DevConn {
        slots_base: base + fifo::HEADER_BYTES as u64,
        tail: base + fifo::TAIL_OFFSET as u64,
        head: base + fifo::HEAD_OFFSET as u64,
        counter: counter.ptr,
        // The proxy sends what the kernel posted: it needs each message's size.
        sizes: if matches!(end, End::Send(_)) { base + fifo::SIZES_OFFSET as u64 } else { 0 },
        slot_bytes: geometry.stride() as u64,
        ll_slots: base + geometry.region_bytes() as u64,
        slots: geometry.slots as u32,
        peer: end.link().peer as u32,
        flags: conn::HOST,
        ll_slot_bytes: ll::SLOT_BYTES as u32,
    };
    tracing::debug!(target: crate::log_target::P2P, "GPU {} {end:?} connected (network, through the proxy)", cx.device.ordinal);
    Ok(Opened { conn, memory: EndMemory::Net { _registration: registration, region, counter, bytes: net_fifo_bytes(geometry) } })
}

/// Bytes of a network FIFO's mapped memory: the FIFO, then its LL slots.
fn net_fifo_bytes(geometry: Geometry) -> usize {
    geometry.region_bytes() + geometry.slots * ll::SLOT_BYTES
}

/// The payload of an announcement that must be of `kind`, or an error naming the peer.
fn announced(message: &[u8], kind: u8, peer: usize) -> Result<&[u8]> {
    match message.split_first() {
        Some((&k, rest)) if k == kind => Ok(rest),
        Some((&k, _)) => Err(Error::transport(format!("rank {peer} announced a connection of kind {k}, expected {kind} (one of the two sees the other on its host, the other not: NCCL_HOSTID differs?)"))),
        None => Err(Error::transport(format!("rank {peer} announced an empty connection"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_named() {
        let r = Record { origin: Origin { pid: 77, host: 0xdead_beef_1234 }, ordinal: 3, ptr: 0x7f00_0000_1000, ipc: std::array::from_fn(|i| i as u8) };
        let back = Record::from_bytes(&r.to_bytes(), 1).unwrap();
        assert_eq!((back.origin, back.ordinal, back.ptr, back.ipc), (r.origin, r.ordinal, r.ptr, r.ipc));
        let e = Record::from_bytes(&[0; 10], 5).err().unwrap().to_string();
        assert!(e.contains("rank 5") && e.contains("10 bytes"), "{e}");
    }

    #[test]
    fn tags_stay_apart() {
        // Channels (up to the point-to-point channel 2^16) never carry one kind of tag into
        // the other's range, nor into the host transports' (2^62) or the bootstrap's (2^63).
        let top = 1u64 << 17;
        assert!(FIFO_TAG + top < HEAD_TAG && HEAD_TAG + top < INBOX_TAG && INBOX_TAG < (1 << 62));
    }
}
