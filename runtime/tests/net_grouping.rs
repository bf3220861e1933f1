//! Receives over the Net are posted together (one irecv with several buffers) when the net
//! reports max_recvs > 1 and the messages are independent (point-to-point, all_to_all),
//! and one by one when it reports 1. Counted with the socket net's own counters, and the
//! data checked either way. And the proxy threads sleep while every link is idle.

mod common;

use oxccl_runtime::{bootstrap::Config, Communicator};

/// Runs a grouped exchange with every peer and an all_to_all on 4 thread ranks over the
/// socket Net; returns each rank's (irecv calls, calls carrying several buffers).
fn exchange(max_recvs: usize) -> Vec<(u64, u64)> {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_SHM_DISABLE", "1").unwrap();
    config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    config.set("OXCCL_SOCKET_MAX_RECVS", &max_recvs.to_string()).unwrap();
    // Two proxy threads (the first communicator of this test process starts them): the
    // ranks' links dealt over both.
    config.set("OXCCL_PROXY_THREADS", "2").unwrap();
    // Small slots: every message below spans several, so a link carries many.
    config.set("NCCL_BUFFSIZE", &(64 * 1024).to_string()).unwrap();
    let comms = Communicator::init_all(4, &config).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let (n, r) = (c.nranks(), c.rank());
                    let len = 100_000;
                    let outs: Vec<Vec<u32>> = (0..n).map(|p| (0..len).map(|i| (r * 1_000_000 + p * 100_000 + i) as u32).collect()).collect();
                    let mut ins: Vec<Vec<u32>> = vec![vec![0; len]; n];
                    let mut g = c.group();
                    // Receives first: the group must not care about order.
                    for (p, buf) in ins.iter_mut().enumerate().filter(|(p, _)| *p != r) {
                        g.recv(buf, p).unwrap();
                    }
                    for (p, buf) in outs.iter().enumerate().filter(|(p, _)| *p != r) {
                        g.send(buf, p).unwrap();
                    }
                    g.end().unwrap();
                    for (p, buf) in ins.iter().enumerate().filter(|(p, _)| *p != r) {
                        assert!(buf.iter().enumerate().all(|(i, &x)| x == (p * 1_000_000 + r * 100_000 + i) as u32), "rank {r}: data from {p}");
                    }
                    let send: Vec<u64> = (0..n * len).map(|i| (r * n * len + i) as u64).collect();
                    let mut recv = vec![0u64; n * len];
                    c.all_to_all(&send, &mut recv).unwrap();
                    for p in 0..n {
                        for i in 0..len {
                            assert_eq!(recv[p * len + i], (p * n * len + r * len + i) as u64, "rank {r}: all_to_all from {p}");
                        }
                    }
                    c.net_receive_stats()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn one_receive_per_call_when_the_net_takes_one() {
    for (rank, (calls, grouped)) in exchange(1).into_iter().enumerate() {
        assert!(calls > 0, "rank {rank} posted no receive");
        assert_eq!(grouped, 0, "rank {rank} grouped receives although max_recvs is 1");
    }
}

#[test]
fn receives_are_grouped_when_the_net_takes_eight() {
    for (rank, (calls, grouped)) in exchange(8).into_iter().enumerate() {
        assert!(grouped > 0, "rank {rank}: none of its {calls} receive calls carried several buffers");
    }
}

/// Links with nothing announced leave their proxy threads asleep until the next operation
/// wakes them, after each algorithm's calls of several sizes (before, a thread with links
/// polled every 50 us however idle they were: thousands of sleeps in half a second; and a
/// send completed before the proxy took in its announcement left its link counted busy
/// for good, as ring and recursive doubling did here); the next call's data still arrives.
#[test]
fn idle_links_leave_the_proxy_threads_asleep() {
    for algo in ["ring", "tree", "direct", "doubling"] {
        let mut config = Config::defaults();
        config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
        config.set("NCCL_SHM_DISABLE", "1").unwrap();
        config.set("OXCCL_PROXY_THREADS", "2").unwrap();
        config.set("NCCL_ALGO", algo).unwrap();
        let comms = Communicator::init_all(4, &config).unwrap();
        let all_reduce = |len: usize, calls: usize| {
            std::thread::scope(|s| {
                for c in &comms {
                    s.spawn(move || {
                        for call in 0..calls {
                            let mut data = vec![(call + c.rank()) as f32; len];
                            c.all_reduce_in_place(&mut data, oxccl_runtime::ReduceOp::Sum).unwrap();
                            let expected = (4 * call + 6) as f32;
                            assert!(data.iter().all(|&x| x == expected), "{algo}, rank {}: {len} elements, call {call}", c.rank());
                        }
                    });
                }
            })
        };
        for len in [2, 1024, 65536] {
            all_reduce(len, 50);
        }
        let slept = common::proxy_threads_idle().0;
        // Two threads, each woken by its 100 ms timeout: ~10, whatever the machine's load.
        assert!(slept <= 40, "{algo}: the proxy threads slept {slept} times in 500 ms with every link idle");
        all_reduce(65536, 1);
    }
}

/// OXCCL_PROXY_TRACE: each rank writes its communicator's proxy timeline when the
/// communicator goes, a Chrome trace with a track per network link and a span per message
/// (the wait for its data and its send on a sending link, each receive on a receiving one),
/// as many as the calls moved.
#[test]
fn the_proxy_trace_records_every_message_of_every_link() {
    let dir = std::env::temp_dir().join(format!("oxccl-proxy-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("trace");
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_SHM_DISABLE", "1").unwrap();
    config.set("NCCL_ALGO", "ring").unwrap();
    config.set("OXCCL_PROXY_TRACE", prefix.to_str().unwrap()).unwrap();
    let calls = 10;
    {
        let comms = Communicator::init_all(2, &config).unwrap();
        std::thread::scope(|s| {
            for c in &comms {
                s.spawn(move || {
                    for call in 0..calls {
                        let mut data = vec![(call + c.rank()) as f32; 1024];
                        c.all_reduce_in_place(&mut data, oxccl_runtime::ReduceOp::Sum).unwrap();
                        assert!(data.iter().all(|&x| x == (2 * call + 1) as f32), "rank {}, call {call}", c.rank());
                    }
                });
            }
        });
    }
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 2, "one timeline per rank: {files:?}");
    for rank in 0..2 {
        let file = files.iter().find(|f| f.to_str().unwrap().ends_with(&format!(".rank{rank}.json"))).unwrap_or_else(|| panic!("rank {rank}'s timeline in {files:?}"));
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.starts_with("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[") && text.trim_end().ends_with("]}"), "{text}");
        let count = |needle: &str| text.matches(needle).count();
        // Two ranks' ring all_reduce: each call sends one message to the peer and receives
        // one (reduce-scatter), then again (all-gather), on one channel (4 KiB).
        let peer = 1 - rank;
        assert_eq!(count(&format!("\"name\":\"send to rank {peer} channel 0\"")), 1, "{text}");
        assert_eq!(count(&format!("\"name\":\"receive from rank {peer} channel 0\"")), 1, "{text}");
        assert_eq!(count("\"name\":\"send\",\"pid\""), 2 * calls, "rank {rank}: sends\n{text}");
        assert_eq!(count("\"name\":\"wait for data\",\"pid\""), 2 * calls, "rank {rank}: waits\n{text}");
        assert_eq!(count("\"name\":\"isend\",\"pid\""), 2 * calls, "rank {rank}: isends\n{text}");
        assert_eq!(count("\"name\":\"receive\",\"pid\""), 2 * calls, "rank {rank}: receives\n{text}");
        // Each call announces its two messages to the send link and its two receives to the
        // receive link: one announcement a link a call.
        assert_eq!(count("\"name\":\"announced\",\"pid\""), 2 * calls, "rank {rank}: announcements\n{text}");
        assert_eq!(count("\"messages\":2,\"bytes\":0}"), 2 * calls, "rank {rank}: two messages an operation\n{text}");
        // Wait, isend, send and receive: four spans a message.
        assert_eq!(count("\"messages\":1,\"bytes\":2048}"), 8 * calls, "rank {rank}: every message is half the vector\n{text}");
    }
    // scripts/proxy-trace-summary.py reads them: a line per rank, link and kind of span.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/proxy-trace-summary.py");
    match std::process::Command::new("python3").arg(&script).args(&files).output() {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "{}: {}\n{text}", script.display(), String::from_utf8_lossy(&output.stderr));
            for rank in 0..2 {
                let peer = 1 - rank;
                for (link, span, spans) in [("send to", "wait for data", 2 * calls), ("send to", "isend", 2 * calls), ("send to", "send", 2 * calls), ("send to", "announced", calls), ("receive from", "receive", 2 * calls), ("receive from", "announced", calls)] {
                    let prefix = format!("{rank:>4}  {link} rank {peer} channel 0 ");
                    let line = text.lines().find(|l| l.strip_prefix(&prefix).is_some_and(|rest| rest.trim_start().starts_with(&format!("{span} ")))).unwrap_or_else(|| panic!("rank {rank} {link} {span} in\n{text}"));
                    assert!(line.split_whitespace().any(|w| w == spans.to_string()), "{line}");
                }
            }
            // Each of the two links' ten operations is seen at both its ends.
            assert!(text.contains(&format!("operations issued apart at a link's two ends ({} seen at both)", 2 * calls)), "{text}");
            // Every message (2 KiB, two a call on each of the two links) is in the hops' table.
            let hops = text.lines().skip_while(|l| !l.starts_with("where a hop goes")).find(|l| l.split_whitespace().next() == Some("2048")).unwrap_or_else(|| panic!("2 KiB hops in\n{text}"));
            assert_eq!(hops.split_whitespace().nth(1), Some((4 * calls).to_string().as_str()), "{hops}");
        }
        Err(e) => eprintln!("python3 is not here ({e}): the summary script is not checked"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A trace path that cannot be written fails the communicator's creation, naming the
/// variable and the file, rather than its end.
#[test]
fn a_proxy_trace_that_cannot_be_written_fails_creation() {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_SHM_DISABLE", "1").unwrap();
    config.set("OXCCL_PROXY_TRACE", "/nonexistent-oxccl-dir/trace").unwrap();
    let e = Communicator::init_all(2, &config).err().expect("no directory to write the trace in").to_string();
    assert!(e.contains("OXCCL_PROXY_TRACE=/nonexistent-oxccl-dir/trace") && e.contains("/nonexistent-oxccl-dir/trace.pid"), "{e}");
}
