//! The plan cache: suspend and resume free and restore plans; more plans than the cache holds.

use super::*;

/// ncclCommSuspend/Resume on the GPU backend: a suspension with NCCL_SUSPEND_MEM frees the
/// plans and refuses collectives and send/recv (InvalidUsage naming it) until resumed;
/// after resume both paths (the ring, the direct LL one) give checked results again.
#[test]
fn suspend_releases_plans_and_resume_restores_service() {
    let Some(g) = gpus() else { return };
    let comms = init_all(&[0, 1 % g], &config());
    let cases = [
        Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: 1 << 20, root: 0, in_place: false },
        Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: 999, root: 0, in_place: true },
    ];
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let stream = c.stream().unwrap();
                let buffers = Buffers::for_cases(c, &cases);
                let run = |case: &Case| check::run_case_on_gpu(c, &stream, &buffers.send, &buffers.recv, case).unwrap();
                cases.iter().for_each(|case| assert!(run(case).is_none(), "rank {}: {case} before suspending", c.rank()));
                let before = c.memory_stats();
                assert!(before.releasable > 0 && before.persistent > 0 && !before.suspended, "{before:?}");
                c.suspend(true).unwrap();
                let during = c.memory_stats();
                assert!(during.suspended && during.releasable == 0 && during.persistent == before.persistent, "{during:?}");
                // SAFETY: refused before anything is launched.
                let e = unsafe { c.launch_collective(Collective::AllReduce, buffers.send.ptr(), buffers.recv.ptr(), 8, DataType::Float32, ReduceOp::Sum, 0, stream.raw()) }.unwrap_err();
                assert!(e.to_string().contains("suspended"), "{e}");
                let p2p = [gpu::P2p { send: true, peer: 1 - c.rank(), addr: buffers.send.ptr(), bytes: 64 }];
                // SAFETY: as above.
                let e = unsafe { c.launch_p2p(&p2p, stream.raw()) }.unwrap_err();
                assert!(e.to_string().contains("suspended"), "{e}");
                assert!(c.suspend(false).is_err(), "a second suspension is refused");
                c.resume().unwrap();
                assert!(c.resume().is_err(), "resuming twice is refused");
                assert!(c.memory_stats().releasable > 0);
                cases.iter().for_each(|case| assert!(run(case).is_none(), "rank {}: {case} after resuming", c.rank()));
            });
        }
    });
}

/// More distinct plans than a communicator caches (512): send/recv groups of 4000 sizes on
/// the Simple path, each a plan of its own, the first 2600 enqueued without waiting (the
/// cache starts over in new arenas while the old ones' kernels are queued, and past four
/// such arenas waits for the stream), the rest with a wait every 100 (old arenas reused).
/// Every message is checked, and the plans' memory stays bounded.
#[test]
fn more_plans_than_the_cache_holds() {
    let Some(g) = gpus() else { return };
    let comms = init_all(&[0, 1 % g], &config());
    const QUEUED: usize = 2600;
    const GROUPS: usize = 4000;
    // Above the LL limit (64 KiB): the Simple path, whose groups are uploaded plans.
    let bytes = |k: usize| 65_537 + 8 * k;
    let at: Vec<usize> = (0..=GROUPS).scan(0, |at, k| Some(std::mem::replace(at, *at + bytes(k).next_multiple_of(64)))).collect();
    std::thread::scope(|s| {
        for c in &comms {
            let at = &at;
            s.spawn(move || {
                let (rank, peer) = (c.rank(), 1 - c.rank());
                let stream = c.stream().unwrap();
                let total = at[GROUPS];
                let (send, recv) = (c.alloc(total).unwrap(), c.alloc(total).unwrap());
                let pattern = |from: usize, i: usize| ((from * 131 + i * 7 + i / 4099) % 251) as u8;
                send.upload(&(0..total).map(|i| pattern(rank, i)).collect::<Vec<u8>>()).unwrap();
                recv.upload(&vec![0xA5; total]).unwrap();
                for (k, &offset) in at[..GROUPS].iter().enumerate() {
                    let ops = [
                        gpu::P2p { send: true, peer, addr: send.ptr() + offset as u64, bytes: bytes(k) },
                        gpu::P2p { send: false, peer, addr: recv.ptr() + offset as u64, bytes: bytes(k) },
                    ];
                    // SAFETY: both ranges lie in the buffers, untouched until the waits below.
                    unsafe { c.launch_p2p(&ops, stream.raw()) }.unwrap_or_else(|e| panic!("rank {rank}, group {k}: {e}"));
                    if k >= QUEUED && k % 100 == 0 {
                        c.wait(&stream).unwrap_or_else(|e| panic!("rank {rank}, group {k}: {e}"));
                    }
                }
                c.wait(&stream).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                let mut got = vec![0u8; total];
                recv.download(&mut got).unwrap();
                for (k, &offset) in at[..GROUPS].iter().enumerate() {
                    if let Some(i) = (offset..offset + bytes(k)).find(|&i| got[i] != pattern(peer, i)) {
                        panic!("rank {rank}, group {k} ({} bytes): byte {} is {:#x}, expected {:#x}", bytes(k), i - offset, got[i], pattern(peer, i));
                    }
                }
                // Plans of a few KiB each: the current arena and at most four old ones,
                // a 4 MiB block each.
                let stats = c.memory_stats();
                assert!(stats.releasable <= 5 * (4 << 20), "rank {rank}: {stats:?}");
                c.barrier().unwrap();
            });
        }
    });
}
