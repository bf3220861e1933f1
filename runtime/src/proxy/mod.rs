//! The proxy engine: progress threads shared by every communicator of the process, that
//! move network connections' FIFO slots through a [`Net`]. What a link does next is decided
//! by its sans-IO core ([`core`]); this module is the edge: the threads, the Net calls, the
//! FIFOs and the clock.
//!
//! Each link (the sending or the receiving end of a connection) is progressed by one
//! thread, dealt in turn as links are made, so that the copies through the sockets of a
//! rank's sends and receives, and of the ranks of one process, run on several cores (the
//! proxy's own work over TCP, but for the pieces of large messages that the socket Net's
//! helper threads move, NCCL_SOCKET_NTHREADS): `OXCCL_PROXY_THREADS` threads, by default one
//! per two cores per rank on the host (1 to 4), started by the first communicator to make a
//! network link.
//!
//! A link's FIFO is made by its caller: heap memory for the host executor, pinned host
//! memory mapped into the GPU for the GPU backend's kernels. A send link connects (in the
//! proxy thread, bounded by the bootstrap timeout), registers the FIFO's slots with the
//! Net, and `isend`s each filled slot, releasing it when the send completes. A receive link
//! accepts, registers, posts `irecv`s into the free slots for the messages announced to it,
//! and publishes slots as receives complete. Before an operation runs, its connections'
//! messages are announced ([`NetLinks::announce`]): how many each link carries, and for a
//! receive link whether they are independent (the sender sends them without waiting for
//! this rank, as in point-to-point and direct exchanges) — independent ones are posted
//! together, up to the Net's `max_recvs` — and whether they run LL: a GPU kernel's FIFO
//! has LL slots beside its Simple ones, which the proxy sends from only once every line
//! carries its flag, and receives into ([`ll`]).
//!
//! Wake-ups: the host executor wakes a link's thread when it gives it work (a slot to send,
//! a slot free to receive into), so an idle thread may sleep without holding up the next
//! step. A GPU kernel cannot wake a thread: while a link whose other end is a kernel has
//! announced work outstanding, its thread keeps polling. A thread's loop never blocks on
//! one peer: every Net call is non-blocking and every link is visited in turn. A host
//! executor that waits makes passes itself over the links of any thread not passing now
//! ([`help`]), so that a rank whose executor and proxy thread share a core does not wait
//! for the scheduler at every hop.

pub(crate) mod core;
pub(crate) mod ll;
#[cfg(test)]
mod sim;

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use oxccl_bootstrap::AbortFlag;
use oxccl_transports::fifo::{Receiver, Region, Sender};
use oxccl_transports::inbox::Inbox;
use oxccl_transports::net::{CommConfig, Context, MemoryKind, MrHandle, Net, Opaque, RecvBuffer, RecvComm, Request, SendComm};
use parking_lot::Mutex;

use self::core::{RecvCore, RecvStep, SendCore, SendStep};
use self::ll::{LlLink, LlSlots, Scan};
use crate::algo::Link;
use crate::error::{Error, Result};
use crate::log_target;

/// Which end of a connection a link is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    Send,
    Recv,
}

/// Who fills or drains a link's FIFO on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driver {
    /// The host executor, which wakes the link's thread when it gives it work.
    Host,
    /// A GPU kernel, which cannot: the thread polls while the link has work announced.
    Device,
    /// Another process of the host (PXN: the proxy sends its data from this rank's NIC),
    /// which can neither wake the thread nor announce: the thread looks at the FIFO on
    /// each pass, and polls while sends are in flight.
    Relay,
}

/// One network connection of a communicator, as a rank that sends or receives on it sees
/// it: whose data (`from`) to whom on which channel, which rank's proxy sends it, and
/// the NIC at this rank's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConnection {
    /// The rank whose data the connection carries.
    pub from: usize,
    /// The rank it goes to.
    pub to: usize,
    pub channel: usize,
    /// The rank whose proxy sends it: `from`, or the rank of `from`'s host that relays
    /// its sends (PXN).
    pub proxy: usize,
    /// Whether this rank is the sending end (`from`): then `device` and `nic` are the
    /// sending NIC (`proxy`'s); else the receiving one (`to`'s).
    pub send: bool,
    pub device: usize,
    pub nic: String,
}

/// A communicator's network links, and the way to the process's proxy threads.
pub(crate) struct NetLinks {
    net: Arc<dyn Net>,
    /// The communicator's context in `net`, shared with its links.
    context: Arc<NetContext>,
    /// Threads to start, if this is the first communicator to make a network link.
    threads: usize,
    /// How long a link may take to connect or be accepted.
    setup_timeout: Duration,
    /// The process's proxy threads, once this communicator made a network link.
    proxies: OnceLock<&'static Proxies>,
    /// Each link's mailbox for announcements, and the thread that progresses it.
    links: Mutex<FxHashMap<(Link, Direction), LinkEntry>>,
    /// Every connection made for this communicator on this rank, in order.
    made: Mutex<Vec<NetConnection>>,
    shared: Shared,
}

/// Announcements for one link, from the communicator's threads to its proxy thread:
/// (messages, independent, over LL).
type Mailbox = Arc<Mutex<Vec<(u64, bool, bool)>>>;

/// A link as its communicator knows it: its mailbox and its thread.
type LinkEntry = (Mailbox, &'static Proxy);

/// What the links of a communicator share with it.
#[derive(Clone)]
struct Shared {
    /// The first failure of any link: the peer (communicator rank) and why.
    failure: Arc<Mutex<Option<(usize, String)>>>,
    /// Set when the communicator goes: its links are dropped on their thread's next pass.
    closed: AbortFlag,
}

/// A communicator's context in its Net (NCCL v11's per-communicator `init`), finalized once
/// the communicator and the last of its links are gone, after their comms closed.
pub(crate) struct NetContext {
    net: Arc<dyn Net>,
    context: Option<Context>,
}

impl NetContext {
    /// `net` initialized for the communicator `comm_id`.
    pub fn new(net: Arc<dyn Net>, comm_id: u64) -> Result<NetContext> {
        let context = net.init(comm_id, &CommConfig::default()).map_err(|e| Error::from_transport(format!("initializing the {} net for the communicator", net.name()), e))?;
        Ok(NetContext { net, context: Some(context) })
    }

    fn get(&self) -> &Context {
        self.context.as_ref().expect("the context lives until dropped")
    }
}

impl Drop for NetContext {
    fn drop(&mut self) {
        if let Some(context) = self.context.take() {
            if let Err(e) = self.net.finalize(context) {
                tracing::warn!(target: log_target::NET, "finalizing the communicator's net context: {e}");
            }
        }
    }
}

impl NetLinks {
    /// Links over `net`, initialized for the communicator `comm_id`, progressed by the
    /// process's proxy threads (`threads` of them, if this is the first communicator to
    /// start them; see [`default_threads`]); a link must connect within `setup_timeout`.
    pub fn new(net: Arc<dyn Net>, comm_id: u64, threads: usize, setup_timeout: Duration) -> Result<NetLinks> {
        let shared = Shared { failure: Arc::default(), closed: AbortFlag::new() };
        let context = Arc::new(NetContext::new(net.clone(), comm_id)?);
        Ok(NetLinks { net, context, threads, setup_timeout, proxies: OnceLock::new(), links: Mutex::new(FxHashMap::default()), made: Mutex::default(), shared })
    }

    /// The thread for a new link (the process's threads start with the first link).
    fn next_proxy(&self) -> &'static Proxy {
        self.proxies.get_or_init(|| proxies(self.threads)).next()
    }

    /// The receiving side of a network link over `region`, which the proxy fills (the
    /// caller reads it through a [`Receiver`]): the handle the sender connects with, and
    /// the proxy thread to wake when a slot is free again.
    /// `sender` is the rank whose proxy connects: the link's peer, or the rank of its host
    /// relaying its sends (PXN), whose end a failure of the connection names. Listens on
    /// the Net's `device` (the one the sender's side expects: `pxn::Rails::receive_device`).
    /// `ll`: the FIFO's LL slots, for messages announced as LL (a GPU kernel's FIFO).
    #[allow(clippy::too_many_arguments)]
    pub fn listen(&self, link: Link, sender: usize, region: Arc<Region>, driver: Driver, device: usize, ll: Option<LlSlots>) -> Result<(Vec<u8>, std::thread::Thread)> {
        let (handle, mut edge) = RecvLink::new(link, sender, self.net.clone(), self.context.clone(), device, region, driver, self.shared.clone(), Instant::now(), self.setup_timeout)?;
        edge.ll = checked_ll(&edge.region, ll)?.map(LlLink::new);
        if edge.ll.is_some() {
            // The kernel reads an LL message as its lines land, and may free its slot
            // before the receive's completion publishes it.
            edge.fifo.allow_early_release();
        }
        Ok((handle, self.submit(link, Direction::Recv, edge.mailbox.clone(), Box::new(edge))))
    }

    /// The sending side of a network link over `region`, which the caller fills through a
    /// [`Sender`] and the proxy drains into the Net's `device` once connected to the
    /// peer's `handle`: the proxy thread to wake when a slot is filled. `ll` as for
    /// [`NetLinks::listen`].
    pub fn connect(&self, link: Link, handle: &[u8], region: Arc<Region>, driver: Driver, device: usize, ll: Option<LlSlots>) -> Result<std::thread::Thread> {
        let mut edge = SendLink::new(link, self.net.clone(), self.context.clone(), device, handle, region, driver, self.shared.clone(), Instant::now(), self.setup_timeout)?;
        edge.ll = checked_ll(&edge.region, ll)?.map(LlLink::new);
        Ok(self.submit(link, Direction::Send, edge.mailbox.clone(), Box::new(edge)))
    }

    /// The sending side of a PXN relay: rank `origin` of this host fills `region` (a
    /// shared-memory FIFO) with messages for `link`'s peer, which this rank's proxy sends
    /// from the Net's `device`. Progressed without announcements ([`Driver::Relay`]); it
    /// goes with this communicator.
    pub fn relay(&self, origin: usize, link: Link, handle: &[u8], region: Arc<Region>, device: usize) -> Result<()> {
        let mut edge = SendLink::new(link, self.net.clone(), self.context.clone(), device, handle, region, Driver::Relay, self.shared.clone(), Instant::now(), self.setup_timeout)?;
        edge.origin = Some(origin);
        self.next_proxy().submit(Box::new(edge));
        Ok(())
    }

    /// Records a connection this rank made or asked for (see [`NetLinks::connections`]).
    pub fn record(&self, connection: NetConnection) {
        tracing::debug!(target: log_target::NET, "rank {} to rank {} channel {}: sent by rank {}'s proxy, {} NIC {} (device {})", connection.from, connection.to, connection.channel, connection.proxy, if connection.send { "sending" } else { "receiving" }, connection.nic, connection.device);
        self.made.lock().push(connection);
    }

    /// Every connection recorded on this rank, in order.
    pub fn connections(&self) -> Vec<NetConnection> {
        self.made.lock().clone()
    }

    /// The name of the Net's `device`.
    pub fn device_name(&self, device: usize) -> String {
        self.net.properties(device).map_or_else(|_| format!("device {device}"), |p| p.name)
    }

    /// Whether the communicator's links were closed (it is going).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_raised()
    }

    fn submit(&self, link: Link, direction: Direction, mailbox: Mailbox, edge: Box<dyn Progress>) -> std::thread::Thread {
        let proxy = self.next_proxy();
        self.links.lock().insert((link, direction), (mailbox, proxy));
        proxy.submit(edge);
        proxy.thread.clone()
    }

    /// Announces that `messages` more messages will go over the link (an operation starts);
    /// for a receive link, `independent` when the sender sends them all without waiting
    /// for this rank; `ll` when they run LL (in the link's LL slots).
    pub fn announce(&self, link: Link, direction: Direction, messages: u64, independent: bool, ll: bool) {
        if let Some((mailbox, proxy)) = self.links.lock().get(&(link, direction)) {
            mailbox.lock().push((messages, independent, ll));
            proxy.wake();
        }
    }

    /// Whether `link` has a network end in `direction`.
    pub fn is_net(&self, link: &Link, direction: Direction) -> bool {
        self.links.lock().contains_key(&(*link, direction))
    }

    /// Drops every link of this communicator (their comms closed, their FIFOs let go) and
    /// waits up to `limit` until the proxy threads did; whether they did. The memory of
    /// FIFOs lent to links (pinned host memory, whose freeing waits for the GPU) is then
    /// freed by its other holder, never by a proxy thread that other communicators need.
    pub fn close(&self, limit: Duration) -> bool {
        self.shared.closed.raise();
        for proxy in self.proxies.get().map_or(&[][..], |p| &p.threads[..]) {
            proxy.wake();
        }
        let deadline = Instant::now() + limit;
        // Each live link holds a clone of `shared`.
        while Arc::strong_count(&self.shared.failure) > 1 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// The first failure of any of this communicator's links.
    pub fn check(&self) -> Result<()> {
        match &*self.shared.failure.lock() {
            // A link ends when its peer does: name the peer, as the bootstrap would.
            Some((peer, reason)) => Err(Error::PeerFailed { rank: *peer as u32, reason: reason.clone() }),
            None => Ok(()),
        }
    }
}

impl Drop for NetLinks {
    fn drop(&mut self) {
        // The proxy drops this communicator's links (and closes their comms) on its next
        // pass.
        self.shared.closed.raise();
        for proxy in self.proxies.get().map_or(&[][..], |p| &p.threads[..]) {
            proxy.wake();
        }
    }
}

/// A link the proxy progresses.
trait Progress: Send {
    /// One pass at `now`: `Ok(true)` when it did something, an error when the link failed.
    fn progress(&mut self, now: Instant) -> Result<bool, String>;
    /// Whether its thread must keep polling (a kernel drives it and work is announced).
    fn needs_polling(&self) -> bool;
    fn shared(&self) -> &Shared;
    fn describe(&self) -> String;
    /// The peer (communicator rank) at the other end.
    fn peer(&self) -> usize;
}

/// The sending end of a network connection.
struct SendLink {
    link: Link,
    /// The rank of this host whose data a PXN relay sends (`None`: this rank's own).
    origin: Option<usize>,
    net: Arc<dyn Net>,
    /// The communicator's context, and the device of this link.
    context: Arc<NetContext>,
    device: usize,
    /// The peer's listen handle.
    handle: Vec<u8>,
    comm: Option<SendComm>,
    /// The registration of the FIFO's slots on `comm`.
    memory: Option<MrHandle>,
    fifo: Receiver,
    region: Arc<Region>,
    /// Sends in flight, oldest first.
    requests: VecDeque<Request>,
    core: SendCore,
    mailbox: Mailbox,
    driver: Driver,
    shared: Shared,
    /// The FIFO's LL side, if its kernel runs LL; how far the check of the next LL
    /// message got.
    ll: Option<LlLink>,
    scan: Scan,
}

impl SendLink {
    /// The sending end of `link` over `region`, to connect to the peer's `handle` by
    /// `now + timeout`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        link: Link,
        net: Arc<dyn Net>,
        context: Arc<NetContext>,
        device: usize,
        handle: &[u8],
        region: Arc<Region>,
        driver: Driver,
        shared: Shared,
        now: Instant,
        timeout: Duration,
    ) -> Result<SendLink> {
        let devices = net.devices().map_err(|e| Error::from_transport("counting the net's devices", e))?;
        if device >= devices {
            return Err(Error::invalid(format!("net device {device} for a send to rank {} (the {} net has {devices})", link.peer, net.name())));
        }
        Ok(SendLink {
            link,
            origin: None,
            net,
            device,
            context,
            handle: handle.to_vec(),
            comm: None,
            memory: None,
            fifo: Receiver::new(region.clone()),
            region,
            requests: VecDeque::new(),
            core: SendCore::new(now, timeout),
            mailbox: Mailbox::default(),
            driver,
            shared,
            ll: None,
            scan: Scan::default(),
        })
    }
}

impl Progress for SendLink {
    fn progress(&mut self, now: Instant) -> Result<bool, String> {
        for (messages, _, ll) in self.mailbox.lock().drain(..) {
            self.core.announce(messages);
            ll::announce(&mut self.ll, messages, ll)?;
        }
        self.core.new_pass();
        let mut busy = false;
        loop {
            let filled = if self.comm.is_some() { self.fifo.filled() } else { 0 };
            match self.core.next(filled, now).map_err(|s| s.to_string())? {
                SendStep::Connect => match self.net.connect(self.context.get(), self.device, &self.handle).map_err(|e| format!("connect: {e}"))? {
                    Some(mut comm) => {
                        let (data, len) = registered(&self.region, self.ll.as_ref());
                        self.memory = Some(self.net.reg_mr(&mut comm, data, len, MemoryKind::Host).map_err(|e| format!("registering the FIFO: {e}"))?);
                        self.comm = Some(comm);
                        self.core.connected();
                        busy = true;
                    }
                    None => return Ok(busy),
                },
                SendStep::Send { slot, tag } => {
                    let message = self.core.next_message();
                    let (data, len) = match ll::slot_of(&mut self.ll, message, self.region.nslots()) {
                        // Filled before its operation's announcement reached this thread.
                        None => {
                            self.core.refused();
                            continue;
                        }
                        Some(Some((data, slot_bytes))) => {
                            // SAFETY: the slot is the FIFO's (lent memory, checked at
                            // creation), which the kernel writes in 16-byte LL stores.
                            match unsafe { ll::ready(data, slot_bytes, message, &mut self.scan) }? {
                                Some(len) => (data.cast_const(), len),
                                None => {
                                    self.core.refused();
                                    continue;
                                }
                            }
                        }
                        Some(None) => self.fifo.filled_slot(slot),
                    };
                    let (comm, memory) = (self.comm.as_mut().expect("connected"), self.memory.as_ref().expect("registered"));
                    // SAFETY: the slot stays filled and unchanged until released below,
                    // after the send completed.
                    match unsafe { self.net.isend(comm, data, len, tag, memory) }.map_err(|e| format!("isend: {e}"))? {
                        Some(request) => {
                            self.requests.push_back(request);
                            self.core.sent();
                            busy = true;
                        }
                        None => self.core.refused(),
                    }
                }
                SendStep::Test => {
                    let front = self.requests.front_mut().expect("a send in flight");
                    match self.net.test(front).map_err(|e| format!("test: {e}"))? {
                        Some(_) => {
                            self.requests.pop_front();
                            self.fifo.release();
                            self.core.completed();
                            busy = true;
                        }
                        None => return Ok(busy),
                    }
                }
                SendStep::Idle => return Ok(busy),
            }
        }
    }

    fn needs_polling(&self) -> bool {
        match self.driver {
            Driver::Host => false,
            Driver::Device => self.core.active(),
            Driver::Relay => self.core.active() && !self.requests.is_empty(),
        }
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn describe(&self) -> String {
        match self.origin {
            Some(origin) => format!("PXN relay of rank {origin}'s sends to rank {} channel {}", self.link.peer, self.link.channel),
            None => format!("send to rank {} channel {}", self.link.peer, self.link.channel),
        }
    }

    fn peer(&self) -> usize {
        self.link.peer
    }
}

impl Drop for SendLink {
    fn drop(&mut self) {
        // Requests go with their comm: closing it ends them.
        self.requests.clear();
        if let Some(mut comm) = self.comm.take() {
            if let Some(memory) = self.memory.take() {
                let _ = self.net.dereg_mr(&mut comm, memory);
            }
            let _ = self.net.close_send(comm);
        }
    }
}

/// The receiving end of a network connection.
struct RecvLink {
    link: Link,
    /// The rank whose proxy sends (the link's peer, or its PXN relay).
    sender: usize,
    net: Arc<dyn Net>,
    /// The communicator's context: finalized after this link's comms are closed.
    _context: Arc<NetContext>,
    listen: Option<Opaque>,
    comm: Option<RecvComm>,
    /// The registration of the FIFO's slots on `comm`.
    memory: Option<MrHandle>,
    fifo: Sender,
    region: Arc<Region>,
    /// Receives in flight, oldest first.
    requests: VecDeque<Request>,
    core: RecvCore,
    mailbox: Mailbox,
    driver: Driver,
    shared: Shared,
    /// The FIFO's LL side, if its kernel runs LL; how many receives were posted (the next
    /// one's message number).
    ll: Option<LlLink>,
    posted: u64,
}

impl RecvLink {
    /// The receiving end of `link` over `region`, listening for a peer that must connect
    /// by `now + timeout`; the handle to give the peer.
    #[allow(clippy::too_many_arguments)]
    fn new(
        link: Link,
        sender: usize,
        net: Arc<dyn Net>,
        context: Arc<NetContext>,
        device: usize,
        region: Arc<Region>,
        driver: Driver,
        shared: Shared,
        now: Instant,
        timeout: Duration,
    ) -> Result<(Vec<u8>, RecvLink)> {
        let (handle, listen) = net.listen(context.get(), device).map_err(|e| Error::from_transport(format!("listening on device {device}"), e))?;
        let max_recvs = net.properties(device).map_err(|e| Error::from_transport(format!("asking device {device} its properties"), e))?.max_recvs;
        let edge = RecvLink {
            link,
            sender,
            net,
            _context: context,
            listen: Some(listen),
            comm: None,
            memory: None,
            fifo: Sender::new(region.clone()),
            region,
            requests: VecDeque::new(),
            core: RecvCore::new(now, timeout, max_recvs),
            mailbox: Mailbox::default(),
            driver,
            shared,
            ll: None,
            posted: 0,
        };
        Ok((handle, edge))
    }
}

impl Progress for RecvLink {
    fn progress(&mut self, now: Instant) -> Result<bool, String> {
        for (messages, independent, ll) in self.mailbox.lock().drain(..) {
            self.core.announce(messages, independent);
            ll::announce(&mut self.ll, messages, ll)?;
        }
        self.core.new_pass();
        let mut busy = false;
        loop {
            let free = if self.comm.is_some() { self.fifo.free() } else { 0 };
            match self.core.next(free, now).map_err(|s| s.to_string())? {
                RecvStep::Accept => {
                    let listen = self.listen.as_mut().expect("listening until accepted");
                    match self.net.accept(listen).map_err(|e| format!("accept: {e}"))? {
                        Some(mut comm) => {
                            let (data, len) = registered(&self.region, self.ll.as_ref());
                            self.memory = Some(self.net.reg_mr(&mut comm, data, len, MemoryKind::Host).map_err(|e| format!("registering the FIFO: {e}"))?);
                            self.comm = Some(comm);
                            if let Some(listen) = self.listen.take() {
                                let _ = self.net.close_listen(listen);
                            }
                            self.core.accepted();
                            busy = true;
                        }
                        None => return Ok(busy),
                    }
                }
                RecvStep::Post { first, count, tag } => {
                    let (comm, memory) = (self.comm.as_mut().expect("accepted"), self.memory.as_ref().expect("registered"));
                    let mut buffers: Vec<RecvBuffer> = Vec::with_capacity(count);
                    for i in 0..count {
                        let message = self.posted + i as u64;
                        // Only announced messages are posted: never `None`.
                        let (data, len) = match ll::slot_of(&mut self.ll, message, self.region.nslots()) {
                            Some(Some(slot)) => slot,
                            _ => (self.fifo.free_slot_ptr(first + i), self.fifo.slot_bytes()),
                        };
                        buffers.push(RecvBuffer { data, len, tag: tag.wrapping_add(i as u32) });
                    }
                    let handles: Vec<&MrHandle> = vec![memory; count];
                    // SAFETY: the slots are free and stay unpublished until the receive
                    // completes.
                    match unsafe { self.net.irecv(comm, &buffers, &handles) }.map_err(|e| format!("irecv: {e}"))? {
                        Some(request) => {
                            self.requests.push_back(request);
                            self.core.posted(count);
                            self.posted += count as u64;
                            busy = true;
                        }
                        None => self.core.refused(),
                    }
                }
                RecvStep::Test => {
                    let front = self.requests.front_mut().expect("a receive in flight");
                    match self.net.test(front).map_err(|e| format!("test: {e}"))? {
                        Some(sizes) => {
                            self.requests.pop_front();
                            let count = self.core.completed();
                            if sizes.len() != count {
                                return Err(format!("a receive of {count} buffers completed with {} sizes", sizes.len()));
                            }
                            for size in sizes {
                                self.fifo.post(size);
                            }
                            busy = true;
                        }
                        None => return Ok(busy),
                    }
                }
                RecvStep::Idle => return Ok(busy),
            }
        }
    }

    fn needs_polling(&self) -> bool {
        self.driver == Driver::Device && self.core.active()
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn describe(&self) -> String {
        match self.sender {
            sender if sender == self.link.peer => format!("receive from rank {} channel {}", self.link.peer, self.link.channel),
            relay => format!("receive from rank {} channel {} relayed by rank {relay}", self.link.peer, self.link.channel),
        }
    }

    fn peer(&self) -> usize {
        self.sender
    }
}

impl Drop for RecvLink {
    fn drop(&mut self) {
        self.requests.clear();
        if let Some(mut comm) = self.comm.take() {
            if let Some(memory) = self.memory.take() {
                let _ = self.net.dereg_mr(&mut comm, memory);
            }
            let _ = self.net.close_recv(comm);
        }
        if let Some(listen) = self.listen.take() {
            let _ = self.net.close_listen(listen);
        }
    }
}

/// `ll` if its slots follow `region`'s Simple slots in the same memory (one registration
/// covers both), or an error.
fn checked_ll(region: &Region, ll: Option<LlSlots>) -> Result<Option<LlSlots>> {
    let Some(slots) = ll else { return Ok(None) };
    let (data, len) = region.slots_memory();
    if slots.base != data as usize + len || slots.slot_bytes < oxccl_kernels::device::LL_LINE_BYTES {
        return Err(Error::Internal(format!("LL slots at {:#x} of {} bytes do not follow the FIFO's slots ({:p}, {len} bytes)", slots.base, slots.slot_bytes, data)));
    }
    Ok(ll)
}

/// The memory a link registers with its Net: the FIFO's slots, and its LL slots after them.
fn registered(region: &Region, ll: Option<&LlLink>) -> (*mut u8, usize) {
    let (data, len) = region.slots_memory();
    (data, len + ll.map_or(0, |l| l.slots.slot_bytes * region.nslots()))
}

/// The process's proxy threads, and the next to get a link.
struct Proxies {
    threads: Vec<Proxy>,
    next: AtomicUsize,
}

/// One proxy thread, its queue of new links and the links it progresses. The links are
/// behind a lock that the thread holds for one pass at a time, so that a rank's thread
/// waiting on the network may make a pass itself ([`help`]).
struct Proxy {
    queue: Inbox<Box<dyn Progress>>,
    links: Mutex<Vec<Box<dyn Progress>>>,
    thread: std::thread::Thread,
}

static PROXIES: OnceLock<Proxies> = OnceLock::new();

/// The process's proxy threads, started on first use with `threads` of them; later callers
/// get those, whatever they ask.
fn proxies(threads: usize) -> &'static Proxies {
    let proxies = PROXIES.get_or_init(|| {
        let count = threads.max(1);
        let threads = (0..count)
            .map(|i| {
                let thread = std::thread::Builder::new()
                    .name(format!("oxccl-proxy-{i}"))
                    .spawn(move || {
                        // The static is set as soon as this initializer returns.
                        let proxies = loop {
                            match PROXIES.get() {
                                Some(p) => break p,
                                None => std::thread::park_timeout(Duration::from_millis(1)),
                            }
                        };
                        run(&proxies.threads[i])
                    })
                    .expect("starting an oxccl proxy thread");
                Proxy { queue: Inbox::new(), links: Mutex::new(Vec::new()), thread: thread.thread().clone() }
            })
            .collect();
        tracing::info!(target: log_target::PROXY, "{count} proxy thread(s)");
        Proxies { threads, next: AtomicUsize::new(0) }
    });
    if threads != 0 && threads != proxies.threads.len() {
        tracing::debug!(target: log_target::PROXY, "OXCCL_PROXY_THREADS={threads} ignored: the process's {} proxy thread(s) are running", proxies.threads.len());
    }
    proxies
}

impl Proxies {
    /// The thread for the next link: each in turn.
    fn next(&self) -> &Proxy {
        &self.threads[self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len()]
    }
}

impl Proxy {
    fn submit(&self, link: Box<dyn Progress>) {
        self.queue.push(link);
        self.wake();
    }

    fn wake(&self) {
        self.thread.unpark();
    }
}

/// The proxy threads a process starts when OXCCL_PROXY_THREADS does not say (0): one per
/// two of the host's cores per rank of the communicator on it (`local` ranks: every rank
/// runs its own), 1 to 4 — enough cores left for the ranks themselves.
pub(crate) fn default_threads(cores: usize, local: usize) -> usize {
    (cores / (2 * local.max(1))).clamp(1, 4)
}

/// One pass of `proxy`'s links (its new ones taken in first): whether any did something,
/// whether it has none, whether one needs polling.
fn pass(proxy: &Proxy, links: &mut Vec<Box<dyn Progress>>) -> (bool, bool, bool) {
    proxy.queue.take_into(links);
    let busy = progress_all(links, Instant::now());
    (busy, links.is_empty(), links.iter().any(|l| l.needs_polling()))
}

/// A pass over every proxy thread's links that no thread is passing over now, made by a
/// rank's thread that waits on the network (the host executor): it does the proxy's work
/// itself rather than wait for the proxy thread to be scheduled, which matters where the
/// rank and its proxy thread share a core (`mpirun` binds a rank to one; 2 ranks on a
/// 2-core machine). Nothing when no communicator of the process has made a network link.
pub(crate) fn help() {
    let Some(proxies) = PROXIES.get() else { return };
    for proxy in &proxies.threads {
        if let Some(mut links) = proxy.links.try_lock() {
            pass(proxy, &mut links);
        }
    }
}

/// One proxy thread's loop.
fn run(proxy: &Proxy) {
    let mut idle: u32 = 0;
    loop {
        let (busy, empty, polling) = pass(proxy, &mut proxy.links.lock());
        if busy {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if empty {
            std::thread::park_timeout(Duration::from_millis(100));
        } else if polling {
            // A kernel's next slot shows only by looking: look again soon. A yield, not a
            // spin: with several ranks' proxies on a host, spinning threads took the cores
            // the others needed (4 ranks posing as hosts on one 16-core machine: small
            // alltoall 45-52 us with yields, 70-104 spinning).
            std::thread::yield_now();
        } else if idle < 256 {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(Duration::from_micros(50));
        }
    }
}

/// One pass over `links` at `now`: links of closed communicators are dropped, failed links
/// are recorded in their communicator and dropped. Whether any link did something.
fn progress_all(links: &mut Vec<Box<dyn Progress>>, now: Instant) -> bool {
    links.retain(|l| !l.shared().closed.is_raised());
    let mut busy = false;
    links.retain_mut(|link| match link.progress(now) {
        Ok(did) => {
            busy |= did;
            true
        }
        Err(reason) => {
            let reason = format!("{}: {reason}", link.describe());
            tracing::warn!(target: log_target::PROXY, "network link failed: {reason}");
            link.shared().failure.lock().get_or_insert((link.peer(), reason));
            false
        }
    });
    busy
}

#[cfg(test)]
mod device_tests;
