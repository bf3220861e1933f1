//! Measurements of the socket Net on this machine's loopback, not checks (each test
//! `#[ignore]`d; run one with `cargo test --release -p oxccl-transports <name> -- --ignored
//! --nocapture`): a comm's throughput by streams and message size, its one-way latency
//! against plain TCP's, and its data path's CPU cost against plain TCP's with both ends on
//! one core or two ranks each bound to a core of its own, and the time a message takes
//! through socket buffers of a given size.

use super::data_path_tests::{net, LOOPBACK};
use super::tests::{deadline, exchange_over, pair, pair_between, wait};
use super::*;
use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Loopback throughput of one comm, one thread per end calling `test` as a proxy does:
/// `cargo test --release -p oxccl-transports socket_throughput -- --ignored --nocapture`.
/// `OXCCL_TEST_SOCKET_STREAMS` picks the settings (threads x sockets per thread, e.g.
/// `0x0,1x1,2x2,4x4`), `OXCCL_TEST_SOCKET_SIZES` the message sizes in MiB (or KiB: `16K`).
#[test]
#[ignore = "a measurement, not a check"]
fn socket_throughput() {
    let list = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let settings: Vec<(usize, usize)> = list("OXCCL_TEST_SOCKET_STREAMS", "0x0,1x1,2x1,2x2,4x4")
        .split(',')
        .map(|pair| {
            let (threads, sockets) = pair.split_once('x').expect("threads x sockets");
            (threads.trim().parse().unwrap(), sockets.trim().parse().unwrap())
        })
        .collect();
    // MiB, or KiB with a K after the number.
    let size = |text: &str| match text.trim().strip_suffix('K') {
        Some(kib) => kib.parse::<usize>().unwrap() << 10,
        None => text.trim().parse::<usize>().unwrap() << 20,
    };
    let sizes: Vec<usize> = list("OXCCL_TEST_SOCKET_SIZES", "1,4,16,64,128").split(',').map(size).collect();
    let rounds: usize = list("OXCCL_TEST_SOCKET_ROUNDS", "3").parse().unwrap();
    println!("streams | message | GB/s, best of {rounds} rounds (each round: the rounds' rates)");
    for &size in &sizes {
        for &(threads, sockets) in &settings {
            // 1 GiB per round (at least 8 messages), 4 in flight (as a proxy keeps slots going).
            let count = ((1 << 30) / size).max(8);
            let rates: Vec<f64> = (0..rounds).map(|_| throughput(threads, sockets, size, count, 4, Pinning::default())).collect();
            let best = rates.iter().copied().fold(0.0, f64::max);
            let each: Vec<String> = rates.iter().map(|rate| format!("{rate:.2}")).collect();
            println!("{threads}x{sockets} | {} KiB | {best:.2} ({})", size >> 10, each.join(" "));
        }
    }
}

/// Where [`throughput`]'s two threads run, and how its comm works.
#[derive(Clone, Copy, Default)]
struct Pinning {
    /// Both threads on this core (the caller's affinity is restored after).
    core: Option<usize>,
    /// Receiver-driven comms (the plugin's, with maxRecvs 8), else eager.
    receiver_driven: bool,
}

/// Time for 1 MiB in four messages of 256 KiB through a comm whose sockets were given
/// `NCCL_SOCKET_SNDBUF` = `NCCL_SOCKET_RCVBUF` of 4 KiB to 256 KiB and the kernel's sizes,
/// no helpers: `cargo test --release -p oxccl-transports socket_buffer_sizes -- --ignored
/// --nocapture`. Small buffers make TCP wait on its timers (docs/NET.md).
#[test]
#[ignore = "a measurement, not a check"]
fn socket_buffer_sizes() {
    println!("SO_SNDBUF = SO_RCVBUF asked | ms for 1 MiB (4 x 256 KiB)");
    for bytes in [Some(4 << 10), Some(8 << 10), Some(16 << 10), Some(32 << 10), Some(64 << 10), Some(128 << 10), Some(256 << 10), None] {
        let net = Arc::new(net(0, 0, 1).with_buffers(SocketBuffers { send: bytes, recv: bytes }));
        let start = Instant::now();
        exchange_over(net, 1, &[256 << 10; 4]);
        let label = bytes.map_or("kernel's".to_string(), |b| format!("{} KiB", b >> 10));
        println!("{label:>27} | {:.1}", start.elapsed().as_secs_f64() * 1e3);
    }
}

/// CPU cost of the socket Net's data path against plain TCP: sender and receiver threads
/// on one core, as a rank bound to one core runs both directions of its proxy on it
/// (mpirun's binding of 2 ranks), so that the rate is that of the CPU work per byte of
/// both ends together. 512 KiB messages (NCCL's network chunk), 4 in flight; plain TCP
/// writes and reads the same messages with a 12-byte header each over non-blocking
/// sockets, yielding when one would block, as the Net's callers here do:
/// `cargo test --release -p oxccl-transports socket_cpu_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn socket_cpu_cost_on_one_core() {
    let (size, count, rounds) = (512 << 10, 4096, 5);
    let pinned = |receiver_driven| Pinning { core: Some(0), receiver_driven };
    println!("one core, {} KiB messages, GB/s per round: plain TCP | the Net, eager | the Net, receiver-driven", size >> 10);
    let mut best = [0f64; 3];
    for round in 0..rounds {
        let rates = [tcp_throughput(size, count, 4, 0), throughput(0, 0, size, count, 4, pinned(false)), throughput(0, 0, size, count, 4, pinned(true))];
        for (best, rate) in best.iter_mut().zip(rates) {
            *best = best.max(rate);
        }
        println!("round {round}: {:.2} | {:.2} | {:.2}", rates[0], rates[1], rates[2]);
    }
    println!("best: {:.2} | {:.2} ({:.2}x) | {:.2} ({:.2}x)", best[0], best[1], best[1] / best[0], best[2], best[2] / best[0]);
}

/// The same cost where it matters, two ranks each bound to a core of its own (as mpirun
/// binds 2 ranks), each rank one thread that sends to the other and receives from it at
/// once (a proxy thread in a 2-rank all_gather), yielding when nothing progressed (as
/// NCCL's proxy does), and with `OXCCL_TEST_BUSY=1` a second thread on each core that spins
/// (nccl-tests' thread polling its stream): GB/s each way, plain TCP | eager | receiver-driven.
#[test]
#[ignore = "a measurement, not a check"]
fn socket_cpu_cost_two_ranks() {
    let busy = std::env::var("OXCCL_TEST_BUSY").is_ok_and(|v| v == "1");
    let (size, count, rounds) = (512 << 10, 4096, 5);
    println!("two ranks on cores 0 and 1{}, {} KiB messages each way, GB/s per round: plain TCP | the Net, eager | the Net, receiver-driven", if busy { " beside a spinning thread each" } else { "" }, size >> 10);
    let mut best = [0f64; 3];
    for round in 0..rounds {
        let rates = [exchange(None, size, count, busy), exchange(Some(false), size, count, busy), exchange(Some(true), size, count, busy)];
        for (best, rate) in best.iter_mut().zip(rates) {
            *best = best.max(rate);
        }
        println!("round {round}: {:.2} | {:.2} | {:.2}", rates[0], rates[1], rates[2]);
    }
    println!("best: {:.2} | {:.2} ({:.2}x) | {:.2} ({:.2}x)", best[0], best[1], best[1] / best[0], best[2], best[2] / best[0]);
}

/// GB/s each way of two ranks exchanging `count` messages of `size` bytes each way, 4 in
/// flight each way: over plain TCP (`net` None) or the Net (eager, or receiver-driven).
fn exchange(net: Option<bool>, size: usize, count: usize, busy: bool) -> f64 {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .filter(|_| busy)
        .map(|core| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin_to(core);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let ranks: Vec<_> = match net {
        None => {
            let listeners: Vec<std::net::TcpListener> = (0..2).map(|_| std::net::TcpListener::bind((LOOPBACK, 0)).unwrap()).collect();
            let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
            // Rank r sends on a connection to rank 1 - r's listener and receives on its own.
            let outs: Vec<TcpStream> = (0..2).map(|r| TcpStream::connect(addrs[1 - r]).unwrap()).collect();
            let ins: Vec<TcpStream> = listeners.iter().map(|l| l.accept().unwrap().0).collect();
            outs.into_iter().zip(ins).enumerate().map(|(core, (out, inp))| std::thread::spawn(move || tcp_rank(core, out, inp, size, count))).collect()
        }
        Some(receiver_driven) => {
            let make = || {
                let net = self::net(0, 0, if receiver_driven { 8 } else { 1 });
                Arc::new(if receiver_driven { net.receiver_driven() } else { net })
            };
            let nets = [make(), make()];
            // Rank r's send comm to rank 1 - r, and its receive comm from it.
            let (s01, r01) = pair_between(&nets[0], &nets[1]);
            let (s10, r10) = pair_between(&nets[1], &nets[0]);
            let [n0, n1] = nets;
            let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            [(0, n0, s01, r10), (1, n1, s10, r01)]
                .into_iter()
                .map(|(core, net, send, recv)| {
                    let finished = finished.clone();
                    std::thread::spawn(move || net_rank(core, net, send, recv, size, count, &finished))
                })
                .collect()
        }
    };
    // The slower rank's time from its first message to its last.
    let elapsed = ranks.into_iter().map(|rank| rank.join().unwrap()).max().unwrap();
    stop.store(true, Ordering::Relaxed);
    spinners.into_iter().for_each(|spinner| spinner.join().unwrap());
    (size * count) as f64 / elapsed.as_secs_f64() / 1e9
}

/// One rank of [`exchange`] over plain TCP: messages of `size` after a 12-byte header out,
/// the same in, non-blocking, yielding when neither way moved; its time.
fn tcp_rank(core: usize, mut out: TcpStream, mut inp: TcpStream, size: usize, count: usize) -> Duration {
    use std::io::Read;
    pin_to(core);
    for s in [&out, &inp] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    let total = count * (12 + size);
    let data = vec![5u8; 12 + size];
    let mut buffer = vec![0u8; 12 + size];
    let (mut put, mut got) = (0, 0);
    let (started, until) = (Instant::now(), deadline());
    while put < total || got < total {
        assert!(Instant::now() < until, "stuck");
        let mut moved = false;
        if put < total {
            let at = put % data.len();
            match out.write(&data[at..]) {
                Ok(n) => (put, moved) = (put + n, true),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        if got < total {
            let at = got % buffer.len();
            match inp.read(&mut buffer[at..]) {
                Ok(0) => panic!("closed"),
                Ok(n) => (got, moved) = (got + n, true),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        if !moved {
            std::thread::yield_now();
        }
    }
    started.elapsed()
}

/// One rank of [`exchange`] over the Net: 4 sends and 4 receives in flight, the oldest of
/// each tested every pass, yielding when neither finished nor started one; its time.
/// `finished` counts the ranks past their last message: a rank closes its comms only once
/// both are (a close with the peer's notices unread resets the connection).
fn net_rank(core: usize, net: Arc<SocketNet>, mut send: SendComm, mut recv: RecvComm, size: usize, count: usize, finished: &std::sync::atomic::AtomicUsize) -> Duration {
    pin_to(core);
    let (sent_mr, recv_mr) = (net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap(), net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap());
    let data = vec![5u8; size];
    let mut buffers: Vec<Vec<u8>> = (0..4).map(|_| vec![1u8; size]).collect();
    let (mut sends, mut receives) = (std::collections::VecDeque::new(), std::collections::VecDeque::new());
    let (mut next_send, mut next_recv, mut sent, mut received) = (0, 0, 0, 0);
    let (started, until) = (Instant::now(), deadline());
    while sent < count || received < count {
        assert!(Instant::now() < until, "stuck");
        let mut moved = false;
        if next_send < count && sends.len() < 4 {
            // SAFETY: data outlives every request (all finish in this loop).
            if let Some(request) = unsafe { net.isend(&mut send, data.as_ptr(), size, next_send as u32, &sent_mr) }.unwrap() {
                (next_send, moved) = (next_send + 1, true);
                sends.push_back(request);
            }
        }
        if next_recv < count && receives.len() < 4 {
            let buffer = &mut buffers[next_recv % 4];
            let posted = [RecvBuffer { data: buffer.as_mut_ptr(), len: size, tag: next_recv as u32 }];
            // SAFETY: a buffer is posted again only after its receive finished (4 apart).
            receives.push_back(unsafe { net.irecv(&mut recv, &posted, &[&recv_mr]) }.unwrap().unwrap());
            (next_recv, moved) = (next_recv + 1, true);
        }
        if let Some(request) = sends.front_mut() {
            if net.test(request).unwrap().is_some() {
                sends.pop_front();
                (sent, moved) = (sent + 1, true);
            }
        }
        if let Some(request) = receives.front_mut() {
            if net.test(request).unwrap().is_some() {
                receives.pop_front();
                (received, moved) = (received + 1, true);
            }
        }
        if !moved {
            std::thread::yield_now();
        }
    }
    let elapsed = started.elapsed();
    finished.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    while finished.load(std::sync::atomic::Ordering::Acquire) < 2 {
        assert!(Instant::now() < until, "the other rank never finished");
        std::thread::yield_now();
    }
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    elapsed
}

/// Runs the calling thread on `core` alone; its affinity before.
fn pin_to(core: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain bits (all zero: the empty set); the calls read and write
    // within the sets given, for this thread (pid 0).
    unsafe {
        let mut before: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut before), 0);
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0, "pinning to core {core}");
        before
    }
}

fn restore_affinity(set: &libc::cpu_set_t) {
    // SAFETY: a set from sched_getaffinity, for this thread.
    unsafe { assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set), 0) };
}

/// GB/s of plain TCP carrying `count` messages of `size` bytes (each after a 12-byte
/// header) over one non-blocking connection, both threads on `core`, the receiver reading
/// into `buffers` buffers in turn (as many as the Net's receives in flight: one buffer read
/// over and over stays in the caches, where the Net's four do not).
fn tcp_throughput(size: usize, count: usize, buffers: usize, core: usize) -> f64 {
    let listener = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let sender = std::thread::spawn(move || {
        pin_to(core);
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let data = vec![5u8; size];
        let header = [7u8; 12];
        for _ in 0..count {
            let (mut put, total) = (0, header.len() + size);
            while put < total {
                let result = if put < header.len() {
                    s.write_vectored(&[std::io::IoSlice::new(&header[put..]), std::io::IoSlice::new(&data)])
                } else {
                    s.write(&data[put - header.len()..])
                };
                match result {
                    Ok(n) => put += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    let before = pin_to(core);
    let mut r = listener.accept().unwrap().0;
    r.set_nonblocking(true).unwrap();
    let mut header = [0u8; 12];
    let mut buffers: Vec<Vec<u8>> = (0..buffers.max(1)).map(|_| vec![1u8; size]).collect();
    let started = Instant::now();
    for i in 0..count {
        let turn = buffers.len();
        let buffer = &mut buffers[i % turn];
        let mut got = 0;
        while got < header.len() + size {
            use std::io::Read;
            let result = if got < header.len() { r.read(&mut header[got..]) } else { r.read(&mut buffer[got - header.len()..]) };
            match result {
                Ok(0) => panic!("closed"),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }
    let elapsed = started.elapsed();
    sender.join().unwrap();
    restore_affinity(&before);
    (size * count) as f64 / elapsed.as_secs_f64() / 1e9
}

/// GB/s of `count` messages of `size` bytes, `depth` in flight, sender and receiver each
/// on its own thread (both on `pinning.core` where it names one).
fn throughput(threads: usize, sockets_per_thread: usize, size: usize, count: usize, depth: usize, pinning: Pinning) -> f64 {
    let net = net(threads, sockets_per_thread, if pinning.receiver_driven { 8 } else { 1 });
    let net = Arc::new(if pinning.receiver_driven { net.receiver_driven() } else { net });
    let (mut send, mut recv) = pair(&net);
    let sender = {
        let net = net.clone();
        std::thread::spawn(move || {
            if let Some(core) = pinning.core {
                pin_to(core);
            }
            let registration = net.reg_mr(&mut send, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
            // Written, so that its pages exist before the clock starts.
            let data = vec![5u8; size];
            let mut in_flight = std::collections::VecDeque::new();
            for tag in 0..count {
                // A receiver-driven send may have to wait for its receive's notice.
                let request = loop {
                    // SAFETY: data outlives every request: all are waited for below.
                    match unsafe { net.isend(&mut send, data.as_ptr(), size, tag as u32, &registration) }.unwrap() {
                        Some(request) => break request,
                        None => std::thread::yield_now(),
                    }
                };
                in_flight.push_back(request);
                if in_flight.len() == depth {
                    wait(&net, &mut in_flight.pop_front().unwrap());
                }
            }
            in_flight.iter_mut().for_each(|request| {
                wait(&net, request);
            });
            // Closed once everything is received (below): a close with the receiver's
            // notices unread resets the connection.
            send
        })
    };
    let before = pinning.core.map(pin_to);
    let registration = net.reg_mr(&mut recv, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    // Written, so that no page fault is timed.
    let mut buffers: Vec<Vec<u8>> = (0..depth).map(|_| vec![1u8; size]).collect();
    let started = Instant::now();
    let mut in_flight = std::collections::VecDeque::new();
    for tag in 0..count {
        let buffer = &mut buffers[tag % depth];
        let posted = [RecvBuffer { data: buffer.as_mut_ptr(), len: size, tag: tag as u32 }];
        // SAFETY: each buffer is reused only after its previous receive completed (depth apart).
        in_flight.push_back(unsafe { net.irecv(&mut recv, &posted, &[&registration]) }.unwrap().unwrap());
        if in_flight.len() == depth {
            wait(&net, &mut in_flight.pop_front().unwrap());
        }
    }
    in_flight.iter_mut().for_each(|request| {
        wait(&net, request);
    });
    let elapsed = started.elapsed();
    net.close_send(sender.join().unwrap()).unwrap();
    net.close_recv(recv).unwrap();
    if let Some(before) = &before {
        restore_affinity(before);
    }
    (size * count) as f64 / elapsed.as_secs_f64() / 1e9
}

/// One-way latency of messages (half a round trip, median of 2000) between two threads
/// over loopback: the socket Net's isend/irecv/test busy-polled, with no helper threads
/// (the control socket carries everything) and with one helper thread and data socket per
/// comm (the default on hosts of 4 cores or more: messages of 64 KiB and more go through
/// it), against plain non-blocking TCP sockets busy-polled the same way (the floor), over
/// a connection each way as the Net's comms are, and over one (each segment's ACK rides on
/// the reply): `cargo test --release -p oxccl-transports socket_latency -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn socket_latency() {
    const ROUNDS: usize = 2000;
    for size in [8usize, 1024, 8192, 32 << 10, 64 << 10, 256 << 10] {
        let tcp = tcp_ping_pong(size, ROUNDS, false);
        let tcp_two = tcp_ping_pong(size, ROUNDS, true);
        let net = net_ping_pong(size, ROUNDS, 0, false, false);
        let helped = net_ping_pong(size, ROUNDS, 1, false, false);
        let driven = net_ping_pong(size, ROUNDS, 0, true, false);
        let posted = net_ping_pong(size, ROUNDS, 0, false, true);
        println!(
            "{size} B one way (median of {ROUNDS} round trips / 2): socket Net {net:.2} us, {helped:.2} us with a helper thread, {driven:.2} us receiver-driven (the plugin's comms), {posted:.2} us with the next receive posted (as a proxy posts them); plain TCP {tcp_two:.2} us over a connection each way (as the Net's comms), {tcp:.2} us over one"
        );
    }
}

fn median_half(mut round_trips: Vec<Duration>) -> f64 {
    round_trips.sort();
    round_trips[round_trips.len() / 2].as_secs_f64() * 1e6 / 2.0
}

/// Plain TCP ping-pong, non-blocking sockets busy-polled; `two`: a connection each way
/// (the way the Net's send and receive comms are), else one connection both ways.
fn tcp_ping_pong(size: usize, rounds: usize, two: bool) -> f64 {
    let listener = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = if two { 2 } else { 1 };
    let echo = std::thread::spawn(move || {
        let mut accepted: Vec<TcpStream> = (0..connections).map(|_| listener.accept().unwrap().0).collect();
        for s in &accepted {
            s.set_nodelay(true).unwrap();
            s.set_nonblocking(true).unwrap();
        }
        let mut buf = vec![0u8; size];
        for _ in 0..rounds {
            read_all(&mut accepted[0], &mut buf);
            write_all(&mut accepted[connections - 1], &buf);
        }
    });
    let mut streams: Vec<TcpStream> = (0..connections).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for s in &streams {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    let mut buf = vec![1u8; size];
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        write_all(&mut streams[0], &buf);
        read_all(&mut streams[connections - 1], &mut buf);
        times.push(start.elapsed());
    }
    echo.join().unwrap();
    /// Writes all of `buf` to a non-blocking socket, spinning while it is full.
    fn write_all(s: &mut TcpStream, buf: &[u8]) {
        let (mut put, until) = (0, deadline());
        while put < buf.len() {
            assert!(Instant::now() < until, "the peer never read");
            match s.write(&buf[put..]) {
                Ok(n) => put += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    fn read_all(s: &mut TcpStream, buf: &mut [u8]) {
        use std::io::Read;
        let (mut got, until) = (0, deadline());
        while got < buf.len() {
            assert!(Instant::now() < until, "the echo never came");
            match s.read(&mut buf[got..]) {
                Ok(0) => panic!("closed"),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    median_half(times)
}

/// The Net's ping-pong with `threads` helper threads of one data socket each per comm;
/// `receiver_driven`: comms whose receiver sends a notice for each receive it posts (the
/// exported plugin's); `posted_ahead`: each end's receive for the next round posted before
/// it waits for this one, as a proxy posts receives for the messages announced (a receive
/// then completes while another is queued behind it).
fn net_ping_pong(size: usize, rounds: usize, threads: usize, receiver_driven: bool, posted_ahead: bool) -> f64 {
    let net = Arc::new(if receiver_driven { net(threads, 1, 4).receiver_driven() } else { net(threads, 1, 1) });
    let (mut to_echo, mut at_echo) = pair(&net);
    let (mut back, mut from_echo) = pair(&net);
    let depth = 1 + posted_ahead as usize;
    // Tops `posted` up to `depth` receives, from round `round` on: round k's into buffer k % 2.
    let top_up = move |net: &SocketNet, comm: &mut RecvComm, posted: &mut VecDeque<Request>, buffers: &mut [Vec<u8>; 2], round: usize, registration: &MrHandle| {
        while posted.len() < depth && round + posted.len() < rounds {
            let k = round + posted.len();
            let buffer = [RecvBuffer { data: buffers[k % 2].as_mut_ptr(), len: size, tag: k as u32 }];
            // SAFETY: the buffers outlive the requests; each is waited for before its buffer
            // is posted again, two rounds later.
            posted.push_back(unsafe { net.irecv(comm, &buffer, &[registration]) }.unwrap().unwrap());
        }
    };
    let echo = {
        let net = net.clone();
        std::thread::spawn(move || {
            let r_in = net.reg_mr(&mut at_echo, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
            let r_out = net.reg_mr(&mut back, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
            let (mut buffers, mut posted) = ([vec![0u8; size], vec![0u8; size]], VecDeque::new());
            for round in 0..rounds {
                top_up(&net, &mut at_echo, &mut posted, &mut buffers, round, &r_in);
                spin(&net, &mut posted.pop_front().expect("posted"));
                // SAFETY: the buffer is not posted again before this send is waited for.
                let mut s = unsafe { net.isend(&mut back, buffers[round % 2].as_ptr(), size, round as u32, &r_out) }.unwrap().unwrap();
                spin(&net, &mut s);
            }
            net.close_recv(at_echo).unwrap();
            net.close_send(back).unwrap();
        })
    };
    let r_out = net.reg_mr(&mut to_echo, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let r_in = net.reg_mr(&mut from_echo, std::ptr::null_mut(), 0, MemoryKind::Host).unwrap();
    let data = vec![1u8; size];
    let (mut buffers, mut posted) = ([vec![0u8; size], vec![0u8; size]], VecDeque::new());
    let mut times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let start = Instant::now();
        top_up(&net, &mut from_echo, &mut posted, &mut buffers, round, &r_in);
        let mut r = posted.pop_front().expect("posted");
        // SAFETY: `data` outlives the request, waited for at once.
        let mut s = unsafe { net.isend(&mut to_echo, data.as_ptr(), size, round as u32, &r_out) }.unwrap().unwrap();
        spin(&net, &mut s);
        spin(&net, &mut r);
        times.push(start.elapsed());
    }
    echo.join().unwrap();
    net.close_send(to_echo).unwrap();
    net.close_recv(from_echo).unwrap();
    median_half(times)
}

/// Polls `request` until done, without yielding (as a proxy with work does).
fn spin(net: &SocketNet, request: &mut Request) {
    let until = deadline();
    while net.test(request).unwrap().is_none() {
        assert!(Instant::now() < until, "request never completed");
    }
}
