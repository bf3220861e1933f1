//! A kernel waiting on a peer stops: on abort, when the peer leaves, and when it dies or is stopped (a process SIGKILLs or SIGSTOPs itself).

use super::*;

/// A kernel waiting for a peer that never sends stops when abort is called from another
/// thread, and the waiting synchronize returns an error at once.
#[test]
fn abort_stops_a_kernel_waiting_on_a_silent_peer() {
    let Some(g) = gpus() else { return };
    // The ring (4 MiB) and the direct LL path (4 KiB); a receive over the Simple FIFOs
    // (4 MiB) and over LL (4 KiB).
    stop_each_wait(g, &[1 << 20, 1 << 10], Stop::Abort, Hosts::One);
}

/// A kernel waiting for a peer that destroys its communicator instead (the ranks' calls
/// differ) stops once the peer is gone, with an error naming it, instead of waiting for
/// the collective timeout (60 s here).
#[test]
fn a_peer_that_leaves_stops_the_kernel_waiting_for_it() {
    let Some(g) = gpus() else { return };
    stop_each_wait(g, &[1 << 20, 1 << 10], Stop::PeerLeaves, Hosts::One);
    a_peer_that_leaves_stops_the_ring(g);
}

/// Three ranks on a ring: rank 2 leaves while ranks 0 and 1 all_reduce. Rank 0 waits for
/// rank 2 directly, rank 1 (also) for rank 0, whose kernel stops: rank 0 tells the job,
/// so both fail naming rank 2 within a second.
fn a_peer_that_leaves_stops_the_ring(g: usize) {
    let count = 1 << 20;
    let comms = init_all(&[0, 1 % g, 2 % g], &config());
    let mut comms = comms.into_iter();
    let (stay, mut leaver) = ([comms.next().unwrap(), comms.next().unwrap()], comms.next());
    // Memory first: allocating waits for the GPU's running kernels.
    let mine: Vec<_> = stay.iter().map(|c| (c.stream().unwrap(), c.alloc(count * 4).unwrap())).collect();
    let start = Instant::now();
    let results = std::thread::scope(|s| {
        let waiting: Vec<_> = stay
            .iter()
            .zip(&mine)
            .map(|(c, (stream, buf))| {
                s.spawn(move || {
                    // SAFETY: a buffer of `count` floats, synchronized before it is freed.
                    unsafe { c.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
                    (c.wait(stream), Instant::now())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let left_at = Instant::now();
        drop(leaver.take());
        waiting.into_iter().map(|w| w.join().unwrap()).map(|(r, at)| (r, at.saturating_duration_since(left_at))).collect::<Vec<_>>()
    });
    for (rank, (result, latency)) in results.into_iter().enumerate() {
        let e = result.expect_err("the all_reduce cannot finish without rank 2");
        eprintln!("3-rank ring, rank {rank}: synchronize returned {latency:.2?} after rank 2 left: {e}");
        assert!(matches!(e, oxccl_runtime::Error::PeerFailed { rank: 2, .. }), "rank {rank}: {e}");
        assert!(latency < Duration::from_secs(1), "rank {rank} took {latency:.2?} to stop");
    }
    drop(mine);
    drop(stay);
    assert!(start.elapsed() < Duration::from_secs(15), "3-rank ring case took {:.1?}", start.elapsed());
}

/// What stops rank 0's kernel waiting for rank 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Stop {
    /// Another thread of rank 0 calls abort.
    Abort,
    /// Rank 1 destroys its communicator.
    PeerLeaves,
}

/// Where the two ranks of [`stop_a_waiting_kernel`] are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Hosts {
    /// One host: the GPU connections.
    One,
    /// Separate hosts, staged: rank 0's stream waits for the host path, which waits for
    /// rank 1 over the Net.
    Staged,
    /// Separate hosts, the kernel over the network.
    Network,
}

/// [`stop_a_waiting_kernel`] at each of `counts`, with rank 0 in an all_reduce and in a
/// receive.
pub(super) fn stop_each_wait(g: usize, counts: &[usize], stop: Stop, hosts: Hosts) {
    for &count in counts {
        for receive in [false, true] {
            stop_a_waiting_kernel(g, count, receive, stop, hosts);
        }
    }
}

pub(super) fn stop_a_waiting_kernel(g: usize, count: usize, receive: bool, stop: Stop, hosts: Hosts) {
    // Kernels compiled first: the receive's first launch compiles the byte-copy kernel with
    // NVRTC (2.1-3.4 s with a cold cache on one H200), which no abort interrupts; a stop
    // that came during it was measured as the abort's latency (1.08 s, over the bound).
    warm_kernel_cache();
    let separate_hosts = hosts != Hosts::One;
    let comms = match hosts {
        Hosts::One => init_all(&[0, 1 % g], &config()),
        Hosts::Staged => init_on_separate_hosts(&[0, 1 % g], &staged_config()),
        Hosts::Network => init_on_separate_hosts(&[0, 1 % g], &config()),
    };
    // Both ranks run one all_reduce: the connections exist, so the next call needs no
    // setup from the peer.
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let stream = c.stream().unwrap();
                let buf = c.alloc(count * 4).unwrap();
                // SAFETY: a buffer of `count` floats, synchronized before it is freed.
                unsafe { c.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
                c.wait(&stream).unwrap();
            });
        }
    });
    // Now rank 0 alone: its kernel waits for rank 1 forever, until stopped.
    let mut comms = comms.into_iter();
    let (c, mut peer) = (comms.next().unwrap(), comms.next());
    let stream = c.stream().unwrap();
    let buf = c.alloc(count * 4).unwrap();
    // The stop comes 300 ms after the enqueue returned, or after 2 s if it has not: a CUDA
    // call may wait in the driver while another thread frees GPU memory (a communicator's
    // teardown, here an earlier test's), and a free waits for every kernel on the GPU —
    // this operation's included, until it is stopped.
    let start = Instant::now();
    let (enqueue_returned, returns) = std::sync::mpsc::channel::<()>();
    let (result, enqueued, returned, stopped_at) = std::thread::scope(|s| {
        let (c, peer) = (&c, &mut peer);
        let stopper = s.spawn(move || {
            let _ = returns.recv_timeout(Duration::from_secs(2));
            std::thread::sleep(Duration::from_millis(300));
            let at = Instant::now();
            match stop {
                Stop::Abort => c.abort(),
                Stop::PeerLeaves => drop(peer.take()),
            }
            at
        });
        // SAFETY: as above.
        let enqueue = unsafe {
            if receive {
                c.launch_p2p(&[gpu::P2p { send: false, peer: 1, addr: buf.ptr(), bytes: count * 4 }], stream.raw())
            } else {
                c.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw())
            }
        };
        let enqueued = Instant::now();
        let _ = enqueue_returned.send(());
        // An enqueue that returns after the stop may fail with its error itself.
        let result = enqueue.and_then(|()| c.wait(&stream));
        (result, enqueued, Instant::now(), stopper.join().unwrap())
    });
    let e = result.expect_err("the operation cannot finish without rank 1");
    // When, for a failure's message: the enqueue's return, the stop, the wait's return.
    let when = format!("since the start: enqueued at {:.1?}, {stop:?} at {:.1?}, wait returned at {:.1?}", enqueued - start, stopped_at - start, returned - start);
    match stop {
        Stop::Abort => assert!(matches!(e, oxccl_runtime::Error::Aborted { .. }), "{e} ({when})"),
        // Staged, the host path names the peer as its Net connection ends.
        Stop::PeerLeaves => assert!(matches!(e, oxccl_runtime::Error::PeerFailed { rank: 1, .. }) && (separate_hosts || e.to_string().contains("left")), "{e} ({when})"),
    }
    assert!(c.error().is_some());
    let latency = returned.saturating_duration_since(stopped_at);
    eprintln!("{count} floats ({}, {hosts:?}): synchronize returned {latency:.2?} after {stop:?} ({when}): {e}", if receive { "recv" } else { "all_reduce" });
    // Across hosts, a peer that left is waited for during the network's grace (2 s, as the
    // host path: what it sent may still be on the wire).
    let bound = Duration::from_secs(if separate_hosts && stop == Stop::PeerLeaves { 5 } else { 1 });
    assert!(latency < bound, "{stop:?} took {latency:.2?} to stop the kernel");
    let start = Instant::now();
    drop(buf);
    drop(stream);
    drop(c);
    drop(peer);
    assert!(start.elapsed() < Duration::from_secs(10), "teardown after {stop:?} took {:.1?}", start.elapsed());
}

/// One rank of the dead-peer job (does nothing when run as an ordinary test): both ranks
/// all_reduce once; then rank 1 SIGKILLs itself while rank 0's next all_reduce waits for
/// it in a kernel, which must stop — the control plane sees the death and raises the
/// kernels' abort flag — with an error naming rank 1, within 5 s.
#[test]
fn death_child() {
    if std::env::var("OXCCL_TEST_GPU_DEATH").is_err() {
        return;
    }
    let gpus = gpu::device_count();
    let comm = Communicator::from_env(&Config::from_env().unwrap()).unwrap();
    let rank = comm.rank();
    let dev = comm.with_memory(Memory::Gpu { device: rank % gpus }).unwrap();
    let stream = dev.stream().unwrap();
    let count = 1 << 20;
    let buf = dev.alloc(count * 4).unwrap();
    // SAFETY: a buffer of `count` floats, waited for before it is freed.
    unsafe { dev.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
    dev.wait(&stream).unwrap();
    // Both ranks are past the first all_reduce (a host all_reduce as the barrier).
    dev.barrier().unwrap();
    if rank == 1 {
        let signal = if std::env::var("OXCCL_TEST_GPU_DEATH").as_deref() == Ok("stop") { libc::SIGSTOP } else { libc::SIGKILL };
        // SAFETY: raising a signal has no preconditions.
        unsafe { libc::raise(signal) };
    }
    // SAFETY: as above.
    unsafe { dev.launch_collective(Collective::AllReduce, buf.ptr(), buf.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
    let start = Instant::now();
    let e = dev.wait(&stream).expect_err("rank 1 is dead: the all_reduce cannot finish");
    let took = start.elapsed();
    println!("rank 0: the kernel waiting on dead rank 1 stopped after {took:.2?}: {e}");
    assert!(e.to_string().contains("rank 1"), "{e}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_dead_peer_stops_the_kernel_waiting_for_it() {
    if gpus().is_none() {
        return;
    }
    dead_peer(false, "kill");
}

/// The same across hosts (each process a host of its own): the kernel waits over the
/// network; a SIGKILLed peer, and a SIGSTOPped one (found by the heartbeats, 1 s here).
#[test]
fn a_dead_or_stopped_peer_across_hosts_stops_the_kernel_waiting_for_it() {
    if gpus().is_none() {
        return;
    }
    dead_peer(true, "kill");
    dead_peer(true, "stop");
}

fn dead_peer(separate_hosts: bool, how: &str) {
    let job = oxccl_runtime::bootstrap::spawn::spawn(2, &config(), |rank| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["faults::death_child", "--exact", "--nocapture", "--test-threads", "1"])
            .env("OXCCL_TEST_GPU_DEATH", how)
            .env("OXCCL_HEARTBEAT_TIMEOUT_MS", "1000")
            .env("NCCL_SOCKET_IFNAME", "lo")
            .stdout(std::process::Stdio::piped());
        if separate_hosts {
            cmd.env("NCCL_HOSTID", format!("test-host-{rank}"));
        }
        cmd
    })
    .unwrap();
    let pids = job.pids();
    // A stopped rank 1 never exits by itself: killed once rank 0 is done.
    let killer = (how == "stop").then(|| {
        let pid = pids[1];
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            // SAFETY: kill has no preconditions; the pid is our child's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        })
    });
    let outputs = job.wait_with_output(Duration::from_secs(120)).unwrap();
    drop(killer);
    let (status, out) = &outputs[0];
    eprintln!("{out}");
    assert!(status.success(), "rank 0 failed ({how}, separate hosts: {separate_hosts}): {out}");
    assert!(out.contains("stopped after"), "{out}");
}
