//! The proxy engine: progress threads shared by every communicator of the process, that
//! move network connections' FIFO slots through a [`Net`]. Each link (the sending or the
//! receiving end of a connection) is progressed by one thread, dealt in turn as links are
//! made, so that the copies through the sockets (the proxy's own work over TCP) of a
//! rank's sends and receives, and of the ranks of one process, run on several cores:
//! `OXCCL_PROXY_THREADS` threads, one per 4 cores by default (1 to 4), started by the
//! first communicator to make a network link. The executor wakes a link's thread when it
//! gives it work (a slot to send, a slot free to receive into), so an idle thread may
//! sleep without holding up the next step.
//!
//! Communicators hand a thread its links through a lock-free queue ([`Inbox`],
//! model-checked with loom in oxccl-transports) and never wait for it. A send link watches the FIFO the executor fills and `isend`s each posted
//! slot, releasing it when the send completes. A receive link posts `irecv`s into the free
//! slots of the FIFO the executor drains, and publishes slots as receives complete. The
//! executor announces, per operation, how many messages each link will carry and whether
//! they are independent (the sender sends them without waiting for this rank, as in
//! point-to-point and direct exchanges): independent messages are posted together, up to
//! the net's `max_recvs`; dependent ones (a ring's, where the next message needs this
//! rank's previous one) one at a time, since a grouped receive completes only when all its
//! buffers are filled.
//! A thread's loop never blocks on one peer: every net call is non-blocking and every
//! link is visited in turn.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use oxccl_transports::fifo::{Geometry, Receiver, Region, Sender};
use oxccl_transports::inbox::Inbox;
use oxccl_transports::net::{MrHandle, MemoryKind, Net, Opaque, RecvBuffer, RecvComm, Request, SendComm};
use parking_lot::Mutex;

use crate::algo::Link;
use crate::error::{Error, Result};
use crate::log_target;

/// A communicator's network links, and the way to the process's proxy threads.
pub(crate) struct NetLinks {
    net: Arc<dyn Net>,
    /// Threads to start, if this is the first communicator to make a network link.
    threads: usize,
    /// The process's proxy threads, once this communicator made a network link.
    proxies: OnceLock<&'static Proxies>,
    /// Receive links' announced messages, and the thread that progresses each.
    expected: Mutex<FxHashMap<Link, (Expected, &'static Proxy)>>,
    failure: Arc<Mutex<Option<(usize, String)>>>,
    closed: Arc<AtomicBool>,
}

impl NetLinks {
    /// Links over `net`, progressed by the process's proxy threads (`threads` of them, 0:
    /// automatic, if this is the first communicator to start them).
    pub fn new(net: Arc<dyn Net>, threads: usize) -> NetLinks {
        NetLinks { net, threads, proxies: OnceLock::new(), expected: Mutex::new(FxHashMap::default()), failure: Arc::default(), closed: Arc::new(AtomicBool::new(false)) }
    }

    /// The thread for a new link (the process's threads start with the first link).
    fn next_proxy(&self) -> &'static Proxy {
        self.proxies.get_or_init(|| proxies(self.threads)).next()
    }

    /// The receiving side of a network link: a local FIFO the proxy fills, the handle the
    /// sender connects with, and the proxy thread to wake when a slot is free again.
    pub fn listen(&self, link: Link, geometry: Geometry) -> Result<(Receiver, Vec<u8>, std::thread::Thread)> {
        let region = Region::heap(geometry.slots, geometry.slot_bytes).map_err(transport)?;
        let (handle, listen) = self.net.listen(0).map_err(transport)?;
        let expected = Expected::default();
        let proxy = self.next_proxy();
        self.expected.lock().insert(link, (expected.clone(), proxy));
        proxy.submit(Box::new(RecvLink {
            link,
            net: self.net.clone(),
            listen: Some(listen),
            comm: None,
            memory: None,
            fifo: Sender::new(region.clone()),
            expected,
            posted: 0,
            inflight: VecDeque::new(),
            tag: 0,
            shared: self.shared(),
        }));
        Ok((Receiver::new(region), handle, proxy.thread.clone()))
    }

    /// The sending side: a local FIFO the proxy drains into the net, and the proxy thread
    /// to wake when a slot is filled.
    pub fn connect(&self, link: Link, handle: &[u8], geometry: Geometry) -> Result<(Sender, std::thread::Thread)> {
        // A net's connect may need several calls (NCCL's non-blocking connect).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut comm = loop {
            if let Some(comm) = self.net.connect(0, handle).map_err(transport)? {
                break comm;
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::Timeout { phase: format!("connecting to rank {} over the network", link.peer), waited: Duration::from_secs(30) });
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let region = Region::heap(geometry.slots, geometry.slot_bytes).map_err(transport)?;
        let memory = self.net.reg_mr(&mut comm, std::ptr::null_mut(), 0, MemoryKind::Host).map_err(transport)?;
        let proxy = self.next_proxy();
        proxy.submit(Box::new(SendLink {
            link,
            net: self.net.clone(),
            comm,
            memory,
            fifo: Receiver::new(region.clone()),
            inflight: VecDeque::new(),
            tag: 0,
            shared: self.shared(),
        }));
        Ok((Sender::new(region), proxy.thread.clone()))
    }

    /// Announces that `messages` more messages will arrive on the receive link;
    /// `independent` when the sender sends them all without waiting for this rank.
    pub fn expect(&self, link: Link, messages: u64, independent: bool) {
        if let Some((expected, proxy)) = self.expected.lock().get(&link) {
            expected.0.lock().push_back((messages, independent));
            proxy.wake();
        }
    }

    /// Whether `link` is a network receive link.
    pub fn is_net_receive(&self, link: &Link) -> bool {
        self.expected.lock().contains_key(link)
    }

    /// The first failure of any of this communicator's links.
    pub fn check(&self) -> Result<()> {
        match &*self.failure.lock() {
            // A link ends when its peer does: name the peer, as the bootstrap would.
            Some((peer, reason)) => Err(Error::PeerFailed { rank: *peer as u32, reason: reason.clone() }),
            None => Ok(()),
        }
    }

    fn shared(&self) -> Shared {
        Shared { failure: self.failure.clone(), closed: self.closed.clone() }
    }
}

impl Drop for NetLinks {
    fn drop(&mut self) {
        // The proxy drops this communicator's links (and their comms) on its next pass.
        self.closed.store(true, Ordering::Release);
        for proxy in self.proxies.get().map_or(&[][..], |p| &p.threads[..]) {
            proxy.wake();
        }
    }
}

/// Announced messages of a receive link, in order: (count, independent).
#[derive(Clone, Default)]
struct Expected(Arc<Mutex<VecDeque<(u64, bool)>>>);

impl Expected {
    /// How many receives to post now: at most `limit`, from the front batch, one at a
    /// time unless the batch is independent. Takes them off the announcement.
    fn take(&self, max_recvs: usize, free: usize) -> usize {
        let mut batches = self.0.lock();
        while batches.front().is_some_and(|(n, _)| *n == 0) {
            batches.pop_front();
        }
        let Some((left, independent)) = batches.front_mut() else { return 0 };
        let n = (if *independent { max_recvs } else { 1 }).min(free).min(*left as usize);
        *left -= n as u64;
        n
    }

    /// Returns receives that could not be posted after all.
    fn give_back(&self, n: usize) {
        if let Some((left, _)) = self.0.lock().front_mut() {
            *left += n as u64;
        }
    }
}

#[derive(Clone)]
struct Shared {
    failure: Arc<Mutex<Option<(usize, String)>>>,
    closed: Arc<AtomicBool>,
}

/// A link the proxy progresses. `Ok(true)` when it did something.
trait Progress: Send {
    fn progress(&mut self) -> Result<bool, String>;
    fn shared(&self) -> &Shared;
    fn describe(&self) -> String;
    /// The peer (communicator rank) at the other end.
    fn peer(&self) -> usize;
}

struct SendLink {
    link: Link,
    net: Arc<dyn Net>,
    comm: SendComm,
    memory: MrHandle,
    fifo: Receiver,
    inflight: VecDeque<Request>,
    tag: u32,
    shared: Shared,
}

impl Progress for SendLink {
    fn progress(&mut self) -> Result<bool, String> {
        let mut busy = false;
        let filled = self.fifo.filled();
        while self.inflight.len() < filled {
            let (data, len) = self.fifo.filled_slot(self.inflight.len());
            // SAFETY: the slot stays filled and unchanged until released below, after the
            // send completed.
            match unsafe { self.net.isend(&mut self.comm, data, len, self.tag, &self.memory) }.map_err(|e| e.to_string())? {
                Some(request) => {
                    self.inflight.push_back(request);
                    self.tag = self.tag.wrapping_add(1);
                    busy = true;
                }
                None => break,
            }
        }
        while let Some(front) = self.inflight.front_mut() {
            match self.net.test(front).map_err(|e| e.to_string())? {
                Some(_) => {
                    self.inflight.pop_front();
                    self.fifo.release();
                    busy = true;
                }
                None => break,
            }
        }
        Ok(busy)
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn describe(&self) -> String {
        format!("send to rank {} channel {}", self.link.peer, self.link.channel)
    }

    fn peer(&self) -> usize {
        self.link.peer
    }
}

struct RecvLink {
    link: Link,
    net: Arc<dyn Net>,
    listen: Option<Opaque>,
    comm: Option<RecvComm>,
    memory: Option<MrHandle>,
    fifo: Sender,
    /// Messages announced by the executor and not yet posted.
    expected: Expected,
    /// Free slots handed to posted receives.
    posted: usize,
    inflight: VecDeque<(Request, usize)>,
    tag: u32,
    shared: Shared,
}

impl Progress for RecvLink {
    fn progress(&mut self) -> Result<bool, String> {
        let mut busy = false;
        if self.comm.is_none() {
            let listen = self.listen.as_mut().expect("listening until accepted");
            match self.net.accept(listen).map_err(|e| e.to_string())? {
                Some(mut comm) => {
                    self.memory = Some(self.net.reg_mr(&mut comm, std::ptr::null_mut(), 0, MemoryKind::Host).map_err(|e| e.to_string())?);
                    self.comm = Some(comm);
                    if let Some(l) = self.listen.take() {
                        let _ = self.net.close_listen(l);
                    }
                    busy = true;
                }
                None => return Ok(false),
            }
        }
        let comm = self.comm.as_mut().expect("accepted above");
        let memory = self.memory.as_ref().expect("registered with the comm");
        let max_recvs = self.net.properties(0).map(|p| p.max_recvs).unwrap_or(1).max(1);
        loop {
            let free = self.fifo.free() - self.posted;
            let n = self.expected.take(max_recvs, free);
            if n == 0 {
                break;
            }
            let buffers: Vec<RecvBuffer> = (0..n)
                .map(|i| RecvBuffer { data: self.fifo.free_slot_ptr(self.posted + i), len: self.fifo.slot_bytes(), tag: self.tag.wrapping_add(i as u32) })
                .collect();
            let handles: Vec<&MrHandle> = (0..n).map(|_| memory).collect();
            // SAFETY: the slots are free and stay unpublished until the receive completes.
            match unsafe { self.net.irecv(comm, &buffers, &handles) }.map_err(|e| e.to_string())? {
                Some(request) => {
                    self.inflight.push_back((request, n));
                    self.posted += n;
                    self.tag = self.tag.wrapping_add(n as u32);
                    busy = true;
                }
                None => {
                    self.expected.give_back(n);
                    break;
                }
            }
        }
        while let Some((front, n)) = self.inflight.front_mut() {
            match self.net.test(front).map_err(|e| e.to_string())? {
                Some(sizes) => {
                    for size in sizes {
                        self.fifo.post(size);
                    }
                    self.posted -= *n;
                    self.inflight.pop_front();
                    busy = true;
                }
                None => break,
            }
        }
        Ok(busy)
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn describe(&self) -> String {
        format!("receive from rank {} channel {}", self.link.peer, self.link.channel)
    }

    fn peer(&self) -> usize {
        self.link.peer
    }
}

/// The process's proxy threads, and the next to get a link.
struct Proxies {
    threads: Vec<Proxy>,
    next: AtomicUsize,
}

/// One proxy thread and its queue of new links.
struct Proxy {
    queue: Inbox<Box<dyn Progress>>,
    thread: std::thread::Thread,
}

static PROXIES: OnceLock<Proxies> = OnceLock::new();

/// The process's proxy threads, started on first use with `threads` of them (0: one per 4
/// cores, 1 to 4); later callers get those, whatever they ask.
fn proxies(threads: usize) -> &'static Proxies {
    let proxies = PROXIES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let count = if threads == 0 { (cores / 4).clamp(1, 4) } else { threads };
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
                Proxy { queue: Inbox::new(), thread: thread.thread().clone() }
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

fn run(proxy: &Proxy) {
    let mut links: Vec<Box<dyn Progress>> = Vec::new();
    let mut idle: u32 = 0;
    loop {
        proxy.queue.take_into(&mut links);
        links.retain(|l| !l.shared().closed.load(Ordering::Acquire));
        let mut busy = false;
        links.retain_mut(|link| match link.progress() {
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
        if busy {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if links.is_empty() {
            std::thread::park_timeout(Duration::from_millis(100));
        } else if idle < 256 {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(Duration::from_micros(50));
        }
    }
}

fn transport(e: oxccl_transports::Error) -> Error {
    Error::Transport(e.to_string())
}
