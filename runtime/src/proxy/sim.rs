//! A simulated [`Net`] and a deterministic driver for the proxy's links: one thread, a
//! virtual clock, a seeded random order of the executor's and the proxy's moves, a Net
//! that answers "busy" and completes requests late at random — and fails where a test
//! says. Each test runs many seeds; a failing seed reproduces exactly.
//!
//! The simulated Net keeps NCCL's contract (plugins/net/README.md): messages of a
//! connection arrive in the order they were sent; one receive of n buffers is one request,
//! done when n messages have arrived, each into the buffer whose tag it carries; a buffer
//! may be larger than its message, never smaller; at most [`MAX_REQUESTS`] requests in
//! flight per comm. Receiver-driven ([`SimNet::receiver_driven`], as the socket Net with
//! `max_recvs` > 1 and an IB NIC): a send goes only once a posted receive has a buffer of
//! its tag, each message lands in the oldest such receive, and receives complete in any
//! order — what lets several links share a comm (PXN, [`shared_links_deliver_each_in_order`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl_bootstrap::AbortFlag;
use oxccl_transports::fifo::{Receiver, Region, Sender};
use oxccl_transports::net::{CommConfig, Context, ListenComm, MemoryKind, MrHandle, Net, NetProperties, Opaque, RecvBuffer, RecvComm, Request, SendComm, MAX_REQUESTS};
use oxccl_transports::{Error as NetError, Result as NetResult};
use parking_lot::Mutex;

use super::{progress_all, Announcement, Driver, NetContext, Progress, RecvLink, RecvMember, SendChannel, SendLink, Shared};
use crate::algo::Link;

/// xorshift64*: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How the simulated Net misbehaves.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// Percent of `connect`, `accept`, `isend` and `irecv` calls that answer "not now".
    busy: u64,
    /// Most `test` calls a request needs before it may complete.
    delay: u64,
    /// The n-th `isend` (from 0) fails.
    fail_send: Option<u64>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Listen id → the connection accepted on it, once a sender connected.
    listens: HashMap<u64, Option<u64>>,
    /// Connection id → messages sent and not yet received, in order: (tag, bytes).
    wires: HashMap<u64, VecDeque<(u32, Vec<u8>)>>,
    requests: HashMap<u64, Pending>,
    /// Per comm (connection id and side): requests in flight.
    in_flight: HashMap<(u64, bool), usize>,
    /// Receiver-driven: per connection and tag, messages the posted receives still take.
    cleared: HashMap<(u64, u32), u64>,
    sends: u64,
    stats: Stats,
}

/// What the Net was asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stats {
    irecv_calls: u64,
    grouped: u64,
    largest_group: usize,
    registered: u64,
    deregistered: u64,
    closed: u64,
}

struct Pending {
    conn: u64,
    send: bool,
    /// `test` calls left before it may complete.
    wait: u64,
    /// A receive's buffers; a send's size.
    buffers: Vec<RecvBuffer>,
    /// Receiver-driven: the size of each buffer's message once it landed.
    filled: Vec<Option<usize>>,
    sent: usize,
    done: Option<Vec<usize>>,
}

struct SimNet {
    max_recvs: usize,
    receiver_driven: bool,
    faults: Faults,
    rng: Mutex<Rng>,
    state: Mutex<State>,
}

// SAFETY: the raw pointers in pending receives are the proxy's FIFO slots, written only
// under the state's lock from the one thread that drives the simulation.
unsafe impl Send for Pending {}

struct Comm(u64);

impl SimNet {
    fn new(seed: u64, max_recvs: usize, faults: Faults) -> SimNet {
        SimNet { max_recvs, receiver_driven: false, faults, rng: Mutex::new(Rng::new(seed)), state: Mutex::default() }
    }

    /// A receiver-driven Net (see the module's doc).
    fn receiver_driven(seed: u64, max_recvs: usize, faults: Faults) -> SimNet {
        SimNet { receiver_driven: true, ..SimNet::new(seed, max_recvs, faults) }
    }

    /// Receiver-driven: lands every message on `conn`'s wire in the oldest posted receive
    /// with a free buffer of its tag.
    fn land(state: &mut State, conn: u64) -> NetResult<()> {
        let messages: Vec<(u32, Vec<u8>)> = state.wires.get_mut(&conn).expect("accepted").drain(..).collect();
        for (tag, bytes) in messages {
            let mut receives: Vec<(&u64, &mut Pending)> = state.requests.iter_mut().filter(|(_, p)| p.conn == conn && !p.send && p.done.is_none()).collect();
            receives.sort_by_key(|(id, _)| **id);
            let found = receives.into_iter().find_map(|(_, p)| (0..p.buffers.len()).find(|&i| p.filled[i].is_none() && p.buffers[i].tag == tag).map(|i| (p, i)));
            let Some((pending, i)) = found else {
                return Err(NetError::Malformed { what: "message", reason: format!("tag {tag} was sent without a posted receive") });
            };
            let buffer = pending.buffers[i];
            if bytes.len() > buffer.len {
                return Err(NetError::MessageTooLarge { message: bytes.len(), buffer: buffer.len, tag });
            }
            // SAFETY: the caller's contract: the buffer is valid and untouched by others
            // until the receive is done.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.data, bytes.len()) };
            pending.filled[i] = Some(bytes.len());
        }
        Ok(())
    }

    fn busy(&self) -> bool {
        self.rng.lock().chance(self.faults.busy)
    }

    fn request(&self, state: &mut State, conn: u64, send: bool, buffers: Vec<RecvBuffer>, sent: usize) -> Option<Request> {
        let in_flight = state.in_flight.entry((conn, send)).or_default();
        let limit = if send { MAX_REQUESTS * self.max_recvs } else { MAX_REQUESTS };
        if *in_flight >= limit {
            return None;
        }
        *in_flight += 1;
        state.next_id += 1;
        let id = state.next_id;
        let wait = self.rng.lock().below(self.faults.delay + 1);
        let filled = vec![None; buffers.len()];
        state.requests.insert(id, Pending { conn, send, wait, buffers, filled, sent, done: None });
        Some(Opaque::new(Comm(id)))
    }

    fn stats(&self) -> Stats {
        self.state.lock().stats
    }
}

fn id(o: &Opaque) -> NetResult<u64> {
    Ok(o.get_ref::<Comm>("simulated comm")?.0)
}

impl Net for SimNet {
    fn name(&self) -> &str {
        "Sim"
    }

    fn init(&self, _comm_id: u64, _config: &CommConfig) -> NetResult<Context> {
        Ok(Context::new(()))
    }

    fn finalize(&self, context: Context) -> NetResult<()> {
        context.into_inner::<()>().map(drop)
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(1)
    }

    fn properties(&self, _device: usize) -> NetResult<NetProperties> {
        Ok(NetProperties {
            name: "sim0".into(),
            pci_path: None,
            guid: 0,
            ptr_support: Default::default(),
            reg_is_global: false,
            force_flush: false,
            speed_mbps: 100_000,
            port: 0,
            latency_us: 0.0,
            max_comms: 1024,
            max_recvs: self.max_recvs,
            offload: Default::default(),
            max_p2p_bytes: 1 << 30,
            max_coll_bytes: 1 << 30,
        })
    }

    fn listen(&self, _context: &Context, _device: usize) -> NetResult<(Vec<u8>, ListenComm)> {
        let mut state = self.state.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.listens.insert(id, None);
        Ok((id.to_le_bytes().to_vec(), Opaque::new(Comm(id))))
    }

    fn connect(&self, _context: &Context, _device: usize, handle: &[u8]) -> NetResult<Option<SendComm>> {
        if self.busy() {
            return Ok(None);
        }
        let listen = u64::from_le_bytes(handle.try_into().map_err(|_| NetError::InvalidArgument("handle".into()))?);
        let mut state = self.state.lock();
        state.next_id += 1;
        let conn = state.next_id;
        *state.listens.get_mut(&listen).ok_or_else(|| NetError::Closed("no such listener".into()))? = Some(conn);
        state.wires.insert(conn, VecDeque::new());
        Ok(Some(Opaque::new(Comm(conn))))
    }

    fn accept(&self, listen: &mut ListenComm) -> NetResult<Option<RecvComm>> {
        if self.busy() {
            return Ok(None);
        }
        let state = self.state.lock();
        Ok(state.listens.get(&id(listen)?).copied().flatten().map(|conn| Opaque::new(Comm(conn))))
    }

    fn reg_mr(&self, _comm: &mut Opaque, _data: *mut u8, len: usize, kind: MemoryKind) -> NetResult<MrHandle> {
        assert!(len > 0 && kind == MemoryKind::Host, "the FIFO's slots are registered");
        self.state.lock().stats.registered += 1;
        Ok(Opaque::new(()))
    }

    fn dereg_mr(&self, _comm: &mut Opaque, _handle: MrHandle) -> NetResult<()> {
        self.state.lock().stats.deregistered += 1;
        Ok(())
    }

    unsafe fn isend(&self, comm: &mut SendComm, data: *const u8, len: usize, tag: u32, _handle: &MrHandle) -> NetResult<Option<Request>> {
        if self.busy() {
            return Ok(None);
        }
        let conn = id(comm)?;
        let mut state = self.state.lock();
        if self.faults.fail_send == Some(state.sends) {
            return Err(NetError::Closed(format!("simulated failure of send {}", state.sends)));
        }
        if self.receiver_driven && state.cleared.get(&(conn, tag)).is_none_or(|&n| n == 0) {
            return Ok(None);
        }
        let Some(request) = self.request(&mut state, conn, true, Vec::new(), len) else { return Ok(None) };
        if self.receiver_driven {
            *state.cleared.get_mut(&(conn, tag)).expect("cleared") -= 1;
        }
        state.sends += 1;
        // SAFETY: the caller's contract: `len` readable bytes at `data` until the send is
        // done; the bytes are taken now (a Net may copy at once).
        let bytes = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
        state.wires.get_mut(&conn).expect("connected").push_back((tag, bytes));
        Ok(Some(request))
    }

    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> NetResult<Option<Request>> {
        assert!((1..=self.max_recvs).contains(&buffers.len()) && handles.len() == buffers.len(), "a receive of {} buffers", buffers.len());
        if self.busy() {
            return Ok(None);
        }
        let conn = id(comm)?;
        let mut state = self.state.lock();
        let Some(request) = self.request(&mut state, conn, false, buffers.to_vec(), 0) else { return Ok(None) };
        if self.receiver_driven {
            for buffer in buffers {
                *state.cleared.entry((conn, buffer.tag)).or_default() += 1;
            }
        }
        let stats = &mut state.stats;
        stats.irecv_calls += 1;
        stats.grouped += u64::from(buffers.len() > 1);
        stats.largest_group = stats.largest_group.max(buffers.len());
        Ok(Some(request))
    }

    fn test(&self, request: &mut Request) -> NetResult<Option<Vec<usize>>> {
        let mut state = self.state.lock();
        let id = id(request)?;
        let pending = state.requests.get_mut(&id).ok_or_else(|| NetError::InvalidArgument("unknown request".into()))?;
        if let Some(done) = &pending.done {
            return Ok(Some(done.clone()));
        }
        if pending.wait > 0 {
            pending.wait -= 1;
            return Ok(None);
        }
        let (conn, send, n) = (pending.conn, pending.send, pending.buffers.len());
        let done = if send {
            vec![pending.sent]
        } else if self.receiver_driven {
            SimNet::land(&mut state, conn)?;
            let pending = state.requests.get(&id).expect("looked up above");
            match pending.filled.iter().copied().collect::<Option<Vec<usize>>>() {
                Some(sizes) => sizes,
                None => return Ok(None),
            }
        } else {
            let wire = state.wires.get_mut(&conn).expect("accepted");
            if wire.len() < n {
                return Ok(None);
            }
            let messages: Vec<(u32, Vec<u8>)> = wire.drain(..n).collect();
            let pending = state.requests.get_mut(&id).expect("looked up above");
            let mut sizes = vec![0; n];
            for (tag, bytes) in messages {
                let i = pending.buffers.iter().position(|b| b.tag == tag).ok_or_else(|| NetError::Malformed { what: "message", reason: format!("tag {tag} matches no posted buffer") })?;
                let buffer = pending.buffers[i];
                if bytes.len() > buffer.len {
                    return Err(NetError::MessageTooLarge { message: bytes.len(), buffer: buffer.len, tag });
                }
                // SAFETY: the caller's contract: the buffer is valid and untouched by others
                // until the receive is done.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.data, bytes.len()) };
                sizes[i] = bytes.len();
            }
            sizes
        };
        *state.in_flight.get_mut(&(conn, send)).expect("counted when posted") -= 1;
        state.requests.get_mut(&id).expect("looked up above").done = Some(done.clone());
        Ok(Some(done))
    }

    fn close_send(&self, _comm: SendComm) -> NetResult<()> {
        self.state.lock().stats.closed += 1;
        Ok(())
    }

    fn close_recv(&self, _comm: RecvComm) -> NetResult<()> {
        self.state.lock().stats.closed += 1;
        Ok(())
    }

    fn close_listen(&self, _comm: ListenComm) -> NetResult<()> {
        Ok(())
    }
}

/// One connection's two links over `net`, their FIFOs' executor ends, and the clock.
struct Pair {
    send: SendLink,
    recv: RecvLink,
    /// What the executor fills (the send link's FIFO) and drains (the receive link's).
    producer: Sender,
    consumer: Receiver,
    shared: Shared,
    now: Instant,
}

const SLOTS: usize = 4;
const SLOT_BYTES: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(1);

impl Pair {
    fn new(net: Arc<SimNet>) -> Pair {
        let shared = Shared { failure: Arc::default(), closed: AbortFlag::new(), across_links: Arc::default(), trace: None };
        let now = Instant::now();
        let link = Link { peer: 1, channel: 0 };
        let (send_region, recv_region) = (Region::heap(SLOTS, SLOT_BYTES).unwrap(), Region::heap(SLOTS, SLOT_BYTES).unwrap());
        let context = Arc::new(NetContext::new(net.clone(), 1).unwrap());
        let (handle, recv) = RecvLink::new(link, link.peer, net.clone(), context.clone(), 0, recv_region.clone(), Driver::Host, shared.clone(), now, TIMEOUT, false).unwrap();
        let send = SendLink::new(link, net, context, 0, &handle, send_region.clone(), Driver::Host, shared.clone(), now, TIMEOUT).unwrap();
        Pair { send, recv, producer: Sender::new(send_region), consumer: Receiver::new(recv_region), shared, now }
    }

    /// An operation of `messages` starts: both links are told.
    fn announce(&mut self, messages: u64, independent: bool) {
        self.send.mailbox.lock().push(Announcement { messages, independent, ll: false, at: None });
        self.recv.members[0].mailbox.lock().push(Announcement { messages, independent, ll: false, at: None });
    }
}

/// Message k: its length and bytes.
fn message(k: u64) -> Vec<u8> {
    let len = 1 + (k as usize * 7) % SLOT_BYTES;
    (0..len).map(|i| (k as u8).wrapping_mul(31).wrapping_add(i as u8)).collect()
}

/// Moves `total` messages (announced in batches of `batch`) through a pair in a seeded
/// random order of the executor's and the proxy's moves. `Ok` when every message arrived
/// intact and in order; the link failure otherwise.
fn run(seed: u64, net: Arc<SimNet>, total: u64, batch: u64, independent: bool) -> Result<(), String> {
    let mut pair = Pair::new(net);
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let (mut announced, mut produced, mut consumed) = (0u64, 0u64, 0u64);
    for _ in 0..200_000 {
        if consumed == total {
            return Ok(());
        }
        // Operations in turn: the next batch is announced once the last one is consumed.
        if consumed == announced {
            let n = batch.min(total - announced);
            pair.announce(n, independent);
            announced += n;
        }
        pair.now += Duration::from_micros(1);
        match rng.below(4) {
            0 => {
                if produced < announced {
                    if let Some(slot) = pair.producer.try_reserve() {
                        let m = message(produced);
                        slot[..m.len()].copy_from_slice(&m);
                        pair.producer.post(m.len());
                        produced += 1;
                    }
                }
            }
            1 => {
                pair.send.progress(pair.now).map_err(|e| format!("send link: {e}"))?;
            }
            2 => {
                pair.recv.progress(pair.now).map_err(|e| format!("receive link: {e}"))?;
            }
            _ => {
                if let Some(bytes) = pair.consumer.try_peek() {
                    let expected = message(consumed);
                    if bytes != expected.as_slice() {
                        return Err(format!("message {consumed}: {} bytes, expected {}, or other bytes", bytes.len(), expected.len()));
                    }
                    pair.consumer.release();
                    consumed += 1;
                }
            }
        }
    }
    Err(format!("stuck after {consumed} of {total} messages"))
}

#[test]
fn every_message_arrives_in_order_whatever_the_net_does() {
    for seed in 0..300 {
        for (max_recvs, independent, receiver_driven) in [(1, true, false), (4, true, false), (8, false, false), (4, true, true), (8, false, true)] {
            let faults = Faults { busy: 20, delay: 3, fail_send: None };
            let net = Arc::new(if receiver_driven { SimNet::receiver_driven(seed, max_recvs, faults) } else { SimNet::new(seed, max_recvs, faults) });
            run(seed, net.clone(), 40, 10, independent).unwrap_or_else(|e| panic!("seed {seed}, max_recvs {max_recvs}, independent {independent}: {e}"));
            let stats = net.stats();
            if !independent || max_recvs == 1 {
                assert_eq!(stats.grouped, 0, "seed {seed}: dependent messages, or a Net of one receive at a time, are never grouped");
            }
            assert!(stats.largest_group <= max_recvs);
        }
    }
}

#[test]
fn independent_messages_are_received_together() {
    // A quiet Net: the proxy posts as many receives at once as the free slots allow.
    let net = Arc::new(SimNet::new(1, 8, Faults::default()));
    run(1, net.clone(), 64, 16, true).unwrap();
    let stats = net.stats();
    assert!(stats.grouped > 0 && stats.largest_group > 1, "{stats:?}");
    assert!(stats.irecv_calls < 64, "{} receive calls for 64 messages", stats.irecv_calls);
}

/// Two ranks' links sharing one comm to rank 0 (PXN: rank 1 sends its own messages and
/// relays rank 2's), the receiving link with both as members, and their FIFOs' executor
/// ends.
struct Sharing {
    sends: [SendLink; 2],
    recv: RecvLink,
    producers: [Sender; 2],
    consumers: [Receiver; 2],
    shared: Shared,
    now: Instant,
}

impl Sharing {
    fn new(net: Arc<SimNet>) -> Sharing {
        let shared = Shared { failure: Arc::default(), closed: AbortFlag::new(), across_links: Arc::default(), trace: None };
        let now = Instant::now();
        let origins = [Link { peer: 1, channel: 0 }, Link { peer: 2, channel: 0 }];
        let heap = || Region::heap(SLOTS, SLOT_BYTES).unwrap();
        let (send_regions, recv_regions) = ([heap(), heap()], [heap(), heap()]);
        let context = Arc::new(NetContext::new(net.clone(), 1).unwrap());
        let (handle, mut recv) = RecvLink::new(origins[0], 1, net.clone(), context.clone(), 0, recv_regions[0].clone(), Driver::Host, shared.clone(), now, TIMEOUT, true).unwrap();
        recv.members.push(RecvMember::new(origins[1], recv_regions[1].clone(), true, now, TIMEOUT, net.max_recvs));
        let channel = Arc::new(SendChannel::new(net.clone()));
        let sends = [0, 1].map(|i| {
            let mut send = SendLink::new(Link { peer: 0, channel: 0 }, net.clone(), context.clone(), 0, &handle, send_regions[i].clone(), Driver::Host, shared.clone(), now, TIMEOUT).unwrap();
            send.channel = channel.clone();
            send.shared_as = Some(origins[i].peer);
            send
        });
        let [s0, s1] = send_regions;
        let [r0, r1] = recv_regions;
        Sharing { sends, recv, producers: [Sender::new(s0), Sender::new(s1)], consumers: [Receiver::new(r0), Receiver::new(r1)], shared, now }
    }

    /// An operation of `messages` on each link starts: every end is told.
    fn announce(&mut self, messages: u64, independent: bool) {
        for i in 0..2 {
            self.sends[i].mailbox.lock().push(Announcement { messages, independent, ll: false, at: None });
            self.recv.members[i].mailbox.lock().push(Announcement { messages, independent, ll: false, at: None });
        }
    }
}

/// Moves `total` messages of each of two links sharing a comm, in operations of `batch`
/// per link, through a seeded random order of both executors' and the proxy's moves.
/// `cross`: link 1's message k is written only once link 0's message k + `cross` (or the
/// operation's last) was consumed (a tree's parent waiting for this rank's sum of a child's
/// chunks, both sent by one relaying rank), its messages then announced dependent: link 0's
/// receives may then be posted after link 1's that wait for them. The receives posted for
/// both links' messages at once, or the failure.
fn run_shared(seed: u64, net: Arc<SimNet>, total: u64, batch: u64, independent: bool, cross: Option<u64>) -> Result<u64, String> {
    let mut s = Sharing::new(net);
    let mut rng = Rng::new(seed ^ 0x5eed);
    let (mut announced, mut produced, mut consumed) = (0u64, [0u64; 2], [0u64; 2]);
    let bytes = |link: usize, k: u64| message(k + 1000 * link as u64);
    for _ in 0..400_000 {
        if consumed == [total; 2] {
            return Ok(s.shared.across_links.load(Ordering::Relaxed));
        }
        if consumed == [announced; 2] {
            let n = batch.min(total - announced);
            s.announce(n, independent && cross.is_none());
            announced += n;
        }
        s.now += Duration::from_micros(1);
        let i = rng.below(2) as usize;
        match rng.below(4) {
            0 => {
                let waits = cross.is_some_and(|lag| i == 1 && consumed[0] <= (produced[1] + lag).min(announced - 1));
                if produced[i] < announced && !waits {
                    if let Some(slot) = s.producers[i].try_reserve() {
                        let m = bytes(i, produced[i]);
                        slot[..m.len()].copy_from_slice(&m);
                        s.producers[i].post(m.len());
                        produced[i] += 1;
                    }
                }
            }
            1 => {
                s.sends[i].progress(s.now).map_err(|e| format!("send link {i}: {e}"))?;
            }
            2 => {
                s.recv.progress(s.now).map_err(|e| format!("receive link: {e}"))?;
            }
            _ => {
                if let Some(got) = s.consumers[i].try_peek() {
                    let expected = bytes(i, consumed[i]);
                    if got != expected.as_slice() {
                        return Err(format!("link {i} message {}: {} bytes, expected {}, or other bytes", consumed[i], got.len(), expected.len()));
                    }
                    s.consumers[i].release();
                    consumed[i] += 1;
                }
            }
        }
    }
    Err(format!("stuck after {consumed:?} of {total} messages each"))
}

/// Links sharing a comm over a receiver-driven Net each get their messages intact and in
/// order, whatever the Net does: independent ones several links to a receive, dependent
/// ones a receive each, and a link whose sender waits for this rank to consume the other
/// link's messages is never held up behind them.
#[test]
fn shared_links_deliver_each_in_order() {
    for seed in 0..200 {
        for (max_recvs, independent, cross) in [(2, true, None), (8, true, None), (8, false, None), (4, false, Some(0)), (4, false, Some(3))] {
            let net = Arc::new(SimNet::receiver_driven(seed, max_recvs, Faults { busy: 20, delay: 3, fail_send: None }));
            run_shared(seed, net.clone(), 30, 10, independent, cross).unwrap_or_else(|e| panic!("seed {seed}, max_recvs {max_recvs}, independent {independent}, cross {cross:?}: {e}"));
            let stats = net.stats();
            assert!(stats.largest_group <= max_recvs);
            if !independent {
                assert_eq!(stats.grouped, 0, "seed {seed}: dependent messages are never grouped");
            }
        }
    }
    // A quiet Net: independent messages of both links share receives.
    let net = Arc::new(SimNet::receiver_driven(1, 8, Faults::default()));
    let across = run_shared(1, net, 64, 16, true, None).unwrap();
    assert!(across > 0, "no receive carried both links' messages");
}

#[test]
fn a_failed_send_fails_the_link_naming_the_peer() {
    for seed in 0..50 {
        let net = Arc::new(SimNet::new(seed, 4, Faults { busy: 10, delay: 2, fail_send: Some(5) }));
        let e = run(seed, net, 40, 10, true).unwrap_err();
        assert!(e.contains("send link") && e.contains("isend") && e.contains("simulated failure of send 5"), "seed {seed}: {e}");
    }
    // Through the proxy thread's pass: the failure is recorded for the communicator, with
    // the peer, and the link is dropped (its comm closed, its registration undone).
    let net = Arc::new(SimNet::new(7, 1, Faults { fail_send: Some(0), ..Faults::default() }));
    let mut pair = Pair::new(net.clone());
    let shared = pair.shared.clone();
    pair.announce(1, false);
    let slot = pair.producer.try_reserve().unwrap();
    slot[0] = 1;
    pair.producer.post(1);
    let mut links: Vec<Box<dyn Progress>> = vec![Box::new(pair.send)];
    for _ in 0..10 {
        progress_all(&mut links, pair.now);
    }
    assert!(links.is_empty(), "the failed link is dropped");
    let (peer, reason) = shared.failure.lock().clone().expect("the failure is recorded");
    assert_eq!(peer, 1);
    assert!(reason.contains("send to rank 1 channel 0") && reason.contains("simulated failure"), "{reason}");
    let stats = net.stats();
    assert_eq!((stats.registered, stats.deregistered, stats.closed), (1, 1, 1), "{stats:?}");
}

#[test]
fn a_peer_that_never_connects_fails_the_receive_link_at_the_setup_timeout() {
    let net = Arc::new(SimNet::new(3, 1, Faults::default()));
    let mut pair = Pair::new(net);
    assert_eq!(pair.recv.progress(pair.now), Ok(false), "nobody connected yet");
    let e = pair.recv.progress(pair.now + TIMEOUT).unwrap_err();
    assert!(e.contains("the peer's connection did not happen within 1s"), "{e}");
}

#[test]
fn closed_communicators_links_are_dropped_and_their_comms_closed() {
    let net = Arc::new(SimNet::new(5, 1, Faults::default()));
    let mut pair = Pair::new(net.clone());
    let now = pair.now;
    // Connect both ends.
    for _ in 0..4 {
        pair.send.progress(now).unwrap();
        pair.recv.progress(now).unwrap();
    }
    let shared = pair.shared.clone();
    let mut links: Vec<Box<dyn Progress>> = vec![Box::new(pair.send), Box::new(pair.recv)];
    progress_all(&mut links, now);
    assert_eq!(links.len(), 2);
    shared.closed.raise();
    progress_all(&mut links, now);
    assert!(links.is_empty());
    assert_eq!(net.stats().closed, 2);
}
