//! Four ranks as threads: all_reduce over shared memory and over the socket Net (with
//! grouped receives allowed), checked against values computed directly.

use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

fn four_threads_all_reduce(net: bool) {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    if net {
        config.set("NCCL_SHM_DISABLE", "1").unwrap();
        config.set("OXCCL_SOCKET_MAX_RECVS", "8").unwrap();
    }
    let comms = Communicator::init_all(4, &config).unwrap();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let send: Vec<f32> = (0..300_000).map(|i| (c.rank() * 1000 + i % 1000) as f32).collect();
                let mut recv = vec![0f32; send.len()];
                c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                for (i, x) in recv.iter().enumerate() {
                    assert_eq!(*x, (6000 + 4 * (i % 1000)) as f32, "element {i}");
                }
                // Point-to-point ring exchange in one group: both directions at once.
                let (n, r) = (c.nranks(), c.rank());
                let out = vec![r as u64; 200_000];
                let mut inn = vec![0u64; 200_000];
                let mut g = c.group();
                g.send(&out, (r + 1) % n).unwrap();
                g.recv(&mut inn, (r + n - 1) % n).unwrap();
                g.end().unwrap();
                assert!(inn.iter().all(|&x| x == ((r + n - 1) % n) as u64));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn shared_memory() {
    four_threads_all_reduce(false);
}

#[test]
fn socket_net() {
    four_threads_all_reduce(true);
}

/// Non-blocking init: every rank's call returns at once, `async_error` says InProgress
/// until the communicator is ready, then it works.
#[test]
fn nonblocking_init() {
    use oxccl_runtime::{bootstrap::Bootstrap, Error};
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_COMM_BLOCKING", "0").unwrap();
    let id = Bootstrap::create_local_id(&config).unwrap();
    let start = std::time::Instant::now();
    let first = Communicator::init_nonblocking(&id, 0, 3, &config);
    assert!(start.elapsed() < std::time::Duration::from_millis(100), "init blocked for {:?}", start.elapsed());
    // Rank 0 cannot finish while ranks 1 and 2 have not started.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(matches!(first.async_error(), Some(Error::InProgress { .. })), "{:?}", first.async_error());
    let mut pending = vec![first];
    pending.extend((1..3).map(|r| Communicator::init_nonblocking(&id, r, 3, &config)));
    let comms: Vec<Communicator> = pending
        .into_iter()
        .map(|p| {
            // Only InProgress may be seen before the end; the wait itself is bounded.
            if let Some(e) = p.async_error() {
                assert!(matches!(e, Error::InProgress { .. }), "{e}");
            }
            p.wait(std::time::Duration::from_secs(60)).unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let mut x = vec![c.rank() as u64 + 1; 1000];
                c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                assert!(x.iter().all(|&v| v == 6));
            });
        }
    });
}
