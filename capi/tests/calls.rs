//! The exported functions called as C would call them, from Rust: one thread driving four
//! ranks of ncclCommInitAll through a group, and every refusal with its code and message.

use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

mod common;

use common::{async_state, last_error, nonblocking_config, poll_async, ConfigPrefix, FLOAT, INVALID_ARGUMENT, INVALID_USAGE, IN_PROGRESS, SUCCESS, SUM};
use nccl::*;

fn init_all(n: usize) -> Vec<*mut c_void> {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut comms: Vec<*mut c_void> = vec![null_mut(); n];
    // SAFETY: an array of n handles.
    assert_eq!(unsafe { ncclCommInitAll(comms.as_mut_ptr().cast(), n as i32, null()) }, SUCCESS, "{}", last_error());
    comms
}

#[test]
fn one_thread_drives_four_ranks_through_a_group() {
    let comms = init_all(4);
    let count = 10_001;
    let sends: Vec<Vec<f32>> = (0..4).map(|r| vec![r as f32 + 1.0; count]).collect();
    let mut recvs: Vec<Vec<f32>> = vec![vec![0.0; count]; 4];
    // SAFETY: live handles and buffers of `count` floats, untouched until ncclGroupEnd.
    unsafe {
        assert_eq!(ncclGroupStart(), SUCCESS);
        for r in 0..4 {
            assert_eq!(ncclAllReduce(sends[r].as_ptr().cast(), recvs[r].as_mut_ptr().cast(), count, FLOAT, SUM, comms[r].cast(), null_mut()), SUCCESS);
        }
        assert_eq!(ncclGroupEnd(), SUCCESS, "{}", last_error());
    }
    assert!(recvs.iter().all(|v| v.iter().all(|&x| x == 10.0)));
    for c in comms {
        // SAFETY: a live handle, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS);
    }
}

#[test]
fn refusals_are_named_and_nothing_panics() {
    let comms = init_all(2);
    let c = comms[0].cast();
    let mut buf = [0f32; 8];
    let p = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: every call below passes either valid pointers or the NULL/garbage it tests.
    unsafe {
        assert_eq!(ncclAllReduce(p, p, 8, FLOAT, SUM, null_mut(), null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("comm is NULL"), "{}", last_error());
        assert_eq!(ncclAllReduce(p, p, 8, 99, SUM, c, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("datatype 99"));
        assert_eq!(ncclAllReduce(p, p, 8, FLOAT, 17, c, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("op 17"));
        assert_eq!(ncclAllReduce(null(), null_mut(), 8, FLOAT, SUM, c, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("null"), "{}", last_error());
        assert_eq!(ncclAllReduce(p, p, usize::MAX / 2, FLOAT, SUM, c, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("overflows"), "{}", last_error());
        assert_eq!(ncclSend(p, 8, FLOAT, 2, c, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("peer 2"));
        assert_eq!(ncclAllReduce(p, p, 8, FLOAT, SUM, c, 0x1000 as *mut c_void), INVALID_USAGE);
        assert!(last_error().contains("host backend"));
        assert_eq!(ncclGroupEnd(), INVALID_USAGE);
        assert_eq!(ncclCommRevoke(c, 1), INVALID_ARGUMENT);
        assert!(last_error().contains("revokeFlags 0x1"), "{}", last_error());
        assert_eq!(ncclCommShrink(c, null_mut(), 1, &mut null_mut(), null_mut(), 0), INVALID_ARGUMENT);
        assert!(last_error().contains("excludeRanksList is NULL"), "{}", last_error());
        assert_eq!(ncclCommInitRank(null_mut(), 2, NcclUniqueId { internal: [0; 128] }, 0), INVALID_ARGUMENT);
        let mut comm = null_mut();
        assert_eq!(ncclCommInitRank(&mut comm, 2, NcclUniqueId { internal: [7; 128] }, 0), INVALID_ARGUMENT);
        assert!(last_error().contains("commId"), "{}", last_error());
        let mut garbage = [0u64; 8];
        assert_eq!(ncclCommFinalize(garbage.as_mut_ptr().cast()), INVALID_ARGUMENT);
        assert!(CStr::from_ptr(ncclGetErrorString(INVALID_USAGE)).to_str().unwrap().contains("invalid usage"));
        let mut version = 0;
        assert_eq!(pncclGetVersion(&mut version), SUCCESS);
        assert_eq!(version, 22803);
    }
    // The refused calls left both communicators usable.
    let mut recvs = [[0f32; 8]; 2];
    let sends = [[1f32; 8], [2f32; 8]];
    // SAFETY: live handles and buffers.
    unsafe {
        assert_eq!(ncclGroupStart(), SUCCESS);
        for r in 0..2 {
            assert_eq!(ncclAllReduce(sends[r].as_ptr().cast(), recvs[r].as_mut_ptr().cast(), 8, FLOAT, SUM, comms[r].cast(), null_mut()), SUCCESS);
        }
        assert_eq!(ncclGroupEnd(), SUCCESS, "{}", last_error());
        assert!(recvs.iter().flatten().all(|&x| x == 3.0));
        for c in comms {
            assert_eq!(ncclCommAbort(c.cast()), SUCCESS);
        }
    }
}

/// Runs `body(rank, comm)` for every communicator on its own thread (collective calls
/// such as shrink must be made by every rank at once), returning the results in rank order.
fn on_threads<T: Send + 'static>(comms: &[*mut c_void], body: impl Fn(usize, *mut c_void) -> T + Send + Sync + 'static) -> Vec<T> {
    let body = std::sync::Arc::new(body);
    let handles: Vec<_> = comms
        .iter()
        .enumerate()
        .map(|(rank, &c)| {
            let (body, c) = (body.clone(), c as usize);
            std::thread::spawn(move || body(rank, c as *mut c_void))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// All-reduces `rank + 1` on every communicator (one thread each) and checks the sum.
fn checked_all_reduce(comms: &[*mut c_void]) {
    let n = comms.len();
    let sums = on_threads(comms, |rank, c| {
        let send = vec![rank as f32 + 1.0; 1000];
        let mut recv = vec![0f32; 1000];
        // SAFETY: a live handle and buffers of 1000 floats.
        let rc = unsafe { ncclAllReduce(send.as_ptr().cast(), recv.as_mut_ptr().cast(), 1000, FLOAT, SUM, c.cast(), null_mut()) };
        assert_eq!(rc, SUCCESS, "{}", last_error());
        recv[999]
    });
    let expected = (n * (n + 1) / 2) as f32;
    assert!(sums.iter().all(|&s| s == expected), "{sums:?}, expected {expected}");
}

/// ncclCommShrink with OXCCL_SHRINK_AGREE and no list: the ranks agree that none failed
/// and all get a communicator of the same size; the flag with a list, or an unknown flag,
/// is refused by name.
#[test]
fn shrink_with_agreement_and_no_list() {
    let comms = init_all(3);
    let mut dummy = null_mut();
    let mut one = [1i32];
    // SAFETY: live handle, valid pointers.
    unsafe {
        assert_eq!(ncclCommShrink(comms[0].cast(), one.as_mut_ptr(), 1, &mut dummy, null_mut(), SHRINK_AGREE), INVALID_ARGUMENT);
        assert!(last_error().contains("OXCCL_SHRINK_AGREE with excludeRanksCount 1"), "{}", last_error());
        assert_eq!(ncclCommShrink(comms[0].cast(), null_mut(), 0, &mut dummy, null_mut(), 0x40), INVALID_ARGUMENT);
        assert!(last_error().contains("shrinkFlags 0x40"), "{}", last_error());
    }
    let children = on_threads(&comms, |_, c| {
        let mut child: *mut c_void = null_mut();
        // SAFETY: a live handle and an out pointer.
        let rc = unsafe { ncclCommShrink(c.cast(), null_mut(), 0, (&mut child as *mut *mut c_void).cast(), null_mut(), SHRINK_AGREE) };
        assert_eq!(rc, SUCCESS, "{}", last_error());
        let mut count = 0;
        // SAFETY: the new handle and an out pointer.
        assert_eq!(unsafe { ncclCommCount(child.cast(), &mut count) }, SUCCESS);
        assert_eq!(count, 3);
        child as usize
    });
    let children: Vec<*mut c_void> = children.into_iter().map(|c| c as *mut c_void).collect();
    checked_all_reduce(&children);
    for c in children.into_iter().chain(comms) {
        // SAFETY: live handles, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS);
    }
}

/// ncclCommRevoke on one rank while the others wait in an all_reduce for it: their calls
/// return ncclRemoteError promptly, every later collective is ncclInvalidUsage, and
/// ncclCommShrink (no list) still makes a working communicator of them all.
#[test]
fn revoke_stops_the_others_and_shrink_still_works() {
    const REMOTE_ERROR: i32 = 6;
    let comms = init_all(3);
    let children = on_threads(&comms, |rank, c| {
        let mut buf = vec![1f32; 4096];
        let p = buf.as_mut_ptr().cast::<c_void>();
        // SAFETY: a live handle and a buffer of 4096 floats.
        unsafe {
            if rank == 2 {
                std::thread::sleep(std::time::Duration::from_millis(200));
                assert_eq!(ncclCommRevoke(c.cast(), 0), SUCCESS, "{}", last_error());
            } else {
                let start = std::time::Instant::now();
                assert_eq!(ncclAllReduce(p, p, 4096, FLOAT, SUM, c.cast(), null_mut()), REMOTE_ERROR);
                assert!(last_error().contains("revoked by rank 2"), "{}", last_error());
                assert!(start.elapsed() < std::time::Duration::from_secs(5), "{:?}", start.elapsed());
            }
            assert_eq!(ncclAllReduce(p, p, 4096, FLOAT, SUM, c.cast(), null_mut()), INVALID_USAGE);
            assert!(last_error().contains("revoked"), "{}", last_error());
            assert_eq!(ncclCommFinalize(c.cast()), INVALID_USAGE);
            let mut child: *mut c_void = null_mut();
            assert_eq!(ncclCommShrink(c.cast(), null_mut(), 0, (&mut child as *mut *mut c_void).cast(), null_mut(), 0), SUCCESS, "{}", last_error());
            child as usize
        }
    });
    let children: Vec<*mut c_void> = children.into_iter().map(|c| c as *mut c_void).collect();
    checked_all_reduce(&children);
    for c in children.into_iter().chain(comms) {
        // SAFETY: live handles, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS);
    }
}

/// ncclCommGrow: two ranks and a new one (comm NULL, its rank given) make a communicator
/// of three from an id of ncclCommGetUniqueId; the existing ranks keep theirs. Growing to
/// no more ranks, or an existing rank asking for another rank, is refused by name.
#[test]
fn grow_two_ranks_to_three() {
    let comms = init_all(2);
    let mut id = NcclUniqueId { internal: [0; 128] };
    let mut dummy = null_mut();
    // SAFETY: live handle, valid pointers.
    unsafe {
        assert_eq!(ncclCommGetUniqueId(comms[0].cast(), &mut id), SUCCESS, "{}", last_error());
        assert_eq!(ncclCommGrow(comms[0].cast(), 2, &id, -1, &mut dummy, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("already has 2"), "{}", last_error());
        assert_eq!(ncclCommGrow(comms[0].cast(), 3, &id, 1, &mut dummy, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("keep their rank"), "{}", last_error());
        assert_eq!(ncclCommGrow(null_mut(), 3, &id, 3, &mut dummy, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("rank 3 out of range"), "{}", last_error());
    }
    let id_bytes = id.internal;
    let mut all = comms.clone();
    all.push(null_mut()); // the new rank
    let grown = on_threads(&all, move |rank, c| {
        let id = NcclUniqueId { internal: id_bytes };
        let mut child: *mut c_void = null_mut();
        let given = if c.is_null() { rank as i32 } else { -1 };
        // SAFETY: a live handle or NULL, the id and an out pointer.
        let rc = unsafe { ncclCommGrow(c.cast(), 3, &id, given, (&mut child as *mut *mut c_void).cast(), null_mut()) };
        assert_eq!(rc, SUCCESS, "{}", last_error());
        let mut r = -1;
        // SAFETY: the new handle and an out pointer.
        assert_eq!(unsafe { ncclCommUserRank(child.cast(), &mut r) }, SUCCESS);
        assert_eq!(r, rank as i32);
        child as usize
    });
    let grown: Vec<*mut c_void> = grown.into_iter().map(|c| c as *mut c_void).collect();
    checked_all_reduce(&grown);
    for c in grown.into_iter().chain(comms) {
        // SAFETY: live handles, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS);
    }
}

/// ncclConfig_t with blocking = 0: ncclCommInitRankConfig returns ncclInProgress at once
/// and ncclCommGetAsyncError reports ncclInProgress until the communicator is ready, then
/// ncclSuccess; calls on it before that return ncclInProgress.
#[test]
fn nonblocking_init_from_c() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut id = NcclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, SUCCESS);
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut cfg = nonblocking_config();
                let mut comm: *mut c_void = null_mut();
                // SAFETY: valid out pointer and config.
                let rc = unsafe { ncclCommInitRankConfig((&mut comm as *mut *mut c_void).cast(), 2, id, rank, (&mut cfg as *mut ConfigPrefix).cast()) };
                assert_eq!(rc, IN_PROGRESS, "{}", last_error());
                assert!(!comm.is_null());
                assert_eq!(poll_async(comm).0, SUCCESS);
                comm as usize
            })
        })
        .collect();
    let comms: Vec<*mut c_void> = handles.into_iter().map(|h| h.join().unwrap() as *mut c_void).collect();
    let sends = [[1f32; 4], [2f32; 4]];
    let mut recvs = [[0f32; 4]; 2];
    // SAFETY: live handles and buffers.
    unsafe {
        assert_eq!(ncclGroupStart(), SUCCESS);
        for r in 0..2 {
            assert_eq!(ncclAllReduce(sends[r].as_ptr().cast(), recvs[r].as_mut_ptr().cast(), 4, FLOAT, SUM, comms[r].cast(), null_mut()), SUCCESS);
        }
        assert_eq!(ncclGroupEnd(), SUCCESS, "{}", last_error());
        assert!(recvs.iter().flatten().all(|&x| x == 3.0));
        for c in comms {
            assert_eq!(ncclCommDestroy(c.cast()), SUCCESS);
        }
    }
}

/// nccl-tests' way of making the ranks of one process: ncclGroupStart, ncclCommInitRank
/// for every rank from one thread, ncclGroupEnd. Each creation runs on a thread of its own
/// and ncclGroupEnd returns once all are ready; the communicators then all-reduce.
#[test]
fn one_thread_creates_three_ranks_inside_a_group() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut id = NcclUniqueId { internal: [0; 128] };
    let mut comms: Vec<*mut c_void> = vec![null_mut(); 3];
    // SAFETY: valid out pointers; the handles are used only after ncclGroupEnd.
    unsafe {
        assert_eq!(ncclGetUniqueId(&mut id), SUCCESS, "{}", last_error());
        assert_eq!(ncclGroupStart(), SUCCESS);
        for (rank, c) in comms.iter_mut().enumerate() {
            assert_eq!(ncclCommInitRank((c as *mut *mut c_void).cast(), 3, NcclUniqueId { internal: id.internal }, rank as i32), SUCCESS, "{}", last_error());
        }
        assert_eq!(ncclGroupEnd(), SUCCESS, "{}", last_error());
    }
    let count = 1000;
    let sends: Vec<Vec<f32>> = (0..3).map(|r| vec![r as f32; count]).collect();
    let mut recvs = vec![vec![0f32; count]; 3];
    // SAFETY: live handles and buffers of `count` floats, untouched until ncclGroupEnd.
    unsafe {
        assert_eq!(ncclGroupStart(), SUCCESS);
        for r in 0..3 {
            let mut rank = -1;
            assert_eq!(ncclCommUserRank(comms[r].cast(), &mut rank), SUCCESS, "{}", last_error());
            assert_eq!(rank, r as i32);
            assert_eq!(ncclAllReduce(sends[r].as_ptr().cast(), recvs[r].as_mut_ptr().cast(), count, FLOAT, SUM, comms[r].cast(), null_mut()), SUCCESS, "{}", last_error());
        }
        assert_eq!(ncclGroupEnd(), SUCCESS, "{}", last_error());
    }
    assert!(recvs.iter().all(|v| v.iter().all(|&x| x == 3.0)));
    for c in comms {
        // SAFETY: a live handle, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS);
    }
}

/// ncclCommAbort on a communicator whose creation still waits for a peer — created
/// non-blocking inside a group, the path a non-blocking init on a GPU takes (its creation
/// and the GPU's connection run on a thread of their own) — ends the creation: the root
/// hears that the rank gave up, so the peer coming later fails at once, naming it, instead
/// of waiting out the bootstrap timeout.
#[test]
fn abort_ends_a_creation_still_waiting_for_its_peers() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut id = NcclUniqueId { internal: [0; 128] };
    let mut comm: *mut c_void = null_mut();
    let mut cfg = nonblocking_config();
    // SAFETY: valid out pointers and config.
    unsafe {
        assert_eq!(ncclGetUniqueId(&mut id), SUCCESS, "{}", last_error());
        assert_eq!(ncclGroupStart(), SUCCESS);
        let rc = ncclCommInitRankConfig((&mut comm as *mut *mut c_void).cast(), 2, NcclUniqueId { internal: id.internal }, 0, (&mut cfg as *mut ConfigPrefix).cast());
        assert!(rc == SUCCESS || rc == IN_PROGRESS, "{rc}: {}", last_error());
        let rc = ncclGroupEnd();
        assert!(rc == SUCCESS || rc == IN_PROGRESS, "{rc}: {}", last_error());
    }
    std::thread::sleep(std::time::Duration::from_millis(150));
    let state = async_state(comm);
    assert_eq!(state, IN_PROGRESS, "rank 1 never came, yet {state}");
    let start = std::time::Instant::now();
    // SAFETY: a live handle, not used afterwards.
    assert_eq!(unsafe { ncclCommAbort(comm.cast()) }, SUCCESS, "{}", last_error());
    assert!(start.elapsed() < std::time::Duration::from_millis(500), "abort took {:?}", start.elapsed());
    let mut late: *mut c_void = null_mut();
    // SAFETY: a valid out pointer.
    let rc = unsafe { ncclCommInitRank((&mut late as *mut *mut c_void).cast(), 2, NcclUniqueId { internal: id.internal }, 1) };
    let (message, took) = (last_error(), start.elapsed());
    assert_ne!(rc, SUCCESS);
    assert!(message.contains("rank 0 gave up joining"), "{message}");
    assert!(took < std::time::Duration::from_secs(5), "the late rank failed after {took:?}");
}

const NOCOLOR: i32 = -1;
const SHRINK_AGREE: i32 = 0x100;

/// `n` communicators made with `config.blocking = 0` (one thread each), polled to ready.
fn init_nonblocking(n: usize) -> Vec<*mut c_void> {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut id = NcclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, SUCCESS);
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut cfg = nonblocking_config();
                let mut comm: *mut c_void = null_mut();
                // SAFETY: valid out pointer and config.
                let rc = unsafe { ncclCommInitRankConfig((&mut comm as *mut *mut c_void).cast(), n as i32, id, rank as i32, (&mut cfg as *mut ConfigPrefix).cast()) };
                assert_eq!(rc, IN_PROGRESS, "{}", last_error());
                assert_eq!(poll_async(comm).0, SUCCESS, "{}", last_error());
                comm as usize
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap() as *mut c_void).collect()
}

/// Communicators created non-blocking make non-blocking children (NCCL's inheritance, no
/// config passed): ncclCommSplit (one rank NOCOLOR), ncclCommShrink (a list, then
/// OXCCL_SHRINK_AGREE) and ncclCommGrow (with a new rank whose config says blocking = 0)
/// return ncclInProgress at once; ncclCommGetAsyncError goes InProgress → Success on the
/// new handle (on the parent for NOCOLOR); every result all-reduces correctly.
#[test]
fn nonblocking_split_shrink_and_grow_from_c() {
    let comms = init_nonblocking(3);
    // Split: ranks 0 and 1 together, rank 2 NOCOLOR and 300 ms late, so that the others
    // provably wait in the background.
    let split = on_threads(&comms, |rank, c| {
        if rank == 2 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        let mut child: *mut c_void = null_mut();
        let color = if rank == 2 { NOCOLOR } else { 0 };
        let start = std::time::Instant::now();
        // SAFETY: a live handle and an out pointer.
        let rc = unsafe { ncclCommSplit(c.cast(), color, rank as i32, (&mut child as *mut *mut c_void).cast(), null_mut()) };
        assert_eq!(rc, IN_PROGRESS, "{}", last_error());
        assert!(start.elapsed() < std::time::Duration::from_millis(100), "ncclCommSplit blocked {:?}", start.elapsed());
        let (code, polls) = if rank == 2 {
            assert!(child.is_null());
            poll_async(c)
        } else {
            // The parent is busy while its split runs.
            assert_eq!(async_state(c), IN_PROGRESS);
            poll_async(child)
        };
        assert_eq!(code, SUCCESS, "{}", last_error());
        assert!(rank == 2 || polls > 0, "rank {rank} never saw ncclInProgress");
        child as usize
    });
    let children: Vec<*mut c_void> = split[..2].iter().map(|&c| c as *mut c_void).collect();
    checked_all_reduce(&children);
    // Shrink by agreement: nobody failed, so all three stay.
    let agreed = on_threads(&comms, |_, c| {
        let mut child: *mut c_void = null_mut();
        // SAFETY: a live handle and an out pointer.
        let rc = unsafe { ncclCommShrink(c.cast(), null_mut(), 0, (&mut child as *mut *mut c_void).cast(), null_mut(), SHRINK_AGREE) };
        assert_eq!(rc, IN_PROGRESS, "{}", last_error());
        assert_eq!(poll_async(child).0, SUCCESS, "{}", last_error());
        child as usize
    });
    let agreed: Vec<*mut c_void> = agreed.into_iter().map(|c| c as *mut c_void).collect();
    checked_all_reduce(&agreed);
    // Shrink rank 2 out with a list; rank 2 (excluded) gets NULL at once. (Rank 2 takes no
    // part, so afterwards the parent's count of shrinks differs on it and a later shrink
    // of the parent by all three would not match: the one by agreement comes first.)
    let shrunk = on_threads(&comms, |rank, c| {
        let mut child: *mut c_void = null_mut();
        let mut exclude = [2];
        // SAFETY: a live handle, a list of one rank and an out pointer.
        let rc = unsafe { ncclCommShrink(c.cast(), exclude.as_mut_ptr(), 1, (&mut child as *mut *mut c_void).cast(), null_mut(), 0) };
        if rank == 2 {
            assert_eq!((rc, child.is_null()), (SUCCESS, true), "{}", last_error());
        } else {
            assert_eq!(rc, IN_PROGRESS, "{}", last_error());
            assert_eq!(poll_async(child).0, SUCCESS, "{}", last_error());
        }
        child as usize
    });
    let shrunk: Vec<*mut c_void> = shrunk[..2].iter().map(|&c| c as *mut c_void).collect();
    checked_all_reduce(&shrunk);
    // Grow to 4: a new rank (NULL comm, its own non-blocking config) joins 300 ms late.
    let mut id = NcclUniqueId { internal: [0; 128] };
    // SAFETY: a live handle and an out pointer.
    assert_eq!(unsafe { ncclCommGetUniqueId(comms[0].cast(), &mut id) }, SUCCESS, "{}", last_error());
    let id_bytes = id.internal;
    let mut all = comms.clone();
    all.push(null_mut());
    let grown = on_threads(&all, move |rank, c| {
        let id = NcclUniqueId { internal: id_bytes };
        let mut child: *mut c_void = null_mut();
        let mut cfg = nonblocking_config();
        let (given, cfg) = if c.is_null() {
            std::thread::sleep(std::time::Duration::from_millis(300));
            (rank as i32, (&mut cfg as *mut ConfigPrefix).cast())
        } else {
            (-1, null_mut())
        };
        // SAFETY: a live handle or NULL, the id, an out pointer and a config or NULL.
        let rc = unsafe { ncclCommGrow(c.cast(), 4, &id, given, (&mut child as *mut *mut c_void).cast(), cfg) };
        assert_eq!(rc, IN_PROGRESS, "{}", last_error());
        let (code, polls) = poll_async(child);
        assert_eq!(code, SUCCESS, "{}", last_error());
        assert!(c.is_null() || polls > 0, "rank {rank} never saw ncclInProgress");
        child as usize
    });
    let grown: Vec<*mut c_void> = grown.into_iter().map(|c| c as *mut c_void).collect();
    checked_all_reduce(&grown);
    for c in children.into_iter().chain(shrunk).chain(agreed).chain(grown).chain(comms) {
        // SAFETY: live handles, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS, "{}", last_error());
    }
}

/// A blocking parent with a config of blocking = 0 makes a non-blocking split; one that
/// cannot finish (the other rank never splits) is ended by ncclCommAbort on its handle,
/// and the parent no longer reports ncclInProgress.
#[test]
fn a_nonblocking_split_is_aborted_from_c() {
    let comms = init_all(2);
    let mut cfg = nonblocking_config();
    let mut child: *mut c_void = null_mut();
    // SAFETY: a live handle, an out pointer and a config.
    let rc = unsafe { ncclCommSplit(comms[0].cast(), 0, 0, (&mut child as *mut *mut c_void).cast(), (&mut cfg as *mut ConfigPrefix).cast()) };
    assert_eq!(rc, IN_PROGRESS, "{}", last_error());
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(async_state(child), IN_PROGRESS);
    let start = std::time::Instant::now();
    // SAFETY: a live handle, not used afterwards.
    assert_eq!(unsafe { ncclCommAbort(child.cast()) }, SUCCESS, "{}", last_error());
    let (code, _) = poll_async(comms[0]);
    assert_eq!(code, SUCCESS, "{}", last_error());
    assert!(start.elapsed() < std::time::Duration::from_secs(1), "the parent was busy {:?} after the abort", start.elapsed());
    for c in comms {
        // SAFETY: live handles, destroyed once.
        assert_eq!(unsafe { ncclCommDestroy(c.cast()) }, SUCCESS, "{}", last_error());
    }
}

/// ncclCommSuspend, ncclCommResume and ncclCommMemStats from C on the host backend: an Avg
/// all_reduce leaves a scratch buffer and a cached plan (releasable bytes) and FIFOs
/// (persistent bytes); Suspend(NCCL_SUSPEND_MEM) releases the former and refuses
/// collectives naming the suspension; a second Suspend, or a Resume without one, is
/// refused; Resume allocates the scratch again and collectives work; Suspend(0) keeps the
/// memory; bad flags, stats and pointers are refused by name.
#[test]
fn suspend_releases_memory_and_resume_restores_it() {
    const AVG: i32 = 4;
    const SUSPEND_MEM: i32 = 1;
    const COUNT: usize = 4096;
    let comms = init_all(2);
    let stat = |c: *mut c_void, which: i32| -> u64 {
        let mut v = u64::MAX;
        // SAFETY: a live handle and a u64 to fill.
        assert_eq!(unsafe { ncclCommMemStats(c.cast(), which, &mut v) }, SUCCESS, "{}", last_error());
        v
    };
    // Ranks give 0 and 2: the average is 1 everywhere.
    let average = |comms: &[*mut c_void]| {
        on_threads(comms, |rank, c| {
            let send = vec![rank as f32 * 2.0; COUNT];
            let mut recv = vec![0f32; COUNT];
            // SAFETY: a live handle and buffers of COUNT floats.
            let rc = unsafe { ncclAllReduce(send.as_ptr().cast(), recv.as_mut_ptr().cast(), COUNT, FLOAT, AVG, c.cast(), null_mut()) };
            assert_eq!(rc, SUCCESS, "{}", last_error());
            assert!(recv.iter().all(|&x| x == 1.0), "{}", recv[0]);
        })
    };
    average(&comms);
    let c = comms[0];
    let releasable = stat(c, 0);
    let persistent = stat(c, 2);
    assert!(releasable >= (COUNT * 4) as u64, "releasable {releasable}: the scratch of the Avg is missing");
    assert!(persistent > 0, "no FIFO counted");
    assert_eq!((stat(c, 1), stat(c, 3)), (0, releasable + persistent));
    // SAFETY: live handles, and buffers or the NULL/garbage each call tests.
    unsafe {
        for &comm in &comms {
            assert_eq!(ncclCommSuspend(comm.cast(), SUSPEND_MEM), SUCCESS, "{}", last_error());
        }
        assert_eq!((stat(c, 0), stat(c, 1), stat(c, 2)), (0, 1, persistent));
        let mut buf = [1f32; 8];
        let p = buf.as_mut_ptr().cast::<c_void>();
        assert_eq!(ncclAllReduce(p, p, 8, FLOAT, SUM, c.cast(), null_mut()), INVALID_USAGE);
        assert!(last_error().contains("communicator rank 0 of 2 is suspended"), "{}", last_error());
        assert_eq!(ncclCommSuspend(c.cast(), SUSPEND_MEM), INVALID_USAGE);
        assert!(last_error().contains("already suspended"), "{}", last_error());
        for &comm in &comms {
            assert_eq!(ncclCommResume(comm.cast()), SUCCESS, "{}", last_error());
        }
        assert_eq!(stat(c, 1), 0);
        assert!(stat(c, 0) >= (COUNT * 4) as u64, "the scratch was not allocated again: {}", stat(c, 0));
        assert_eq!(ncclCommResume(c.cast()), INVALID_USAGE);
        assert!(last_error().contains("resume without a suspension"), "{}", last_error());
    }
    average(&comms);
    checked_all_reduce(&comms);
    // SAFETY: as above.
    unsafe {
        // Without NCCL_SUSPEND_MEM the memory stays.
        let before = stat(c, 0);
        assert_eq!(ncclCommSuspend(c.cast(), 0), SUCCESS, "{}", last_error());
        assert_eq!((stat(c, 0), stat(c, 1)), (before, 1));
        assert_eq!(ncclCommResume(c.cast()), SUCCESS, "{}", last_error());
        assert_eq!(ncclCommSuspend(c.cast(), 0x4), INVALID_ARGUMENT);
        assert!(last_error().contains("flags 0x4"), "{}", last_error());
        let mut v = 0u64;
        assert_eq!(ncclCommMemStats(c.cast(), 7, &mut v), INVALID_ARGUMENT);
        assert!(last_error().contains("stat 7"), "{}", last_error());
        assert_eq!(ncclCommMemStats(c.cast(), 0, null_mut()), INVALID_ARGUMENT);
        assert!(last_error().contains("value is NULL"), "{}", last_error());
        assert_eq!(ncclCommSuspend(null_mut(), SUSPEND_MEM), INVALID_ARGUMENT);
        assert_eq!(ncclCommResume(null_mut()), INVALID_ARGUMENT);
        for comm in comms {
            assert_eq!(ncclCommDestroy(comm.cast()), SUCCESS);
        }
    }
}
