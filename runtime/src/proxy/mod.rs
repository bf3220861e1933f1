//! The proxy engine: progress threads shared by every communicator of the process, that
//! move network connections' FIFO slots through a [`Net`]. What a link does next is decided
//! by its sans-IO core ([`core`]); this module is the edge: the threads, the Net calls, the
//! FIFOs and the clock.
//!
//! Each link (the sending or the receiving end of a connection) is progressed by one
//! thread, dealt in turn as links are made (each direction on its own, the send links
//! starting half way round, so that a channel's two ends are on different threads:
//! [`deal`]), so that the copies through the sockets of a
//! rank's sends and receives, and of the ranks of one process, run on several cores (the
//! proxy's own work over TCP, but for the pieces of large messages that the socket Net's
//! helper threads move, NCCL_SOCKET_NTHREADS): `OXCCL_PROXY_THREADS` threads, by default one
//! per two cores per rank on the machine (1 to 8), started by the first communicator to
//! make a network link.
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
//! a slot free to receive into), and an announcement wakes the thread of each link it
//! names, so an idle thread may sleep without holding up the next step: a thread whose
//! links have nothing announced or in flight sleeps until woken (bounded at 100 ms), one
//! with work outstanding naps up to 50 µs (a wake-up ends it) once it has found nothing for a while.
//! A GPU kernel cannot wake a thread: while a link whose other end is a kernel has
//! announced work outstanding, its thread keeps polling. A PXN relay's origin (in another
//! process) rings its FIFO's doorbell (`fifo::Doorbell`) after each post while the
//! relaying thread sleeps, which sleeps on its own wake-up word and its relays' doorbells
//! at once (`futex::wait_any`; where the kernel lacks that call, a relaying thread naps
//! 50 µs as one with work outstanding does). A thread's loop never blocks on
//! one peer: every Net call is non-blocking and every link is visited in turn. A host
//! executor that waits makes passes itself over the links of any thread not passing now
//! ([`help`]), so that a rank whose executor and proxy thread share a core does not wait
//! for the scheduler at every hop.

pub(crate) mod core;
pub(crate) mod ll;
pub(crate) mod trace;
#[cfg(test)]
mod sim;

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use oxccl_bootstrap::AbortFlag;
use oxccl_transports::fifo::{self, Receiver, Region, Sender};
use oxccl_transports::futex;
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
    /// which cannot wake the thread but through the FIFO's doorbell. A host executor
    /// there announces nothing: the thread looks at the FIFO on each pass, and polls while
    /// sends are in flight. A GPU kernel there (the FIFO has LL slots) has its host leave
    /// each operation's announcement as a FIFO note ([`NetLinks::announce`] on that
    /// process's side): the thread polls while announced messages are left, as for
    /// [`Driver::Device`].
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
    /// Shared receive comms ([`NetLinks::listen_shared`]) by (sender, channel, device):
    /// their handle, the way to join them and their thread.
    receive_groups: Mutex<FxHashMap<(usize, usize, usize), ReceiveGroup>>,
    /// Shared send comms by the receiver's handle ([`SendChannel`]).
    send_channels: Mutex<FxHashMap<Vec<u8>, std::sync::Weak<SendChannel>>>,
    /// This rank's GPU kernels' sends that a rank of its host relays (PXN): the FIFO, whose
    /// notes carry their announcements, and the relaying rank.
    relayed: Mutex<FxHashMap<Link, (Arc<Region>, usize)>>,
}

/// A shared receive comm as [`NetLinks`] finds it: its handle, its joining members (gone
/// with its link) and its proxy thread.
type ReceiveGroup = (Vec<u8>, std::sync::Weak<Mutex<Vec<RecvMember>>>, &'static Proxy);

/// Announcements for one link, from the communicator's threads to its proxy thread.
type Mailbox = Arc<Mutex<Vec<Announcement>>>;

/// One operation's messages over a link, as [`NetLinks::announce`] posts them.
#[derive(Clone, Copy, Debug)]
struct Announcement {
    messages: u64,
    /// A receive link's sender sends them all without waiting for this rank.
    independent: bool,
    /// They run LL.
    ll: bool,
    /// When the operation announced them (kept where the communicator has a timeline).
    at: Option<Instant>,
}

/// A link as its communicator knows it: its mailbox and its thread.
type LinkEntry = (Mailbox, &'static Proxy);

/// What the links of a communicator share with it.
#[derive(Clone)]
struct Shared {
    /// The first failure of any link: the peer (communicator rank) and why.
    failure: Arc<Mutex<Option<(usize, String)>>>,
    /// Set when the communicator goes: its links are dropped on their thread's next pass.
    closed: AbortFlag,
    /// Receives posted with the buffers of several links (a shared comm's, PXN).
    across_links: Arc<AtomicU64>,
    /// The communicator's proxy timeline (`OXCCL_PROXY_TRACE`), if it keeps one.
    trace: Option<Arc<trace::Recorder>>,
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
        let shared = Shared { failure: Arc::default(), closed: AbortFlag::new(), across_links: Arc::default(), trace: None };
        let context = Arc::new(NetContext::new(net.clone(), comm_id)?);
        Ok(NetLinks {
            net,
            context,
            threads,
            setup_timeout,
            proxies: OnceLock::new(),
            links: Mutex::new(FxHashMap::default()),
            made: Mutex::default(),
            shared,
            receive_groups: Mutex::default(),
            send_channels: Mutex::default(),
            relayed: Mutex::default(),
        })
    }

    /// Keeps the proxy timeline of communicator number `comm` of the process on `rank`,
    /// written to a file named after `path` when it goes ([`trace`]); before any link is
    /// made. An error if the file cannot be written.
    pub fn with_trace(mut self, path: &str, comm: u64, rank: usize) -> Result<NetLinks> {
        let recorder = trace::Recorder::new(path, comm, rank).map_err(|e| Error::invalid(format!("OXCCL_PROXY_TRACE={path}: cannot write the proxy trace {e}")))?;
        self.shared.trace = Some(Arc::new(recorder));
        Ok(self)
    }

    /// The thread for a new link of `direction` (the process's threads start with the
    /// first link).
    fn next_proxy(&self, direction: Direction) -> &'static Proxy {
        self.proxies.get_or_init(|| proxies(self.threads)).next(direction)
    }

    /// The receiving side of a network link over `region`, which the proxy fills (the
    /// caller reads it through a [`Receiver`]): the handle the sender connects with, and
    /// the proxy thread to wake when a slot is free again.
    /// `sender` is the rank whose proxy connects: the link's peer, or the rank of its host
    /// relaying its sends (PXN), whose end a failure of the connection names. Listens on
    /// the Net's `device` (the one the sender's side expects: `pxn::Rails::receive_device`).
    /// `ll`: the FIFO's LL slots, for messages announced as LL (a GPU kernel's FIFO).
    #[allow(clippy::too_many_arguments)]
    pub fn listen(&self, link: Link, sender: usize, region: Arc<Region>, driver: Driver, device: usize, ll: Option<LlSlots>) -> Result<(Vec<u8>, ProxyWaker)> {
        let (handle, mut edge) = RecvLink::new(link, sender, self.net.clone(), self.context.clone(), device, region, driver, self.shared.clone(), Instant::now(), self.setup_timeout, false)?;
        edge.members[0].set_ll(ll)?;
        Ok((handle, self.submit(link, Direction::Recv, edge.members[0].mailbox.clone(), Box::new(edge))))
    }

    /// As [`NetLinks::listen`] for a link of the host executor whose messages `sender`
    /// sends on a comm it shares with the other links it sends to this rank on the
    /// channel, from the same `device` (PXN's relays, [`SendChannel`]): the first such
    /// link listens, and each later one joins its comm, getting the same handle. The
    /// sending side must connect with [`NetLinks::connect`]'s `shared_as`.
    pub fn listen_shared(&self, link: Link, sender: usize, region: Arc<Region>, device: usize) -> Result<(Vec<u8>, ProxyWaker)> {
        let key = (sender, link.channel, device);
        let mut groups = self.receive_groups.lock();
        if let Some((handle, joining, proxy)) = groups.get(&key).and_then(|(h, j, p)| j.upgrade().map(|j| (h.clone(), j, *p))) {
            let member = RecvMember::new(link, region, true, Instant::now(), self.setup_timeout, self.max_recvs(device));
            self.links.lock().insert((link, Direction::Recv), (member.mailbox.clone(), proxy));
            joining.lock().push(member);
            proxy.wake();
            return Ok((handle, ProxyWaker(proxy)));
        }
        let (handle, mut edge) = RecvLink::new(link, sender, self.net.clone(), self.context.clone(), device, region, Driver::Host, self.shared.clone(), Instant::now(), self.setup_timeout, true)?;
        let joining = Arc::new(Mutex::new(Vec::new()));
        edge.joining = Some(joining.clone());
        let proxy = self.next_proxy(Direction::Recv);
        self.links.lock().insert((link, Direction::Recv), (edge.members[0].mailbox.clone(), proxy));
        groups.insert(key, (handle.clone(), Arc::downgrade(&joining), proxy));
        proxy.submit(Box::new(edge));
        Ok((handle, ProxyWaker(proxy)))
    }

    /// The sending side of a network link over `region`, which the caller fills through a
    /// [`Sender`] and the proxy drains into the Net's `device` once connected to the
    /// peer's `handle`: the proxy thread to wake when a slot is filled. `ll` as for
    /// [`NetLinks::listen`]. `shared_as`: the handle is a shared comm's
    /// ([`NetLinks::listen_shared`]), whose messages this link tags as this rank's.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(&self, link: Link, handle: &[u8], region: Arc<Region>, driver: Driver, device: usize, ll: Option<LlSlots>, shared_as: Option<usize>) -> Result<ProxyWaker> {
        let mut edge = SendLink::new(link, self.net.clone(), self.context.clone(), device, handle, region, driver, self.shared.clone(), Instant::now(), self.setup_timeout)?;
        edge.ll = checked_ll(&edge.region, ll)?.map(LlLink::new);
        self.share(&mut edge, shared_as);
        Ok(self.submit(link, Direction::Send, edge.mailbox.clone(), Box::new(edge)))
    }

    /// The sending side of a PXN relay: rank `origin` of this host fills `region` (a
    /// shared-memory FIFO) with messages for `link`'s peer, which this rank's proxy sends
    /// from the Net's `device`, on the comm it shares with its other links to that peer's
    /// channel when `shared`. `ll`: the FIFO's LL slots when a GPU kernel of `origin` fills
    /// it (its announcements then come as the FIFO's notes); [`Driver::Relay`]. It goes
    /// with this communicator.
    #[allow(clippy::too_many_arguments)]
    pub fn relay(&self, origin: usize, link: Link, handle: &[u8], region: Arc<Region>, device: usize, shared: bool, ll: Option<LlSlots>) -> Result<()> {
        let mut edge = SendLink::new(link, self.net.clone(), self.context.clone(), device, handle, region, Driver::Relay, self.shared.clone(), Instant::now(), self.setup_timeout)?;
        edge.ll = checked_ll(&edge.region, ll)?.map(LlLink::new);
        edge.origin = Some(origin);
        self.share(&mut edge, shared.then_some(origin));
        self.next_proxy(Direction::Send).submit(Box::new(edge));
        Ok(())
    }

    /// Puts `edge` on the comm of the other links sending to its handle, as `origin`.
    fn share(&self, edge: &mut SendLink, shared_as: Option<usize>) {
        let Some(origin) = shared_as else { return };
        let mut channels = self.send_channels.lock();
        channels.retain(|_, channel| channel.strong_count() > 0);
        let channel = match channels.get(&edge.handle).and_then(std::sync::Weak::upgrade) {
            Some(channel) => channel,
            None => {
                let channel = Arc::new(SendChannel::new(self.net.clone()));
                channels.insert(edge.handle.clone(), Arc::downgrade(&channel));
                channel
            }
        };
        edge.channel = channel;
        edge.shared_as = Some(origin);
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

    /// How many buffers one receive on the Net's `device` may carry (1 where it cannot say).
    pub fn max_recvs(&self, device: usize) -> usize {
        self.net.properties(device).map_or(1, |p| p.max_recvs.max(1))
    }

    /// The name of the Net's `device`.
    pub fn device_name(&self, device: usize) -> String {
        self.net.properties(device).map_or_else(|_| format!("device {device}"), |p| p.name)
    }

    /// Whether the communicator's links were closed (it is going).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_raised()
    }

    fn submit(&self, link: Link, direction: Direction, mailbox: Mailbox, edge: Box<dyn Progress>) -> ProxyWaker {
        let proxy = self.next_proxy(direction);
        self.links.lock().insert((link, direction), (mailbox, proxy));
        proxy.submit(edge);
        ProxyWaker(proxy)
    }

    /// Announces that `messages` more messages will go over the link (an operation starts);
    /// for a receive link, `independent` when the sender sends them all without waiting
    /// for this rank; `ll` when they run LL (in the link's LL slots).
    pub fn announce(&self, link: Link, direction: Direction, messages: u64, independent: bool, ll: bool) {
        if let Some((mailbox, proxy)) = self.links.lock().get(&(link, direction)) {
            let at = self.shared.trace.is_some().then(Instant::now);
            mailbox.lock().push(Announcement { messages, independent, ll, at });
            proxy.wake();
            return;
        }
        let relayed = self.relayed.lock().get(&link).filter(|_| direction == Direction::Send).cloned();
        if let Some((region, proxy)) = relayed.filter(|_| messages > 0) {
            // A relay takes the notes on each pass: room is short only while its thread is
            // held up. Waiting longer than a link may take to connect is a failure.
            let deadline = Instant::now() + self.setup_timeout;
            while !region.note(encode_note(messages, ll)) {
                if Instant::now() >= deadline || self.shared.closed.is_raised() {
                    let reason = format!("rank {proxy}'s PXN relay of this rank's sends to rank {} channel {} took no announcement for {:?}", link.peer, link.channel, self.setup_timeout);
                    self.shared.failure.lock().get_or_insert((proxy, reason));
                    return;
                }
                std::thread::yield_now();
            }
        }
    }

    /// Marks `link`'s sends as relayed by rank `proxy` of this host through `region` (a
    /// GPU kernel's FIFO in a segment that rank made): [`NetLinks::announce`] leaves their
    /// announcements there as notes.
    pub fn relayed(&self, link: Link, region: Arc<Region>, proxy: usize) {
        self.relayed.lock().insert(link, (region, proxy));
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
        self.relayed.lock().clear();
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

    /// How many receives the proxy posted with the buffers of several links (PXN's shared
    /// comms).
    pub fn receives_across_links(&self) -> u64 {
        self.shared.across_links.load(Ordering::Relaxed)
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
        if let Some(trace) = &self.shared.trace {
            // The timeline is written now, not by whichever thread drops the last link
            // (the process may be exiting): after the links' last events, if they go soon.
            self.close(Duration::from_secs(2));
            if let Err(e) = trace.write() {
                tracing::warn!(target: log_target::PROXY, "{e}");
            }
        }
    }
}

/// A link the proxy progresses.
trait Progress: Send {
    /// One pass at `now`: `Ok(true)` when it did something, an error when the link failed.
    fn progress(&mut self, now: Instant) -> Result<bool, String>;
    /// Whether its thread must keep polling (a kernel drives it and work is announced).
    fn needs_polling(&self) -> bool;
    /// Whether it has nothing to do until its thread is woken: no work announced or in
    /// flight, not connecting (an announcement, a filled or freed slot, a new link and a
    /// closing communicator all wake the thread).
    fn waits_for_work(&self) -> bool;
    /// The FIFO whose doorbell its thread also sleeps on (a PXN relay's: its origin, in
    /// another process, posts without waking the thread otherwise).
    fn doorbell(&self) -> Option<&Arc<Region>> {
        None
    }
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
    /// The comm this link sends on: its own, or one it shares (PXN, see [`SendChannel`]),
    /// whose messages it tags with its origin's rank.
    channel: Arc<SendChannel>,
    shared_as: Option<usize>,
    /// The registration of the FIFO's slots on the comm, once connected.
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
    /// Its place in the communicator's timeline.
    timeline: trace::LinkTimeline,
    /// Traced: since when it waits for its next message's slot to be filled, and its sends
    /// in flight (message, posted, bytes).
    waiting_since: Option<Instant>,
    posted: VecDeque<(u64, Instant, usize)>,
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
            channel: Arc::new(SendChannel::new(net.clone())),
            shared_as: None,
            net,
            device,
            context,
            handle: handle.to_vec(),
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
            timeline: trace::LinkTimeline::default(),
            waiting_since: None,
            posted: VecDeque::new(),
        })
    }

    /// Records that an operation announced `messages` for this link at `at` (taken in now).
    fn trace_announced(&mut self, at: Instant, messages: u64) {
        let Some(recorder) = self.shared.trace.clone() else { return };
        let named = self.timeline.unnamed().then(|| self.describe());
        self.timeline.announced(&recorder, named, at, messages);
    }

    /// Records `begin..end` spent on `name` for message `number` of `bytes`, where the
    /// communicator keeps a timeline.
    fn trace(&mut self, name: &'static str, begin: Instant, end: Instant, number: u64, bytes: usize) {
        let Some(recorder) = self.shared.trace.clone() else { return };
        let named = self.timeline.unnamed().then(|| self.describe());
        self.timeline.span(&recorder, named, name, begin, end, number, 1, bytes);
    }
}

impl Progress for SendLink {
    fn progress(&mut self, now: Instant) -> Result<bool, String> {
        // Traced announcements (none kept, nothing allocated, where no timeline is kept).
        let mut announced = Vec::new();
        for Announcement { messages, ll, at, .. } in self.mailbox.lock().drain(..) {
            self.core.announce(messages);
            ll::announce(&mut self.ll, messages, ll)?;
            announced.extend(at.map(|at| (at, messages)));
            if self.shared.trace.is_some() && messages > 0 && self.waiting_since.is_none() {
                self.waiting_since = Some(Instant::now());
            }
        }
        // A GPU kernel's sends relayed from another process: its host's announcements.
        while let Some(note) = self.relays_a_kernel().then(|| self.region.take_note()).flatten() {
            let (messages, ll) = decode_note(note);
            self.core.announce(messages);
            ll::announce(&mut self.ll, messages, ll)?;
        }
        for (at, messages) in announced {
            self.trace_announced(at, messages);
        }
        self.core.new_pass();
        let result = self.progress_sends(now);
        if self.shared.trace.is_some() && !self.core.active() {
            self.waiting_since = None;
        }
        result
    }

    fn needs_polling(&self) -> bool {
        match self.driver {
            Driver::Host => false,
            Driver::Device => self.core.active(),
            // A kernel's relayed sends: its announced messages show only by looking.
            Driver::Relay if self.relays_a_kernel() => self.core.active(),
            Driver::Relay => self.core.active() && !self.requests.is_empty(),
        }
    }

    fn waits_for_work(&self) -> bool {
        // A relay's origin fills its FIFO without announcing or waking this thread: it
        // rings the FIFO's doorbell, which the thread sleeps on too (where the kernel lets
        // a thread sleep on several words; otherwise it keeps polling).
        // Nothing announced, so the FIFO says what is left: a posted message the Net has
        // not taken yet (a receiver-driven comm waits for the receive's notice, which only
        // polling sees) keeps it awake.
        let woken = match self.driver {
            Driver::Relay => self.region.doorbell().is_some() && futex::wait_any_supported() && self.region.in_flight() == 0,
            _ => true,
        };
        woken && !self.core.active() && self.requests.is_empty()
    }

    fn doorbell(&self) -> Option<&Arc<Region>> {
        (self.driver == Driver::Relay).then_some(&self.region)
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

impl SendLink {
    /// Whether the link relays another process's GPU kernel's sends (a relay whose FIFO has
    /// LL slots): their announcements come as the FIFO's notes.
    fn relays_a_kernel(&self) -> bool {
        self.driver == Driver::Relay && self.ll.is_some()
    }

    /// Sends what the FIFO holds and tests what is in flight, until neither moves.
    fn progress_sends(&mut self, now: Instant) -> Result<bool, String> {
        let mut busy = false;
        loop {
            let filled = if self.memory.is_some() { self.fifo.filled() } else { 0 };
            match self.core.next(filled, now).map_err(|s| s.to_string())? {
                SendStep::Connect => {
                    let mut comm = self.channel.comm.lock();
                    if comm.is_none() {
                        *comm = self.net.connect(self.context.get(), self.device, &self.handle).map_err(|e| format!("connect: {e}"))?;
                    }
                    let Some(comm) = comm.as_mut() else { return Ok(busy) };
                    let (data, len) = registered(&self.region, self.ll.as_ref());
                    self.memory = Some(self.net.reg_mr(comm, data, len, MemoryKind::Host).map_err(|e| format!("registering the FIFO: {e}"))?);
                    self.core.connected();
                    busy = true;
                }
                SendStep::Send { slot, tag } => {
                    let tag = self.shared_as.map_or(tag, |origin| shared_tag(origin, tag));
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
                    // Traced: when the slot was found ready, before the Net's isend (which over
                    // sockets may write the message at once).
                    let found = self.shared.trace.is_some().then(Instant::now);
                    let sent = {
                        let mut comm = self.channel.comm.lock();
                        let (comm, memory) = (comm.as_mut().expect("connected"), self.memory.as_ref().expect("registered"));
                        // SAFETY: the slot stays filled and unchanged until released below,
                        // after the send completed.
                        unsafe { self.net.isend(comm, data, len, tag, memory) }.map_err(|e| format!("isend: {e}"))?
                    };
                    match sent {
                        Some(request) => {
                            self.requests.push_back(request);
                            self.core.sent();
                            busy = true;
                            if let Some(found) = found {
                                // Traced: the wait for this slot, the isend, and the send from
                                // when the slot was found ready to its completion.
                                let returned = Instant::now();
                                self.trace("wait for data", self.waiting_since.unwrap_or(found), found, message, len);
                                self.trace("isend", found, returned, message, len);
                                self.posted.push_back((message, found, len));
                                self.waiting_since = Some(returned);
                            }
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
                            if let Some((message, posted, len)) = self.posted.pop_front() {
                                self.trace("send", posted, Instant::now(), message, len);
                            }
                        }
                        None => return Ok(busy),
                    }
                }
                SendStep::Idle => return Ok(busy),
            }
        }
    }
}

impl Drop for SendLink {
    fn drop(&mut self) {
        // Requests go with their comm: closing it (with the last link sharing it) ends them.
        self.requests.clear();
        if let (Some(memory), Some(comm)) = (self.memory.take(), self.channel.comm.lock().as_mut()) {
            let _ = self.net.dereg_mr(comm, memory);
        }
    }
}

/// The Net's send comm of one link, or of several that share it: a relaying rank's proxy
/// sends its own messages and those of its host mates it relays to one receiver over one
/// comm (PXN), each link's tagged with its origin ([`shared_tag`]), so that the receiver
/// may post receives of several origins together. Connected by the first link to get
/// there, closed with the last.
struct SendChannel {
    net: Arc<dyn Net>,
    comm: Mutex<Option<SendComm>>,
}

impl SendChannel {
    fn new(net: Arc<dyn Net>) -> SendChannel {
        SendChannel { net, comm: Mutex::new(None) }
    }
}

impl Drop for SendChannel {
    fn drop(&mut self) {
        if let Some(comm) = self.comm.get_mut().take() {
            let _ = self.net.close_send(comm);
        }
    }
}

/// The tag of message `k` (its low 16 bits) of rank `origin` on a shared comm: both ends of
/// every link sharing it number their messages from 0, so origin and number tell them
/// apart (ranks beyond 65535 would share tags: they are not told apart).
fn shared_tag(origin: usize, k: u32) -> u32 {
    (origin as u32) << 16 | (k & 0xFFFF)
}

/// The receiving end of a network connection: one comm, and the links whose messages it
/// carries — one, or several that share it (PXN: every link whose messages the same
/// relaying rank sends, on one channel, [`SendChannel`]). Receives of several such links
/// are posted together (one `irecv`, up to the Net's `max_recvs`) when each offers
/// independent messages; each link's slots are published in its own order, whatever
/// order the receives complete in, so that no link waits for another's messages.
struct RecvLink {
    /// The rank whose proxy sends (the links' peer, or their PXN relay).
    sender: usize,
    net: Arc<dyn Net>,
    /// The communicator's context: finalized after this link's comms are closed.
    _context: Arc<NetContext>,
    listen: Option<Opaque>,
    comm: Option<RecvComm>,
    max_recvs: usize,
    /// The links, and those joining (a shared comm's later links, [`NetLinks::listen_shared`]).
    members: Vec<RecvMember>,
    joining: Option<Arc<Mutex<Vec<RecvMember>>>>,
    /// Receives in flight, oldest first.
    requests: VecDeque<InFlight>,
    /// The number of the next receive posted.
    next_request: u64,
    /// The member to offer the first buffer of the next receive (each in turn).
    first_offer: usize,
    /// The members' offers for the receive being posted (kept: no allocation per receive).
    offers: Vec<Offer>,
    driver: Driver,
    shared: Shared,
    /// Its place in the communicator's timeline; traced, when each receive in flight was
    /// posted (number, time).
    timeline: trace::LinkTimeline,
    posted: VecDeque<(u64, Instant)>,
}

/// A receive in flight: its number, the request, and its buffers' owners in order
/// (member, buffers).
type InFlight = (u64, Request, Vec<(usize, usize)>);

/// A member's buffers for the next receive: from its `first`-th free slot, tags from
/// `tag`; `wants` of them offered, `gets` given.
struct Offer {
    member: usize,
    first: usize,
    tag: u32,
    wants: usize,
    gets: usize,
}

/// One link of a [`RecvLink`]: its FIFO, what was announced to it, its receives.
struct RecvMember {
    link: Link,
    /// Whether its messages come tagged by origin (a shared comm's).
    shared_tags: bool,
    /// The registration of the FIFO's slots on the comm, once accepted.
    memory: Option<MrHandle>,
    fifo: Sender,
    region: Arc<Region>,
    core: RecvCore,
    mailbox: Mailbox,
    /// The FIFO's LL side, if its kernel runs LL; how many receives were posted (the next
    /// one's message number).
    ll: Option<LlLink>,
    posted: u64,
    /// Its part of each receive in flight, oldest first: (receive number, its buffers
    /// there, their sizes once done).
    parts: VecDeque<(u64, usize, Option<Vec<usize>>)>,
}

impl RecvMember {
    fn new(link: Link, region: Arc<Region>, shared_tags: bool, now: Instant, timeout: Duration, max_recvs: usize) -> RecvMember {
        RecvMember {
            link,
            shared_tags,
            memory: None,
            fifo: Sender::new(region.clone()),
            region,
            core: RecvCore::new(now, timeout, max_recvs),
            mailbox: Mailbox::default(),
            ll: None,
            posted: 0,
            parts: VecDeque::new(),
        }
    }

    /// Gives the member its FIFO's LL slots (a GPU kernel's FIFO).
    fn set_ll(&mut self, ll: Option<LlSlots>) -> Result<()> {
        self.ll = checked_ll(&self.region, ll)?.map(LlLink::new);
        if self.ll.is_some() {
            // The kernel reads an LL message as its lines land, and may free its slot
            // before the receive's completion publishes it.
            self.fifo.allow_early_release();
        }
        Ok(())
    }

    /// Registers the FIFO with the accepted `comm`.
    fn register(&mut self, net: &dyn Net, comm: &mut RecvComm) -> Result<(), String> {
        let (data, len) = registered(&self.region, self.ll.as_ref());
        self.memory = Some(net.reg_mr(comm, data, len, MemoryKind::Host).map_err(|e| format!("registering the FIFO: {e}"))?);
        self.core.accepted();
        Ok(())
    }

    /// Pushes onto `buffers` those of `count` receives from its `first`-th free slot on,
    /// tags from `tag` on.
    fn push_buffers(&mut self, first: usize, count: usize, tag: u32, buffers: &mut Vec<RecvBuffer>) {
        for i in 0..count {
            let message = self.posted + i as u64;
            // Only announced messages are posted: never `None`.
            let (data, len) = match ll::slot_of(&mut self.ll, message, self.region.nslots()) {
                Some(Some(slot)) => slot,
                _ => (self.fifo.free_slot_ptr(first + i), self.fifo.slot_bytes()),
            };
            let tag = tag.wrapping_add(i as u32);
            buffers.push(RecvBuffer { data, len, tag: if self.shared_tags { shared_tag(self.link.peer, tag) } else { tag } });
        }
    }
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
        shared_tags: bool,
    ) -> Result<(Vec<u8>, RecvLink)> {
        let listening = if shared_tags { net.listen_shared(context.get(), device) } else { net.listen(context.get(), device) };
        let (handle, listen) = listening.map_err(|e| Error::from_transport(format!("listening on device {device}"), e))?;
        let max_recvs = net.properties(device).map_err(|e| Error::from_transport(format!("asking device {device} its properties"), e))?.max_recvs.max(1);
        let edge = RecvLink {
            sender,
            net,
            _context: context,
            listen: Some(listen),
            comm: None,
            max_recvs,
            members: vec![RecvMember::new(link, region, shared_tags, now, timeout, max_recvs)],
            joining: None,
            requests: VecDeque::new(),
            next_request: 0,
            first_offer: 0,
            offers: Vec::new(),
            driver,
            shared,
            timeline: trace::LinkTimeline::default(),
            posted: VecDeque::new(),
        };
        Ok((handle, edge))
    }

    /// Posts receives while members offer buffers and the Net takes them: independent
    /// messages of several members together, up to `max_recvs`; a dependent one alone.
    /// Whether it posted any.
    fn post(&mut self, now: Instant) -> Result<bool, String> {
        let mut offers = std::mem::take(&mut self.offers);
        let posted = self.post_offers(&mut offers, now);
        self.offers = offers;
        posted
    }

    /// [`RecvLink::post`], gathering each receive's offers in `offers`.
    fn post_offers(&mut self, offers: &mut Vec<Offer>, now: Instant) -> Result<bool, String> {
        let mut busy = false;
        loop {
            let n = self.members.len();
            offers.clear();
            for member in (0..n).map(|i| (self.first_offer + i) % n) {
                let m = &mut self.members[member];
                let RecvStep::Post { first, count, tag } = m.core.next(m.fifo.free(), now).map_err(|s| s.to_string())? else { continue };
                if m.core.offers_independent() {
                    offers.push(Offer { member, first, tag, wants: count, gets: 0 });
                } else if offers.is_empty() {
                    // A dependent message goes alone.
                    offers.push(Offer { member, first, tag, wants: count, gets: 0 });
                    break;
                }
            }
            if offers.is_empty() {
                return Ok(busy);
            }
            // The receive's buffers go to the offering members in turn, one each, so that
            // one receive carries as many links' messages as it can.
            let mut room = self.max_recvs;
            while room > 0 && offers.iter().any(|o| o.gets < o.wants) {
                for offer in offers.iter_mut().filter(|o| o.gets < o.wants).take(room) {
                    offer.gets += 1;
                    room -= 1;
                }
            }
            offers.retain(|o| o.gets > 0);
            let total = offers.iter().map(|o| o.gets).sum();
            let mut buffers: Vec<RecvBuffer> = Vec::with_capacity(total);
            for o in offers.iter() {
                self.members[o.member].push_buffers(o.first, o.gets, o.tag, &mut buffers);
            }
            let handles: Vec<&MrHandle> = offers.iter().flat_map(|o| std::iter::repeat_n(self.members[o.member].memory.as_ref().expect("registered"), o.gets)).collect();
            let comm = self.comm.as_mut().expect("accepted");
            // SAFETY: the slots are free and stay unpublished until the receive completes.
            match unsafe { self.net.irecv(comm, &buffers, &handles) }.map_err(|e| format!("irecv: {e}"))? {
                Some(request) => {
                    if offers.len() > 1 {
                        self.shared.across_links.fetch_add(1, Ordering::Relaxed);
                    }
                    let number = self.next_request;
                    self.next_request += 1;
                    for o in offers.iter() {
                        let member = &mut self.members[o.member];
                        member.core.posted(o.gets);
                        member.posted += o.gets as u64;
                        member.parts.push_back((number, o.gets, None));
                    }
                    self.requests.push_back((number, request, offers.iter().map(|o| (o.member, o.gets)).collect()));
                    self.first_offer = (self.first_offer + 1) % n;
                    busy = true;
                    if self.shared.trace.is_some() {
                        self.posted.push_back((number, Instant::now()));
                    }
                }
                None => {
                    for o in offers.iter() {
                        self.members[o.member].core.refused();
                    }
                    return Ok(busy);
                }
            }
        }
    }

    /// Tests the receives in flight (with one member, only the oldest: its slots are
    /// published in order anyway) and publishes each member's filled slots in its own
    /// order. Whether any completed.
    fn complete(&mut self) -> Result<bool, String> {
        let mut busy = false;
        let only_oldest = self.members.len() == 1;
        let mut index = 0;
        while index < self.requests.len() {
            let (number, request, layout) = &mut self.requests[index];
            let Some(sizes) = self.net.test(request).map_err(|e| format!("test: {e}"))? else {
                if only_oldest {
                    break;
                }
                index += 1;
                continue;
            };
            let expected: usize = layout.iter().map(|&(_, count)| count).sum();
            if sizes.len() != expected {
                return Err(format!("a receive of {expected} buffers completed with {} sizes", sizes.len()));
            }
            let number = *number;
            self.trace_receive(number, &sizes);
            let (_, _, layout) = &self.requests[index];
            // A receive's buffers lie in the order its members offered them (one member's:
            // all of them).
            let mut part_of = |m: usize, part_sizes: Vec<usize>| self.members[m].parts.iter_mut().find(|(n, ..)| *n == number).expect("each member records its part").2 = Some(part_sizes);
            if let [(m, _)] = layout[..] {
                part_of(m, sizes);
            } else {
                let mut sizes = sizes.into_iter();
                for &(m, count) in layout.iter() {
                    part_of(m, sizes.by_ref().take(count).collect());
                }
            }
            self.requests.remove(index);
            busy = true;
        }
        for member in &mut self.members {
            while member.parts.front().is_some_and(|(_, _, sizes)| sizes.is_some()) {
                let (_, count, sizes) = member.parts.pop_front().expect("looked at");
                let completed = member.core.completed();
                debug_assert_eq!(completed, count, "the core's oldest receive is the member's");
                for size in sizes.expect("done") {
                    member.fifo.post(size);
                }
            }
        }
        Ok(busy)
    }

    /// Records that an operation announced `messages` for this link at `at` (taken in now).
    fn trace_announced(&mut self, at: Instant, messages: u64) {
        let Some(recorder) = self.shared.trace.clone() else { return };
        let named = self.timeline.unnamed().then(|| self.describe());
        self.timeline.announced(&recorder, named, at, messages);
    }

    /// Records receive `number`, from its posting to now, where the communicator keeps a
    /// timeline.
    fn trace_receive(&mut self, number: u64, sizes: &[usize]) {
        let Some(recorder) = self.shared.trace.clone() else { return };
        let Some(at) = self.posted.iter().position(|(n, _)| *n == number) else { return };
        let (_, posted) = self.posted.remove(at).expect("found");
        let named = self.timeline.unnamed().then(|| self.describe());
        self.timeline.span(&recorder, named, "receive", posted, Instant::now(), number, sizes.len(), sizes.iter().sum());
    }

    /// Takes in the members that joined since the last pass (registered at once if the
    /// comm is accepted).
    fn take_joining(&mut self) -> Result<(), String> {
        let Some(joining) = &self.joining else { return Ok(()) };
        let joined: Vec<RecvMember> = std::mem::take(&mut *joining.lock());
        for mut member in joined {
            if let Some(comm) = self.comm.as_mut() {
                member.register(self.net.as_ref(), comm)?;
            }
            self.members.push(member);
        }
        Ok(())
    }
}

impl Progress for RecvLink {
    fn progress(&mut self, now: Instant) -> Result<bool, String> {
        self.take_joining()?;
        let mut announced = Vec::new();
        for member in &mut self.members {
            for Announcement { messages, independent, ll, at } in member.mailbox.lock().drain(..) {
                member.core.announce(messages, independent);
                ll::announce(&mut member.ll, messages, ll)?;
                announced.extend(at.map(|at| (at, messages)));
            }
            member.core.new_pass();
        }
        for (at, messages) in announced {
            self.trace_announced(at, messages);
        }
        let accepting = self.comm.is_none();
        if accepting {
            // The first member's deadline is the comm's.
            if let RecvStep::Accept = self.members[0].core.next(0, now).map_err(|s| s.to_string())? {
                let listen = self.listen.as_mut().expect("listening until accepted");
                let Some(mut comm) = self.net.accept(listen).map_err(|e| format!("accept: {e}"))? else { return Ok(false) };
                for member in &mut self.members {
                    member.register(self.net.as_ref(), &mut comm)?;
                }
                self.comm = Some(comm);
                if let Some(listen) = self.listen.take() {
                    let _ = self.net.close_listen(listen);
                }
            } else {
                return Ok(false);
            }
        }
        let posted = self.post(now)?;
        let completed = self.complete()?;
        // A completion lifts a refusal (the Net had as many receives as it takes).
        let posted_more = completed && self.post(now)?;
        Ok(accepting || posted || completed || posted_more)
    }

    fn needs_polling(&self) -> bool {
        self.driver == Driver::Device && self.members.iter().any(|m| m.core.active())
    }

    fn waits_for_work(&self) -> bool {
        self.requests.is_empty() && self.members.iter().all(|m| !m.core.active()) && self.joining.as_ref().is_none_or(|j| j.lock().is_empty())
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn describe(&self) -> String {
        let from: Vec<String> = self.members.iter().map(|m| m.link.peer.to_string()).collect();
        let (ranks, channel) = (if from.len() == 1 { format!("rank {}", from[0]) } else { format!("ranks {}", from.join(", ")) }, self.members[0].link.channel);
        match self.sender {
            sender if self.members.len() == 1 && sender == self.members[0].link.peer => format!("receive from {ranks} channel {channel}"),
            relay => format!("receive from {ranks} channel {channel} relayed by rank {relay}"),
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
            for member in &mut self.members {
                if let Some(memory) = member.memory.take() {
                    let _ = self.net.dereg_mr(&mut comm, memory);
                }
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

/// A FIFO note announcing `messages` more of a GPU kernel's messages, LL or Simple (from the
/// kernel's host to the proxy of the rank relaying them: [`Region::note`]).
fn encode_note(messages: u64, ll: bool) -> u64 {
    messages << 1 | u64::from(ll)
}

fn decode_note(note: u64) -> (u64, bool) {
    (note >> 1, note & 1 == 1)
}

/// The memory a link registers with its Net: the FIFO's slots, and its LL slots after them.
fn registered(region: &Region, ll: Option<&LlLink>) -> (*mut u8, usize) {
    let (data, len) = region.slots_memory();
    (data, len + ll.map_or(0, |l| l.slots.slot_bytes * region.nslots()))
}

/// Wakes the proxy thread of a link ([`NetLinks::listen`], [`NetLinks::connect`]): the
/// host executor, after it fills or frees a slot of the link's FIFO.
#[derive(Clone, Copy)]
pub struct ProxyWaker(&'static Proxy);

impl ProxyWaker {
    pub fn wake(&self) {
        self.0.wake();
    }
}

/// The process's proxy threads, and how many links of each direction they were dealt.
struct Proxies {
    threads: Vec<Proxy>,
    /// Receive links dealt so far, and send links.
    dealt: [AtomicUsize; 2],
}

/// One proxy thread, its queue of new links and the links it progresses. The links are
/// behind a lock that the thread holds for one pass at a time, so that a rank's thread
/// waiting on the network may make a pass itself ([`help`]).
struct Proxy {
    /// Its number among the process's proxy threads (`oxccl-proxy-<index>`).
    index: usize,
    queue: Inbox<Box<dyn Progress>>,
    links: Mutex<Vec<Box<dyn Progress>>>,
    /// What the thread sleeps on: [`Proxy::wake`] bumps it.
    bell: AtomicU32,
    /// Whether the thread is asleep, or about to be (a wake-up then makes a system call).
    asleep: AtomicBool,
}

static PROXIES: OnceLock<Proxies> = OnceLock::new();

/// The process's proxy threads, started on first use with `threads` of them; later callers
/// get those, whatever they ask.
fn proxies(threads: usize) -> &'static Proxies {
    let mut made = false;
    let proxies = PROXIES.get_or_init(|| {
        made = true;
        let threads = (0..threads.max(1)).map(|i| Proxy { index: i, queue: Inbox::new(), links: Mutex::new(Vec::new()), bell: AtomicU32::new(0), asleep: AtomicBool::new(false) }).collect();
        Proxies { threads, dealt: [AtomicUsize::new(0), AtomicUsize::new(0)] }
    });
    if made {
        // Started once the static holds them (links queued meanwhile wait in their queue).
        for proxy in &proxies.threads {
            std::thread::Builder::new().name(format!("oxccl-proxy-{}", proxy.index)).spawn(move || run(proxy)).expect("starting an oxccl proxy thread");
        }
        tracing::info!(target: log_target::PROXY, "{} proxy thread(s)", proxies.threads.len());
    }
    if threads != 0 && threads != proxies.threads.len() {
        tracing::debug!(target: log_target::PROXY, "OXCCL_PROXY_THREADS={threads} ignored: the process's {} proxy thread(s) are running", proxies.threads.len());
    }
    proxies
}

impl Proxies {
    /// The thread for the next link of `direction` ([`deal`]).
    fn next(&self, direction: Direction) -> &Proxy {
        let dealt = self.dealt[usize::from(direction == Direction::Send)].fetch_add(1, Ordering::Relaxed);
        &self.threads[deal(direction, dealt, self.threads.len())]
    }
}

/// The thread (of `threads`) for a process's link of `direction` that is the `dealt`-th of
/// that direction: each direction's links in turn, the send links starting half way
/// round, so that the send and the receive links that are made together (a channel's, to
/// and from its ring neighbours) are on different threads wherever there are two. A
/// thread moves one link's bytes at a time: with both ends of a channel on one thread, a
/// message that arrives while the thread writes the channel's send to the socket (3-5 µs
/// over loopback on the GPU machines, where the write carries it into the receiver's
/// socket) waits for that write to end, on the way of every small exchange.
fn deal(direction: Direction, dealt: usize, threads: usize) -> usize {
    let start = match direction {
        Direction::Recv => 0,
        Direction::Send => (threads / 2).max(1),
    };
    (start + dealt) % threads
}

impl Proxy {
    fn submit(&self, link: Box<dyn Progress>) {
        self.queue.push(link);
        self.wake();
    }

    /// Wakes the thread if it sleeps, or makes its next sleep return at once: a bump of
    /// the bell, and a system call only if the thread is asleep ([`sleep`]).
    fn wake(&self) {
        self.bell.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            futex::wake(&self.bell, false);
        }
    }
}

/// The proxy threads a process starts when OXCCL_PROXY_THREADS does not say (0): one per
/// two of the machine's cores per rank of the communicator on the machine, for each of the
/// process's own ranks (`ranks` on the machine, ranks posing as hosts with NCCL_HOSTID
/// included: they share the cores all the same; `own` of them in this process, which
/// share its threads), 1 to [`MAX_DEFAULT_THREADS`] — enough cores left for the ranks
/// themselves. With the socket net's copies on the proxy threads (no helper threads, the
/// runtime's default), this was the fastest of the counts tried on 16 and 32 cores with 2
/// and 4 ranks, a process each (docs/NET.md, "Proxy threads, and no helpers").
pub(crate) fn default_threads(cores: usize, ranks: usize, own: usize) -> usize {
    (cores * own.max(1) / (2 * ranks.max(own).max(1))).clamp(1, MAX_DEFAULT_THREADS)
}

/// The most proxy threads a process starts by default: 2 ranks on 32 cores moved their
/// data fastest with 8 (16 were slower).
const MAX_DEFAULT_THREADS: usize = 8;

/// What one pass over a proxy thread's links found.
struct Pass {
    /// Some link did something.
    busy: bool,
    /// There is no link.
    empty: bool,
    /// Every link waits for work: only a wake-up brings more.
    waiting: bool,
    /// Some link needs polling.
    polling: bool,
}

/// One pass of `proxy`'s links (its new ones taken in first).
fn pass(proxy: &Proxy, links: &mut Vec<Box<dyn Progress>>) -> Pass {
    proxy.queue.take_into(links);
    let busy = progress_all(links, Instant::now());
    Pass { busy, empty: links.is_empty(), waiting: links.iter().all(|l| l.waits_for_work()), polling: links.iter().any(|l| l.needs_polling()) }
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
        let Pass { busy, empty, waiting, polling } = pass(proxy, &mut proxy.links.lock());
        if busy {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if empty || (waiting && idle >= 256) {
            // Nothing until a wake-up: no 50 us polling by a process whose links are all
            // idle (its ranks run an algorithm over other links; 8 ranks posing as 2 hosts
            // on the 2-core VM: those polls took the cores of the ranks at work).
            if sleep(proxy) {
                idle = 0;
            }
        } else if polling {
            // A kernel's next slot shows only by looking: look again soon. A yield, not a
            // spin: with several ranks' proxies on a host, spinning threads took the cores
            // the others needed (4 ranks posing as hosts on one 16-core machine: small
            // alltoall 45-52 us with yields, 70-104 spinning).
            std::thread::yield_now();
        } else if idle < 256 {
            std::thread::yield_now();
        } else {
            nap(proxy);
        }
    }
}

/// Waits up to 50 µs, or until a wake-up ([`Proxy::wake`]: an announcement, a new link):
/// a thread with work outstanding that found nothing for a while looks again soon.
fn nap(proxy: &Proxy) {
    proxy.asleep.store(true, Ordering::SeqCst);
    let seen = proxy.bell.load(Ordering::SeqCst);
    futex::wait(&proxy.bell, seen, Duration::from_micros(50), false);
    proxy.asleep.store(false, Ordering::Relaxed);
}

/// Sleeps until [`Proxy::wake`] or a post into one of its PXN relays' FIFOs (their
/// doorbells), at most 100 ms; or not at all when a last pass, made once both can wake
/// it, finds work (returns true then). The sleep and the wake-ups order as in
/// `fifo::Doorbell`: the thread marks itself asleep and reads the bell before it looks,
/// a waker bumps the bell before it reads the mark, so a wake-up between the look and the
/// sleep changes the bell and the sleep returns at once.
fn sleep(proxy: &Proxy) -> bool {
    proxy.asleep.store(true, Ordering::SeqCst);
    let seen = proxy.bell.load(Ordering::SeqCst);
    let mut links = proxy.links.lock();
    let relays: Vec<Arc<Region>> = links.iter().filter_map(|l| l.doorbell()).filter(|r| r.doorbell().is_some()).cloned().collect();
    if relays.len() >= futex::WAIT_ANY_MAX {
        // More doorbells than one wait takes: nap as a thread with work outstanding does.
        drop(links);
        nap(proxy);
        return false;
    }
    let bells: Vec<fifo::Doorbell<'_>> = relays.iter().filter_map(|r| r.doorbell()).collect();
    let mut waiters = vec![futex::Waiter { word: &proxy.bell, expected: seen, shared: false }];
    waiters.extend(bells.iter().map(|d| futex::Waiter { word: d.word(), expected: d.arm(), shared: true }));
    let last = pass(proxy, &mut links);
    drop(links);
    let found = last.busy || !(last.empty || last.waiting);
    if !found {
        let since = trace::tracing().then(Instant::now);
        futex::wait_any(&waiters, Duration::from_millis(100));
        if let Some(since) = since {
            trace::sleep(proxy.index, since, Instant::now());
        }
    }
    bells.iter().for_each(fifo::Doorbell::disarm);
    proxy.asleep.store(false, Ordering::Relaxed);
    found
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

#[cfg(test)]
mod tests {
    use super::{deal, default_threads, Direction};

    #[test]
    fn a_channel_s_send_and_receive_links_go_to_different_threads() {
        // A GPU communicator makes its receive links first, then its send links, a channel
        // each: channel k's are the k-th of their direction.
        for threads in 2..=8 {
            for channel in 0..32 {
                let (recv, send) = (deal(Direction::Recv, channel, threads), deal(Direction::Send, channel, threads));
                assert!(recv < threads && send < threads);
                assert_ne!(recv, send, "{threads} threads, channel {channel}");
            }
            // Each direction's links are spread over every thread.
            for direction in [Direction::Recv, Direction::Send] {
                let used: std::collections::BTreeSet<usize> = (0..threads).map(|k| deal(direction, k, threads)).collect();
                assert_eq!(used.len(), threads);
            }
        }
        assert_eq!(deal(Direction::Send, 5, 1), 0);
        assert_eq!(deal(Direction::Recv, 5, 1), 0);
    }

    #[test]
    fn default_threads_share_the_machine_s_cores_among_its_ranks() {
        // The measured cases (docs/NET.md): one H200 (16 cores) with 2 and 4 ranks, 2×H200
        // (32 cores) with 2 and 4.
        assert_eq!(default_threads(16, 2, 1), 4);
        assert_eq!(default_threads(16, 4, 1), 2);
        assert_eq!(default_threads(32, 2, 1), 8);
        assert_eq!(default_threads(32, 4, 1), 4);
        // A process of several ranks (threads) gets their share.
        assert_eq!(default_threads(16, 4, 4), 8);
        assert_eq!(default_threads(16, 4, 2), 4);
        // Never none, never past the cap; no rank counted is one.
        assert_eq!(default_threads(2, 4, 1), 1);
        assert_eq!(default_threads(2, 0, 0), 1);
        assert_eq!(default_threads(256, 1, 1), 8);
        assert_eq!(default_threads(16, 1, 3), 8);
    }
}
