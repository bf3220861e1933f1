//! The C ABI on GPUs, called as C would call it: non-blocking creation of GPU
//! communicators (the creation and the GPU's connection run on a thread of the handle's),
//! an all_reduce on ncclMemAlloc memory, and ncclCommAbort of a GPU creation still waiting
//! for its peer. Run on the GPU machine (scripts/gpu-build.sh puts it in gpu-bin/);
//! without a GPU every test says "skipped" and passes, unless OXCCL_TEST_GPU=1.

mod common;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use common::{async_state, last_error, nonblocking_config, poll_async, ConfigPrefix, FLOAT, IN_PROGRESS, SUCCESS, SUM};
use nccl::*;
use oxccl_runtime::gpu;

fn gpus() -> Option<usize> {
    let n = oxccl_testkit::gpus_or_skip(gpu::device_count())?;
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    Some(n)
}

fn unique_id() -> NcclUniqueId {
    let mut id = NcclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, SUCCESS, "{}", last_error());
    id
}

/// Starts a non-blocking ncclCommInitRankConfig on the calling thread's current GPU.
fn init_nonblocking(id: &NcclUniqueId, rank: i32, nranks: i32) -> *mut c_void {
    let mut comm: *mut c_void = null_mut();
    let mut cfg = nonblocking_config();
    // SAFETY: valid out pointer and config.
    let rc = unsafe { ncclCommInitRankConfig((&mut comm as *mut *mut c_void).cast(), nranks, NcclUniqueId { internal: id.internal }, rank, (&mut cfg as *mut ConfigPrefix).cast()) };
    assert_eq!(rc, IN_PROGRESS, "rank {rank}: {}", last_error());
    assert!(!comm.is_null());
    comm
}

/// Two ranks as threads, one GPU each (one rank where there is one GPU: threads sharing a
/// context would share its NULL stream, where one rank's kernel would wait behind the
/// other's, which waits for it), created non-blocking: each polls until its communicator
/// is ready, then all-reduces on ncclMemAlloc memory with the NULL stream and checks the
/// result.
#[test]
fn nonblocking_gpu_communicators_all_reduce() {
    let Some(n) = gpus() else { return };
    let id = unique_id();
    let count = 4096 + 3;
    let nranks = n.min(2);
    // Every rank allocates before any launches (an allocation waits for the GPU's kernels).
    let allocated = std::sync::Arc::new(std::sync::Barrier::new(nranks));
    let ranks: Vec<_> = (0..nranks)
        .map(|rank| {
            let id = NcclUniqueId { internal: id.internal };
            let allocated = allocated.clone();
            std::thread::spawn(move || {
                gpu::set_current_device(rank).unwrap();
                let comm = init_nonblocking(&id, rank as i32, nranks as i32);
                let (state, polls) = poll_async(comm);
                assert_eq!(state, SUCCESS, "rank {rank}: {}", last_error());
                let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
                let input: Vec<u8> = (0..count).flat_map(|i| ((rank + 1) as f32 * (i % 7) as f32).to_le_bytes()).collect();
                let mut output = vec![0u8; input.len()];
                // SAFETY: out pointers; buffers of `count` floats on this thread's GPU, used
                // only by this thread, freed at the end.
                unsafe {
                    assert_eq!(ncclMemAlloc(&mut send, input.len()), SUCCESS, "{}", last_error());
                    assert_eq!(ncclMemAlloc(&mut recv, input.len()), SUCCESS, "{}", last_error());
                    gpu::copy_to_device(send as u64, &input).unwrap();
                    allocated.wait();
                    assert_eq!(ncclAllReduce(send, recv, count, FLOAT, SUM, comm.cast(), null_mut()), SUCCESS, "{}", last_error());
                    // On the legacy default stream: after the all_reduce.
                    gpu::copy_from_device(recv as u64, &mut output).unwrap();
                    assert_eq!(ncclMemFree(send), SUCCESS);
                    assert_eq!(ncclMemFree(recv), SUCCESS);
                    assert_eq!(ncclCommDestroy(comm.cast()), SUCCESS, "{}", last_error());
                }
                // Σ over ranks of (rank + 1) · (i % 7).
                let factor = (nranks * (nranks + 1) / 2) as f32;
                let wrong = output.chunks_exact(4).enumerate().filter(|(i, b)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) != factor * (i % 7) as f32).count();
                assert_eq!(wrong, 0, "rank {rank}: {wrong} wrong elements of {count}");
                polls
            })
        })
        .collect();
    let polls: Vec<usize> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!("ready after {polls:?} polls");
}

/// ncclCommAbort on a GPU communicator whose creation waits for a peer that never came
/// returns at once and gives the creation up: the peer coming later fails at once, told
/// that rank 0 gave up.
#[test]
fn abort_ends_a_gpu_creation_waiting_for_its_peer() {
    let Some(n) = gpus() else { return };
    let id = unique_id();
    gpu::set_current_device(0).unwrap();
    let comm = init_nonblocking(&id, 0, 2);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(async_state(comm), IN_PROGRESS, "rank 1 never came");
    let start = Instant::now();
    // SAFETY: a live handle, not used afterwards.
    assert_eq!(unsafe { ncclCommAbort(comm.cast()) }, SUCCESS, "{}", last_error());
    let took = start.elapsed();
    assert!(took < Duration::from_millis(500), "abort took {took:?}");
    let late = std::thread::spawn(move || {
        gpu::set_current_device(1 % n).unwrap();
        let mut comm: *mut c_void = null_mut();
        // SAFETY: a valid out pointer.
        let rc = unsafe { ncclCommInitRank((&mut comm as *mut *mut c_void).cast(), 2, NcclUniqueId { internal: id.internal }, 1) };
        (rc, last_error(), start.elapsed())
    });
    let (rc, message, late_took) = late.join().unwrap();
    assert_ne!(rc, SUCCESS);
    assert!(message.contains("rank 0 gave up joining"), "{message}");
    assert!(late_took < Duration::from_secs(5), "the late rank failed after {late_took:?}");
    eprintln!("abort in {:.2} ms; the late rank failed after {:.1} ms", took.as_secs_f64() * 1e3, late_took.as_secs_f64() * 1e3);
}
