//! Non-blocking creation (split, shrink, grow, init): each call returns at once, the
//! pending communicator answers InProgress while a late rank holds the others back, then
//! works; one whose peers never come ends with Aborted soon after abort. Ranks are threads
//! of this process.

mod common;

use std::time::{Duration, Instant};

use common::checked_all_reduce;
use oxccl_runtime::{bootstrap::Config, Communicator, ReduceOp};

/// Polls `pending` until it is done (at most 30 s), counting the InProgress answers seen.
fn poll_done(pending: &oxccl_runtime::PendingCommunicator) -> (usize, Option<oxccl_runtime::Error>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut in_progress = 0;
    loop {
        match pending.async_error() {
            Some(oxccl_runtime::Error::InProgress { .. }) if Instant::now() < deadline => in_progress += 1,
            other => return (in_progress, other),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `n` non-blocking communicators (NCCL_COMM_BLOCKING=0) of ranks as threads, on loopback.
fn local_comms(n: u32) -> Vec<Communicator> {
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    config.set("NCCL_COMM_BLOCKING", "0").unwrap();
    Communicator::init_all(n, &config).unwrap()
}

/// Non-blocking split (with a NOCOLOR rank), shrink and grow of 4 ranks (threads): each
/// call returns at once; the pending communicator and the parent report InProgress while
/// a rank that enters late holds the others back, then each works (checked all_reduce).
#[test]
fn nonblocking_split_shrink_and_grow() {
    use oxccl_runtime::{bootstrap::NOCOLOR, Error};
    let comms = local_comms(4);
    let grow_id = comms[0].grow_id().unwrap();
    let reports: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let rank = comm.rank();
                    let late = Duration::from_millis(300);
                    if rank == 3 {
                        std::thread::sleep(late);
                    }
                    // Split: ranks 0-2 by parity, rank 3 joins nothing.
                    let start = Instant::now();
                    let color = if rank == 3 { NOCOLOR } else { (rank % 2) as i32 };
                    let pending = comm.split_nonblocking(color, rank as i32).unwrap();
                    let returned = start.elapsed();
                    assert!(returned < Duration::from_millis(100), "split_nonblocking blocked {returned:?}");
                    let mut report = format!("rank {rank}: split returned in {:.2} ms", returned.as_secs_f64() * 1e3);
                    match pending {
                        None => {
                            assert_eq!(rank, 3);
                            // The parent reports the exchange still running, then nothing.
                            let deadline = Instant::now() + Duration::from_secs(30);
                            while matches!(comm.error(), Some(Error::InProgress { .. })) && Instant::now() < deadline {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            assert!(comm.error().is_none(), "{:?}", comm.error());
                        }
                        Some(p) => {
                            assert!(matches!(comm.error(), Some(Error::InProgress { .. })), "parent: {:?}", comm.error());
                            let mut data = [1.0f32; 4];
                            assert!(matches!(comm.all_reduce_in_place(&mut data, ReduceOp::Sum), Err(Error::InProgress { .. })));
                            let (seen, outcome) = poll_done(&p);
                            assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
                            // Rank 3 enters 300 ms late: the others saw InProgress for it.
                            assert!(seen > 0, "rank {rank} never saw InProgress");
                            let child = p.wait(Duration::from_secs(1)).unwrap();
                            assert_eq!(child.nranks(), if rank % 2 == 0 { 2 } else { 1 });
                            checked_all_reduce(&child);
                            report += &format!(", child {} of {} after {seen} InProgress polls", child.rank(), child.nranks());
                        }
                    }
                    // The parent works again.
                    checked_all_reduce(comm);
                    // Shrink rank 3 out (it takes no part).
                    if rank != 3 {
                        let p = comm.shrink_nonblocking(&[3], false).unwrap();
                        assert_eq!((p.rank(), p.nranks()), (rank, 3));
                        let (_, outcome) = poll_done(&p);
                        assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
                        let shrunk = p.wait(Duration::from_secs(1)).unwrap();
                        checked_all_reduce(&shrunk);
                        report += ", shrunk to 3";
                    }
                    // Grow to 5 with a new rank that joins late.
                    let p = comm.grow_nonblocking(5, &grow_id).unwrap();
                    let (seen, outcome) = poll_done(&p);
                    assert!(outcome.is_none(), "rank {rank}: {outcome:?}");
                    assert!(seen > 0, "rank {rank}: grow never in progress");
                    let grown = p.wait(Duration::from_secs(1)).unwrap();
                    assert_eq!((grown.rank(), grown.nranks()), (rank, 5));
                    checked_all_reduce(&grown);
                    report + ", grown to 5"
                })
            })
            .collect();
        let newcomer = s.spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            let mut config = Config::defaults();
            config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
            let p = Communicator::init_nonblocking(&grow_id, 4, 5, &config);
            let c = p.wait(Duration::from_secs(30)).unwrap();
            checked_all_reduce(&c);
        });
        let reports = handles.into_iter().map(|h| h.join().unwrap()).collect();
        newcomer.join().unwrap();
        reports
    });
    // Argument errors come at once, naming what was wrong.
    let e = comms[0].grow_nonblocking(2, &grow_id).err().unwrap();
    assert!(e.to_string().contains("grow to 2 ranks"), "{e}");
    let e = comms[0].shrink_nonblocking(&[9], false).err().unwrap();
    assert!(e.to_string().contains("rank 9 out of range"), "{e}");
    eprintln!("{}", reports.join("\n"));
}

/// A non-blocking creation that cannot finish (its peers never come) ends with Aborted
/// within a few hundred ms of abort(), far before the bootstrap timeout; the parent is
/// usable again afterwards, and dropping a pending communicator aborts it too.
#[test]
fn nonblocking_creations_abort() {
    use oxccl_runtime::Error;
    let comms = local_comms(2);
    let check_abort = |p: oxccl_runtime::PendingCommunicator, what: &str| {
        // Off the 100 ms rhythm of the creation's waits, so that the time shows it.
        std::thread::sleep(Duration::from_millis(150));
        assert!(matches!(p.async_error(), Some(Error::InProgress { .. })), "{what}: {:?}", p.async_error());
        // A wait that runs out leaves the creation going.
        assert!(matches!(p.wait(Duration::from_millis(10)), Err(Error::InProgress { .. })), "{what}");
        assert!(matches!(p.async_error(), Some(Error::InProgress { .. })), "{what}: {:?}", p.async_error());
        let start = Instant::now();
        p.abort();
        let (_, outcome) = poll_done(&p);
        let took = start.elapsed();
        assert!(matches!(outcome, Some(Error::Aborted { .. })), "{what}: {outcome:?}");
        assert!(took < Duration::from_secs(1), "{what}: aborted after {took:?}");
        format!("{what} aborted in {:.1} ms", took.as_secs_f64() * 1e3)
    };
    // Rank 1 never enters the split.
    let mut reports = vec![check_abort(comms[0].split_nonblocking(0, 0).unwrap().unwrap(), "split")];
    assert!(comms[0].error().is_none(), "{:?}", comms[0].error());
    // Nobody else comes to the grow id's rendezvous.
    let id = comms[0].grow_id().unwrap();
    reports.push(check_abort(comms[0].grow_nonblocking(3, &id).unwrap(), "grow"));
    // A join whose other rank never comes.
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    let id = oxccl_runtime::bootstrap::Bootstrap::create_local_id(&config).unwrap();
    reports.push(check_abort(Communicator::init_nonblocking(&id, 0, 2, &config), "init"));
    // Aborting the parent aborts what runs from it.
    let p = comms[0].split_nonblocking(0, 0).unwrap().unwrap();
    comms[0].abort();
    let (_, outcome) = poll_done(&p);
    assert!(matches!(outcome, Some(Error::Aborted { .. })), "{outcome:?}");
    eprintln!("{}", reports.join("\n"));
}
