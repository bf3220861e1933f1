//! Bootstraps of N ranks as threads of this process: every operation's results, and the
//! failures that must end in errors rather than hangs.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use oxccl_bootstrap::{AbortFlag, Bootstrap, Config, Error, UniqueId, NOCOLOR};

fn config(timeout_ms: u64) -> Config {
    let mut c = Config::defaults();
    c.set("OXCCL_BOOTSTRAP_TIMEOUT_MS", &timeout_ms.to_string()).unwrap();
    c.set("OXCCL_HANDSHAKE_TIMEOUT_MS", "500").unwrap();
    c
}

/// Runs `body` on `n` threads, each bootstrapped into one job, and returns their results in
/// rank order.
fn job<T: Send + 'static>(n: u32, body: impl Fn(Bootstrap) -> T + Send + Sync + 'static) -> Vec<T> {
    let config = config(20_000);
    let id = Bootstrap::create_local_id(&config).unwrap();
    run_ranks(&id, n, &config, body).into_iter().map(|r| r.unwrap()).collect()
}

fn run_ranks<T: Send + 'static>(
    id: &UniqueId,
    n: u32,
    config: &Config,
    body: impl Fn(Bootstrap) -> T + Send + Sync + 'static,
) -> Vec<Result<T, Error>> {
    let body = Arc::new(body);
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let (id, config, body) = (*id, config.clone(), body.clone());
            thread::spawn(move || Bootstrap::init(&id, rank, n, &config, AbortFlag::new()).map(|b| body(b)))
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
}

#[test]
fn allgather_broadcast_barrier_for_many_sizes() {
    for n in [1u32, 2, 3, 8, 32] {
        let results = job(n, move |b| {
            assert_eq!(b.nranks(), n);
            let rank = b.rank();
            let all = b.allgather(&[rank as u8, 0xAA, (rank * 3) as u8]).unwrap();
            for r in 0..n as usize {
                assert_eq!(&all[3 * r..3 * r + 3], &[r as u8, 0xAA, (r * 3) as u8], "slot {r} at rank {rank}");
            }
            for root in [0, n / 2, n - 1] {
                let mut data = if rank == root { vec![root as u8; 1000 + root as usize] } else { vec![] };
                b.broadcast(root, &mut data).unwrap();
                assert_eq!(data, vec![root as u8; 1000 + root as usize]);
            }
            for _ in 0..3 {
                b.barrier().unwrap();
            }
            all
        });
        assert!(results.windows(2).all(|w| w[0] == w[1]), "{n} ranks disagree");
    }
}

#[test]
fn empty_records_and_large_records() {
    job(4, |b| {
        assert!(b.allgather(&[]).unwrap().is_empty());
        let big = vec![b.rank() as u8; 1 << 20];
        let all = b.allgather(&big).unwrap();
        assert!(all.chunks(1 << 20).enumerate().all(|(r, c)| c.iter().all(|&x| x == r as u8)));
    });
}

#[test]
fn mismatched_record_sizes_fail_on_every_rank() {
    let results = job(3, |b| b.allgather(&vec![0u8; 4 + (b.rank() == 1) as usize]).map(drop).unwrap_err().to_string());
    for message in results {
        assert!(message.contains("differ in size"), "{message}");
    }
}

#[test]
fn point_to_point_any_pair_any_order() {
    job(5, |b| {
        let (rank, n) = (b.rank(), b.nranks());
        for peer in (0..n).filter(|&p| p != rank) {
            for tag in [1u64, 99] {
                b.send(peer, tag, format!("{rank}->{peer}#{tag}").as_bytes()).unwrap();
            }
        }
        // Receive in the reverse order of sending: the mailbox keeps them apart.
        for peer in (0..n).rev().filter(|&p| p != rank) {
            for tag in [99u64, 1] {
                assert_eq!(b.recv(peer, tag).unwrap(), format!("{peer}->{rank}#{tag}").into_bytes());
            }
        }
        // Same tag twice: in order.
        let next = (rank + 1) % n;
        b.send(next, 5, b"first").unwrap();
        b.send(next, 5, b"second").unwrap();
        let prev = (rank + n - 1) % n;
        assert_eq!(b.recv(prev, 5).unwrap(), b"first");
        assert_eq!(b.recv(prev, 5).unwrap(), b"second");
        assert!(b.send(n, 1, b"x").unwrap_err().to_string().contains("out of range"));
        assert!(b.send(next, u64::MAX, b"x").unwrap_err().to_string().contains("reserved"));
    });
}

#[test]
fn split_orders_by_key_then_rank_and_honours_nocolor() {
    let results = job(8, |b| {
        let rank = b.rank() as i32;
        // Colors: rank % 3, except rank 7 which opts out. Keys: descending for color 0,
        // equal (ties broken by parent rank) for the others.
        let color = if rank == 7 { NOCOLOR } else { rank % 3 };
        let key = if color == 0 { -rank } else { 0 };
        let sub = b.split(color, key, AbortFlag::new()).unwrap();
        let Some(sub) = sub else {
            assert_eq!(rank, 7);
            b.barrier().unwrap();
            return None;
        };
        let members = sub.allgather(&(rank as u32).to_le_bytes()).unwrap();
        let members: Vec<u32> = members.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        // Nested split of the split, and traffic on both at once.
        let halves = sub.split((sub.rank() % 2) as i32, 0, AbortFlag::new()).unwrap().unwrap();
        halves.barrier().unwrap();
        sub.barrier().unwrap();
        b.barrier().unwrap();
        Some((color, sub.rank(), members))
    });
    let expect = |color: i32| -> Vec<u32> {
        match color {
            0 => vec![6, 3, 0],
            1 => vec![1, 4],
            _ => vec![2, 5],
        }
    };
    for (rank, result) in results.into_iter().enumerate() {
        if let Some((color, sub_rank, members)) = result {
            assert_eq!(members, expect(color));
            assert_eq!(members[sub_rank as usize], rank as u32);
        }
    }
}

/// Without failures the agreement decides nothing failed; with rank 2 announced failed,
/// the others agree on it (rank 2, named failed, takes no part; were it to speak, it would
/// be told it is excluded: `agree` unit tests and the simulator).
#[test]
fn live_ranks_agree_on_the_failed_ones() {
    let results = job(4, |b| b.agree_failed(&AbortFlag::new()).unwrap());
    assert!(results.iter().all(|r| r.is_empty()), "{results:?}");
    let results = job(4, |b| {
        if b.rank() == 0 {
            b.announce_failure("test: rank 2 is declared failed", &[2]);
        }
        let start = Instant::now();
        let agreed = if b.rank() == 2 { Ok(vec![]) } else { b.agree_failed(&AbortFlag::new()) };
        (agreed.map_err(|e| e.to_string()), start.elapsed())
    });
    for (rank, (agreed, took)) in results.iter().enumerate().filter(|(r, _)| *r != 2) {
        assert_eq!(agreed, &Ok(vec![2]), "rank {rank}");
        assert!(*took < Duration::from_secs(5), "rank {rank} took {took:?}");
    }
    eprintln!("agreement on rank 2 in {:?}", results.iter().map(|(_, t)| *t).collect::<Vec<_>>());
}

#[test]
fn invalid_colors_fail_on_every_rank() {
    let results = job(3, |b| b.split(if b.rank() == 2 { -5 } else { 0 }, 0, AbortFlag::new()).map(|_| ()).unwrap_err().to_string());
    assert!(results.iter().all(|m| m.contains("color -5 from rank 2")), "{results:?}");
}

#[test]
fn missing_rank_fails_the_others_naming_it() {
    let config = config(800);
    let id = Bootstrap::create_local_id(&config).unwrap();
    let start = Instant::now();
    // Ranks 0..3 of 4 join; rank 3 never does.
    let handles: Vec<_> = (0..3)
        .map(|rank| {
            let config = config.clone();
            thread::spawn(move || Bootstrap::init(&id, rank, 4, &config, AbortFlag::new()).map(drop))
        })
        .collect();
    for h in handles {
        let err = h.join().unwrap().unwrap_err();
        assert!(matches!(err, Error::PeerFailed { rank: 3, .. }), "{err}");
        assert!(err.to_string().contains("[3]"), "{err}");
    }
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
}

#[test]
fn unreachable_root_is_an_error_naming_the_address() {
    let config = config(600);
    // A port that was free a moment ago: nobody listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let id = UniqueId::with_random_secret(addr).unwrap();
    let start = Instant::now();
    let err = Bootstrap::init(&id, 1, 2, &config, AbortFlag::new()).map(drop).unwrap_err();
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
}

#[test]
fn silent_root_times_out() {
    let config = config(300);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let id = UniqueId::with_random_secret(listener.local_addr().unwrap()).unwrap();
    let start = Instant::now();
    let err = Bootstrap::init(&id, 1, 2, &config, AbortFlag::new()).map(drop).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains(&listener.local_addr().unwrap().to_string()), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
}

#[test]
fn abort_from_another_thread_ends_a_wait() {
    let results = job(2, |b| {
        if b.rank() == 0 {
            let b = Arc::new(b);
            let waiter = {
                let b = b.clone();
                thread::spawn(move || b.recv(1, 42))
            };
            thread::sleep(Duration::from_millis(100));
            let start = Instant::now();
            b.abort();
            let err = waiter.join().unwrap().unwrap_err();
            assert!(matches!(err, Error::Aborted { .. }), "{err}");
            assert!(start.elapsed() < Duration::from_millis(500));
        } else {
            // Stay in the job, silent, while rank 0's wait is aborted.
            thread::sleep(Duration::from_millis(600));
        }
    });
    assert_eq!(results.len(), 2);
}

#[test]
fn a_peer_that_left_is_not_waited_for() {
    job(2, |b| {
        if b.rank() == 0 {
            let err = b.recv(1, 3).unwrap_err();
            assert!(matches!(err, Error::PeerFailed { rank: 1, .. }), "{err}");
        }
    });
}

#[test]
fn unanswered_wait_times_out_naming_the_peer() {
    let config = config(500);
    let id = Bootstrap::create_local_id(&config).unwrap();
    let results = run_ranks(&id, 2, &config, |b| {
        if b.rank() == 0 {
            let err = b.recv(1, 3).unwrap_err();
            assert!(err.to_string().contains("rank 1"), "{err}");
        } else {
            thread::sleep(Duration::from_millis(900));
        }
    });
    assert!(results.into_iter().all(|r| r.is_ok()));
}

#[test]
fn ipv6_loopback_job() {
    let mut config = config(20_000);
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_SOCKET_FAMILY", "AF_INET6").unwrap();
    let id = Bootstrap::create_local_id(&config).unwrap();
    assert!(id.root().is_ipv6(), "{:?}", id.root());
    let results = run_ranks(&id, 3, &config, |b| {
        assert!(b.listen_addr().is_ipv6());
        b.allgather(&[b.rank() as u8]).unwrap()
    });
    for r in results {
        assert_eq!(r.unwrap(), vec![0, 1, 2]);
    }
}

/// Raises `flag` after `after`, from another thread.
fn raise_later(flag: &AbortFlag, after: Duration) {
    let flag = flag.clone();
    thread::spawn(move || {
        thread::sleep(after);
        flag.raise();
    });
}

#[test]
fn abort_flag_ends_a_join_waiting_for_the_root() {
    // Rank 1 of 2 never comes, so the root never answers rank 0; the bootstrap timeout
    // (20 s) is far away.
    let config = config(20_000);
    let id = Bootstrap::create_local_id(&config).unwrap();
    let abort = AbortFlag::new();
    raise_later(&abort, Duration::from_millis(300));
    let start = Instant::now();
    let err = Bootstrap::init(&id, 0, 2, &config, abort).err().expect("the join cannot complete");
    let took = start.elapsed();
    assert!(matches!(err, Error::Aborted { .. }), "{err}");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
}

/// A rank that gives up joining (its abort flag) tells the root, which fails the
/// rendezvous for the others at once, naming it — they do not wait for the timeout (20 s);
/// a rank coming afterwards is told too.
#[test]
fn a_rank_giving_up_its_join_fails_the_others_at_once() {
    let config = config(20_000);
    let id = Bootstrap::create_local_id(&config).unwrap();
    let abort = AbortFlag::new();
    raise_later(&abort, Duration::from_millis(200));
    let start = Instant::now();
    let waiting: Vec<_> = (0..2)
        .map(|rank| {
            let config = config.clone();
            thread::spawn(move || (Bootstrap::init(&id, rank, 4, &config, AbortFlag::new()).err().expect("rank 3 never comes"), start.elapsed()))
        })
        .collect();
    let err = Bootstrap::init(&id, 2, 4, &config, abort).err().expect("aborted");
    assert!(matches!(err, Error::Aborted { .. }), "{err}");
    for h in waiting {
        let (err, took) = h.join().unwrap();
        assert!(matches!(err, Error::Aborted { .. }) && err.to_string().contains("rank 2 gave up joining"), "{err}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    let late = Bootstrap::init(&id, 3, 4, &config, AbortFlag::new()).err().expect("the rendezvous failed");
    assert!(late.to_string().contains("rank 2 gave up joining"), "{late}");
}

/// A grow whose old member fails before reaching the rendezvous: the members waiting there
/// give up as soon as the failure is known (here announced, as a dead rank's neighbour
/// does), naming it, and the new rank learns it from the root — nobody waits for the
/// bootstrap timeout (20 s).
#[test]
fn a_member_failing_before_the_grow_rendezvous_fails_the_grow_at_once() {
    let grow_config = config(20_000);
    let grow_id = Bootstrap::create_local_id(&grow_config).unwrap();
    let start = Instant::now();
    let results = job(3, move |b| {
        if b.rank() == 2 {
            // Never comes to the grow; "dies" 200 ms in.
            thread::sleep(Duration::from_millis(200));
            b.announce_failure("test: rank 2 is declared failed", &[2]);
            return None;
        }
        let err = b.grow(&grow_id, 4, &config(20_000), AbortFlag::new()).err().expect("rank 2 never comes");
        Some((err, start.elapsed()))
    });
    let newcomer = Bootstrap::init(&grow_id, 3, 4, &grow_config, AbortFlag::new()).err().expect("rank 2 never comes");
    let newcomer_took = start.elapsed();
    for (rank, (err, took)) in results.into_iter().flatten().enumerate() {
        assert!(matches!(err, Error::PeerFailed { rank: 2, .. }), "rank {rank}: {err}");
        assert!(took < Duration::from_secs(2), "rank {rank}: {took:?}");
    }
    assert!(matches!(newcomer, Error::PeerFailed { rank: 2, .. }), "{newcomer}");
    assert!(newcomer.to_string().contains("gave up joining"), "{newcomer}");
    assert!(newcomer_took < Duration::from_secs(2), "{newcomer_took:?}");
    // Growing to no more ranks is refused by name.
    let e = job(1, |b| b.grow(&UniqueId::with_random_secret("127.0.0.1:1".parse().unwrap()).unwrap(), 1, &config(1000), AbortFlag::new()).err().unwrap().to_string());
    assert!(e[0].contains("grow to 1 ranks"), "{e:?}");
}

#[test]
fn abort_flag_ends_a_split_and_an_agreement_waiting_for_a_peer() {
    // Rank 1 enters neither the split nor the agreement; rank 0's waits end on its flag.
    let results = job(2, |b| {
        if b.rank() == 1 {
            thread::sleep(Duration::from_millis(1500));
            return Ok(Duration::ZERO);
        }
        let abort = AbortFlag::new();
        raise_later(&abort, Duration::from_millis(200));
        let start = Instant::now();
        match b.split(0, 0, abort) {
            Err(Error::Aborted { .. }) => {}
            other => return Err(format!("split: {:?}", other.map(|c| c.map(|c| c.nranks())))),
        }
        let split = start.elapsed();
        let abort = AbortFlag::new();
        raise_later(&abort, Duration::from_millis(200));
        let start = Instant::now();
        match b.agree_failed(&abort) {
            Err(Error::Aborted { .. }) => {}
            other => return Err(format!("agreement: {other:?}")),
        }
        Ok(split.max(start.elapsed()))
    });
    let took = results[0].clone().unwrap();
    assert!(took >= Duration::from_millis(200) && took < Duration::from_millis(700), "{took:?}");
    assert!(results[1].is_ok());
}
