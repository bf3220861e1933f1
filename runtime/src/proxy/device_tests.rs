//! The NET transport's host side with threads playing the GPU kernels: FIFOs in lent
//! memory spoken through raw addresses and the header offsets only (as `DevConn` gives a
//! kernel), moved by the real proxy threads over the real socket Net — on loopback, and
//! between two processes in namespaced hosts of a simulated cluster. A kernel never wakes
//! the proxy: the proxy must poll while work is announced.

use super::*;
use oxccl_transports::fifo::{self, Geometry};
use oxccl_transports::net::socket::SocketNet;
use std::sync::atomic::{AtomicU32, AtomicU64};

#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Line([u8; 128]);

/// A FIFO in lent memory, and the addresses a kernel would be given.
struct Fifo {
    region: Arc<Region>,
    header: usize,
    slots: usize,
    geometry: Geometry,
    /// The LL slots after the Simple ones (`LL_SLOT` bytes each).
    ll: LlSlots,
}

/// The LL slots of the tests' FIFOs: 63 lines of data each.
const LL_SLOT: usize = 1024;

impl Fifo {
    fn new(geometry: Geometry) -> Fifo {
        let header = vec![Line([0; 128]); fifo::HEADER_BYTES / 128].into_boxed_slice();
        let simple = geometry.slots * geometry.stride();
        let slots = vec![Line([0; 128]); (simple + geometry.slots * LL_SLOT).div_ceil(128)].into_boxed_slice();
        let (h, s) = (header.as_ptr() as usize, slots.as_ptr() as usize);
        // SAFETY: the boxes live in the owner, which outlives the region; the region's ends
        // (the proxy, and a test thread through the offsets) follow the FIFO protocol.
        let region = unsafe { Region::lent(geometry, h as *mut u8, s as *mut u8, Box::new((header, slots))) }.unwrap();
        Fifo { region, header: h, slots: s, geometry, ll: LlSlots { base: s + simple, slot_bytes: LL_SLOT } }
    }

    /// The FIFO of a shared segment made with LL slots as its tail (a PXN relay's), as
    /// this process maps it.
    fn over(region: Arc<Region>) -> Fifo {
        let (header, _) = region.segment_memory().expect("a shared segment");
        let (slots, _) = region.slots_memory();
        let (tail, tail_bytes) = region.tail_memory();
        let geometry = region.geometry();
        assert_eq!(tail_bytes, geometry.slots * LL_SLOT);
        Fifo { header: header as usize, slots: slots as usize, geometry, ll: LlSlots { base: tail as usize, slot_bytes: LL_SLOT }, region }
    }

    /// Word `w` (0 or 1) of line `l` of message `m`'s LL slot.
    fn ll_word(&self, m: u64, l: usize, w: usize) -> &AtomicU64 {
        // SAFETY: within the LL slots (l < LL_SLOT / 16), 8-aligned, living as long as `self`.
        unsafe { &*(self.ll.slot(m, self.geometry.slots).add(l * 16 + w * 8) as *const AtomicU64) }
    }

    /// Plays a sending kernel of an LL launch for message `m` of `n` bytes: the tail first
    /// (no fence orders it after the lines), then the lines in a scrambled order, the
    /// header among them, each 8-byte half whole.
    fn kernel_send_ll(&self, m: u64, n: usize) {
        let (tail, head) = (self.word(fifo::TAIL_OFFSET), self.word(fifo::HEAD_OFFSET));
        let deadline = Instant::now() + Duration::from_secs(60);
        while m + 1 > head.load(Ordering::Acquire) + self.geometry.slots as u64 {
            assert!(Instant::now() < deadline, "slot of LL message {m} never freed");
            std::hint::spin_loop();
        }
        tail.store(m + 1, Ordering::Release);
        let flag = (oxccl_kernels::device::ll::flag(m) as u64) << 32;
        let lines = n.div_ceil(8) + 1;
        let order: Vec<usize> = if m % 2 == 0 { (0..lines).rev().collect() } else { (0..lines).step_by(2).chain((1..lines).step_by(2)).collect() };
        for l in order {
            let data = |half: usize| -> u64 {
                if l == 0 {
                    return if half == 0 { n as u64 } else { 0 };
                }
                (0..4).map(|j| (l - 1) * 8 + half * 4 + j).filter(|&i| i < n).map(|i| (byte(m, i) as u64) << (8 * (i % 4))).sum()
            };
            self.ll_word(m, l, 0).store(data(0) | flag, Ordering::Relaxed);
            std::thread::yield_now();
            self.ll_word(m, l, 1).store(data(1) | flag, Ordering::Relaxed);
        }
    }

    /// Plays a receiving kernel of an LL launch: polls message `m`'s lines for its flag (no
    /// tail), checks its `n` bytes, advances the head.
    fn kernel_recv_ll(&self, m: u64, n: usize, check: impl Fn()) {
        let flag = oxccl_kernels::device::ll::flag(m);
        let deadline = Instant::now() + Duration::from_secs(60);
        // The header first: an empty message is only its header.
        for i in (0..2).map(|half| (half * 4) as isize - 8).chain((0..n).map(|i| i as isize)) {
            let (l, half) = if i < 0 { (0, (i + 8) as usize / 4) } else { (i as usize / 8 + 1, (i as usize % 8) / 4) };
            let word = loop {
                let w = self.ll_word(m, l, half).load(Ordering::Acquire);
                if (w >> 32) as u32 == flag {
                    break w;
                }
                check();
                assert!(Instant::now() < deadline, "LL message {m} did not come");
            };
            if i >= 0 {
                let i = i as usize;
                assert_eq!((word >> (8 * (i % 4))) as u8, byte(m, i), "LL message {m} byte {i}");
            }
        }
        self.word(fifo::HEAD_OFFSET).store(m + 1, Ordering::Release);
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: an 8-byte aligned counter inside the region's header, which lives as long
        // as `self`.
        unsafe { &*((self.header + offset) as *const AtomicU64) }
    }

    fn slot(&self, m: u64) -> *mut u8 {
        (self.slots + (m % self.geometry.slots as u64) as usize * self.geometry.stride()) as *mut u8
    }

    /// Plays a sending kernel for `messages`: message `m` of `len(m)` bytes into its slot, its size, the
    /// tail; waiting for the head before reusing a slot.
    fn kernel_send(&self, messages: std::ops::Range<u64>, len: impl Fn(u64) -> usize) {
        let (tail, head) = (self.word(fifo::TAIL_OFFSET), self.word(fifo::HEAD_OFFSET));
        let deadline = Instant::now() + Duration::from_secs(60);
        for m in messages {
            while m + 1 > head.load(Ordering::Acquire) + self.geometry.slots as u64 {
                assert!(Instant::now() < deadline, "slot of message {m} never freed");
                std::hint::spin_loop();
            }
            let (slot, n) = (self.slot(m), len(m));
            // SAFETY: slot m is free (the head says so) and holds slot_bytes >= n.
            unsafe { (0..n).for_each(|i| *slot.add(i) = byte(m, i)) };
            // SAFETY: sizes are u32s at SIZES_OFFSET, one per slot.
            unsafe { (*((self.header + fifo::SIZES_OFFSET) as *const AtomicU32).add((m % self.geometry.slots as u64) as usize)).store(n as u32, Ordering::Relaxed) };
            tail.store(m + 1, Ordering::Release);
        }
    }

    /// Plays a sending kernel's message `m` of a launch over LL (of [`ll_len`] bytes) or
    /// Simple (of [`len`] bytes).
    fn kernel_send_one(&self, m: u64, ll: bool) {
        if ll {
            self.kernel_send_ll(m, ll_len(m));
        } else {
            self.kernel_send(m..m + 1, len);
        }
    }

    /// Plays a receiving kernel's message `m`, as [`Fifo::kernel_send_one`] sent it.
    fn kernel_recv_one(&self, m: u64, ll: bool, check: impl Fn()) {
        if ll {
            self.kernel_recv_ll(m, ll_len(m), check);
        } else {
            self.kernel_recv(m..m + 1, len, check);
        }
    }

    /// Plays a receiving kernel for `messages`: waits for the tail, checks message `m`, advances the head;
    /// `check` is called while waiting (a link's failure ends the wait).
    fn kernel_recv(&self, messages: std::ops::Range<u64>, len: impl Fn(u64) -> usize, check: impl Fn()) {
        let (tail, head) = (self.word(fifo::TAIL_OFFSET), self.word(fifo::HEAD_OFFSET));
        let deadline = Instant::now() + Duration::from_secs(60);
        for m in messages {
            while tail.load(Ordering::Acquire) < m + 1 {
                check();
                assert!(Instant::now() < deadline, "message {m} did not come");
                std::hint::spin_loop();
            }
            let slot = self.slot(m);
            // SAFETY: slot m is filled (the tail says so) and within the slots.
            let bad = unsafe { (0..len(m)).find(|&i| *slot.add(i) != byte(m, i)) };
            assert_eq!(bad, None, "message {m} corrupted");
            head.store(m + 1, Ordering::Release);
        }
    }
}

fn byte(message: u64, i: usize) -> u8 {
    (message as usize * 131 + i * 7) as u8
}

fn len(m: u64) -> usize {
    1 + (m as usize * 37) % 4096
}

/// Bytes of LL message `m`: 0 to 504.
fn ll_len(m: u64) -> usize {
    (m as usize * 41) % 505
}

const GEOMETRY: Geometry = Geometry { slots: 8, slot_bytes: 4096 };

fn run(max_recvs: usize, independent: bool) {
    let net = Arc::new(SocketNet::with_max_recvs("127.0.0.1".parse().unwrap(), max_recvs));
    let (sender, receiver) = (NetLinks::new(net.clone(), 1, 2, Duration::from_secs(30)).unwrap(), NetLinks::new(net.clone(), 2, 2, Duration::from_secs(30)).unwrap());
    let link = Link { peer: 0, channel: 7 };
    let (rx, tx) = (Fifo::new(GEOMETRY), Arc::new(Fifo::new(GEOMETRY)));
    let (handle, _) = receiver.listen(link, link.peer, rx.region.clone(), Driver::Device, 0, None).unwrap();
    sender.connect(link, &handle, tx.region.clone(), Driver::Device, 0, None, None).unwrap();
    let messages = 500u64;
    sender.announce(link, Direction::Send, messages, independent, false);
    receiver.announce(link, Direction::Recv, messages, independent, false);
    let kernel = tx.clone();
    let send = std::thread::spawn(move || kernel.kernel_send(0..messages, len));
    rx.kernel_recv(0..messages, len, || {
        receiver.check().unwrap();
        sender.check().unwrap();
    });
    send.join().unwrap();
    // Every link let go before the memory goes.
    assert!(sender.close(Duration::from_secs(5)) && receiver.close(Duration::from_secs(5)));
    assert_eq!((Arc::strong_count(&tx.region), Arc::strong_count(&rx.region)), (1, 1), "the proxy still holds a FIFO");
    let stats = net.stats().snapshot();
    if independent && max_recvs > 1 {
        assert!(stats.irecv_grouped > 0, "{stats:?}");
    } else {
        assert_eq!(stats.irecv_grouped, 0, "{stats:?}");
    }
}

#[test]
fn kernel_driven_fifos_over_the_socket_net() {
    run(1, false);
    run(8, true);
    run(8, false);
}

/// Launches alternating between LL and Simple on one connection: the proxy sends an LL slot
/// only once every line shows its flag (the kernel's tail comes first), receives LL
/// messages into the LL slots and Simple ones into the Simple slots, and the receiving
/// kernel reads LL lines without a tail.
#[test]
fn kernel_driven_fifos_switch_between_ll_and_simple() {
    for max_recvs in [1, 8] {
        let net = Arc::new(SocketNet::with_max_recvs("127.0.0.1".parse().unwrap(), max_recvs));
        let (sender, receiver) = (NetLinks::new(net.clone(), 1, 2, Duration::from_secs(30)).unwrap(), NetLinks::new(net.clone(), 2, 2, Duration::from_secs(30)).unwrap());
        let link = Link { peer: 0, channel: 3 };
        let (rx, tx) = (Fifo::new(GEOMETRY), Arc::new(Fifo::new(GEOMETRY)));
        let (handle, _) = receiver.listen(link, link.peer, rx.region.clone(), Driver::Device, 0, Some(rx.ll)).unwrap();
        sender.connect(link, &handle, tx.region.clone(), Driver::Device, 0, Some(tx.ll), None).unwrap();
        // Launches of 1 to 12 messages, every third Simple; LL messages of 0 to 504 bytes.
        let launches: Vec<(u64, u64, bool)> = (0..60u64).scan(0u64, |first, i| {
            let count = 1 + (i * 5) % 12;
            let launch = (*first, count, i % 3 != 2);
            *first += count;
            Some(launch)
        }).collect();
        let (kernel, sender, launches) = (&*tx, &sender, &launches);
        std::thread::scope(|scope| {
            let send = scope.spawn(move || {
                for &(first, count, ll) in launches {
                    sender.announce(link, Direction::Send, count, true, ll);
                    for m in first..first + count {
                        kernel.kernel_send_one(m, ll);
                    }
                }
            });
            let check = || {
                receiver.check().unwrap();
                sender.check().unwrap();
            };
            for &(first, count, ll) in launches {
                receiver.announce(link, Direction::Recv, count, true, ll);
                for m in first..first + count {
                    rx.kernel_recv_one(m, ll, check);
                }
            }
            send.join().unwrap();
        });
        assert!(sender.close(Duration::from_secs(5)) && receiver.close(Duration::from_secs(5)));
    }
}

#[test]
fn ll_slots_must_follow_the_fifo_slots() {
    let net = Arc::new(SocketNet::new("127.0.0.1".parse().unwrap()));
    let links = NetLinks::new(net, 1, 1, Duration::from_secs(5)).unwrap();
    let fifo = Fifo::new(GEOMETRY);
    let elsewhere = LlSlots { base: fifo.ll.base + 64, slot_bytes: LL_SLOT };
    let e = links.listen(Link { peer: 0, channel: 0 }, 0, fifo.region.clone(), Driver::Device, 0, Some(elsewhere)).err().unwrap().to_string();
    assert!(e.contains("do not follow the FIFO's slots"), "{e}");
}

/// One end of [`kernel_driven_fifos_between_namespaced_hosts`] (does nothing when run as an
/// ordinary test): `OXCCL_TEST_FIFO_ROLE` is `recv` (listens, writes its handle into
/// `OXCCL_TEST_FIFO_DIR`, plays the receiving kernel) or `send` (connects to that handle,
/// plays the sending kernel, waits until the proxy sent everything); each on its host's
/// address `OXCCL_TEST_FIFO_IP`.
#[test]
fn fifo_child() {
    let Ok(role) = std::env::var("OXCCL_TEST_FIFO_ROLE") else { return };
    let dir = std::path::PathBuf::from(std::env::var("OXCCL_TEST_FIFO_DIR").unwrap());
    let ip = std::env::var("OXCCL_TEST_FIFO_IP").unwrap().parse().unwrap();
    let net = Arc::new(SocketNet::with_max_recvs(ip, 8));
    let links = NetLinks::new(net, 3, 2, Duration::from_secs(30)).unwrap();
    let link = Link { peer: 0, channel: 0 };
    let fifo = Fifo::new(GEOMETRY);
    let messages = 2000u64;
    let handle_file = dir.join("handle");
    if role == "recv" {
        let (handle, _) = links.listen(link, link.peer, fifo.region.clone(), Driver::Device, 0, None).unwrap();
        std::fs::write(dir.join("handle.tmp"), &handle).unwrap();
        std::fs::rename(dir.join("handle.tmp"), &handle_file).unwrap();
        links.announce(link, Direction::Recv, messages, true, false);
        fifo.kernel_recv(0..messages, len, || links.check().unwrap());
        println!("received {messages} messages");
    } else {
        let deadline = Instant::now() + Duration::from_secs(30);
        let handle = loop {
            if let Ok(handle) = std::fs::read(&handle_file) {
                break handle;
            }
            assert!(Instant::now() < deadline, "no handle from the receiving host");
            std::thread::sleep(Duration::from_millis(10));
        };
        links.connect(link, &handle, fifo.region.clone(), Driver::Device, 0, None, None).unwrap();
        links.announce(link, Direction::Send, messages, true, false);
        fifo.kernel_send(0..messages, len);
        while fifo.region.in_flight() > 0 {
            links.check().unwrap();
            assert!(Instant::now() < deadline + Duration::from_secs(30), "the proxy did not send everything");
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("sent {messages} messages");
    }
    assert!(links.close(Duration::from_secs(5)));
}

/// The same protocol between two processes on two namespaced hosts of a simulated cluster
/// (a veth pair each into a bridge): the proxy and socket Net carry a kernel's FIFO across
/// a real network path, receives grouped up to 8.
#[test]
fn kernel_driven_fifos_between_namespaced_hosts() {
    let Some(cluster) = oxccl_testkit::cluster::Cluster::or_skip(&oxccl_testkit::cluster::Spec::new(2, 1)) else { return };
    let dir = std::env::temp_dir().join(format!("oxccl-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let outputs = std::thread::scope(|s| {
        let ends: Vec<_> = [("recv", 0), ("send", 1)]
            .into_iter()
            .map(|(role, host)| {
                let host = &cluster.hosts[host];
                let mut command = host.command(std::env::current_exe().unwrap());
                command
                    .args(["proxy::device_tests::fifo_child", "--exact", "--nocapture", "--test-threads", "1"])
                    .env("OXCCL_TEST_FIFO_ROLE", role)
                    .env("OXCCL_TEST_FIFO_DIR", &dir)
                    .env("OXCCL_TEST_FIFO_IP", host.address(0).to_string());
                s.spawn(move || oxccl_testkit::run(command, Duration::from_secs(120)))
            })
            .collect();
        ends.into_iter().map(|end| end.join().unwrap()).collect::<Vec<_>>()
    });
    let _ = std::fs::remove_dir_all(&dir);
    for (role, output) in ["recv", "send"].iter().zip(&outputs) {
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && stdout.contains("2000 messages"), "{role}: {}\n{stdout}\n{stderr}", output.status);
    }
}

/// The proxy's one-way latency with threads playing the kernels: a ping-pong over two
/// links (`cargo test -p oxccl-runtime --lib pingpong -- --ignored --nocapture`; on a
/// machine with cores to spare: two proxy threads and two spinning "kernels" per side).
#[test]
#[ignore]
fn pingpong() {
    let net = Arc::new(SocketNet::with_max_recvs("127.0.0.1".parse().unwrap(), 1));
    let (a, b) = (NetLinks::new(net.clone(), 11, 2, Duration::from_secs(30)).unwrap(), NetLinks::new(net.clone(), 12, 2, Duration::from_secs(30)).unwrap());
    let link = Link { peer: 0, channel: 9 };
    let (ab_rx, ab_tx, ba_rx, ba_tx) = (Arc::new(Fifo::new(GEOMETRY)), Fifo::new(GEOMETRY), Fifo::new(GEOMETRY), Arc::new(Fifo::new(GEOMETRY)));
    let (h1, _) = b.listen(link, link.peer, ab_rx.region.clone(), Driver::Device, 0, None).unwrap();
    a.connect(link, &h1, ab_tx.region.clone(), Driver::Device, 0, None, None).unwrap();
    let (h2, _) = a.listen(link, link.peer, ba_rx.region.clone(), Driver::Device, 0, None).unwrap();
    b.connect(link, &h2, ba_tx.region.clone(), Driver::Device, 0, None, None).unwrap();
    let n = 20000u64;
    for links in [&a, &b] {
        links.announce(link, Direction::Send, n, false, false);
        links.announce(link, Direction::Recv, n, false, false);
    }
    let (rx, tx) = (ab_rx.clone(), ba_tx.clone());
    let echo = std::thread::spawn(move || {
        for m in 0..n {
            rx.kernel_recv(m..m + 1, |_| 8, || {});
            tx.kernel_send(m..m + 1, |_| 8);
        }
    });
    let start = Instant::now();
    for m in 0..n {
        ab_tx.kernel_send(m..m + 1, |_| 8);
        ba_rx.kernel_recv(m..m + 1, |_| 8, || {});
    }
    echo.join().unwrap();
    let rtt = start.elapsed() / n as u32;
    eprintln!("round trip {rtt:?}, one way {:?}", rtt / 2);
}

/// PXN for a GPU kernel's sends ([`a_kernels_sends_go_through_a_relaying_ranks_proxy`]),
/// in a process of its own so that no other test's links keep the proxy threads awake
/// (does nothing when run as an ordinary test). Three communicators' links: the origin's
/// (no link of its own: its sends are relayed), the relaying rank's and the receiver's.
#[test]
fn relay_child() {
    if std::env::var("OXCCL_TEST_RELAY_CHILD").is_err() {
        return;
    }
    let net = Arc::new(SocketNet::with_max_recvs("127.0.0.1".parse().unwrap(), 1));
    let new = |comm| NetLinks::new(net.clone(), comm, 2, Duration::from_secs(30)).unwrap();
    let (origin, relaying, receiver) = (new(21), new(22), new(23));
    let link = Link { peer: 0, channel: 5 };
    let rx = Fifo::new(GEOMETRY);
    let (handle, _) = receiver.listen(link, 1, rx.region.clone(), Driver::Device, 0, Some(rx.ll)).unwrap();
    // The relaying rank's side of the request: a segment with LL slots after the FIFO's.
    let (segment, opener) = Region::create_shared_with_tail(GEOMETRY, GEOMETRY.slots * LL_SLOT).unwrap();
    segment.enable_doorbell();
    let ll = LlSlots { base: segment.tail_memory().0 as usize, slot_bytes: LL_SLOT };
    relaying.relay(7, link, &handle, segment, 0, false, Some(ll)).unwrap();
    // The origin's: its kernel writes the segment as it maps it.
    let tx = Fifo::over(Region::open_shared(&opener).unwrap());
    origin.relayed(link, tx.region.clone(), 1);
    let check = || {
        for links in [&origin, &relaying, &receiver] {
            links.check().unwrap();
        }
    };
    // Launches of 1 to 12 messages, every third Simple (LL messages of 0 to 504 bytes);
    // every fifth is a lone Simple message after an idle spell, timed from its
    // announcement to its send's completion (before the receiver asks for it).
    let (mut first, mut woken) = (0u64, Vec::new());
    for i in 0..60u64 {
        let (count, ll) = if i % 5 == 4 { (1, false) } else { (1 + (i * 5) % 12, i % 3 != 2) };
        if i % 5 == 4 {
            std::thread::sleep(Duration::from_millis(120));
            let start = Instant::now();
            origin.announce(link, Direction::Send, 1, true, false);
            tx.kernel_send(first..first + 1, len);
            while tx.region.in_flight() > 0 {
                check();
                assert!(start.elapsed() < Duration::from_secs(10), "the relay did not send message {first}");
                std::thread::yield_now();
            }
            woken.push(start.elapsed());
        } else {
            origin.announce(link, Direction::Send, count, true, ll);
        }
        let kernel = &tx;
        std::thread::scope(|scope| {
            let send = scope.spawn(move || {
                for m in (first..first + count).filter(|_| i % 5 != 4) {
                    kernel.kernel_send_one(m, ll);
                }
            });
            receiver.announce(link, Direction::Recv, count, true, ll);
            for m in first..first + count {
                rx.kernel_recv_one(m, ll, check);
            }
            send.join().unwrap();
        });
        first += count;
    }
    woken.sort();
    let median = woken[woken.len() / 2];
    println!("{first} messages relayed; after an idle spell, sent in {median:?} (median of {}; {:?} at most)", woken.len(), woken.last().unwrap());
    // Asleep, the relaying thread wakes by itself every 100 ms: only the note's ring wakes
    // it sooner.
    assert!(median < Duration::from_millis(20), "the relaying proxy slept through the announcements: {woken:?}");
    for links in [&origin, &relaying, &receiver] {
        assert!(links.close(Duration::from_secs(5)));
    }
    assert_eq!((Arc::strong_count(&tx.region), Arc::strong_count(&rx.region)), (1, 1), "the proxy still holds a FIFO");
}

/// A GPU kernel's sends relayed by another rank of its host (PXN): the kernel writes a
/// FIFO in the relaying rank's segment, LL slots and all, as it would its own; its host
/// announces each launch in the FIFO's notes, which the relaying proxy takes (and which
/// wake it when it sleeps); the receiver's kernel gets every message intact.
#[test]
fn a_kernels_sends_go_through_a_relaying_ranks_proxy() {
    let output = oxccl_testkit::run(
        {
            let mut command = std::process::Command::new(std::env::current_exe().unwrap());
            command.args(["proxy::device_tests::relay_child", "--exact", "--nocapture", "--test-threads", "1"]).env("OXCCL_TEST_RELAY_CHILD", "1");
            command
        },
        Duration::from_secs(120),
    );
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && stdout.contains("messages relayed"), "{}\n{stdout}\n{stderr}", output.status);
    eprintln!("{}", stdout.lines().find(|l| l.contains("relayed")).unwrap_or_default());
}
