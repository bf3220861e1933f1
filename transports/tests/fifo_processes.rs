//! Shared-memory FIFOs between two real processes: 64 MiB through the default geometry,
//! and peers killed mid-connection (the waiter must end by deadline, abort or peer exit,
//! never hang, and /dev/shm must be clean afterwards). Each child has a hard timeout.

#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{child_role, hex, segments_of, stream, unhex, ChildProcess};
use oxccl_transports::fifo::{cleanup_stale, Geometry, Receiver, Region, Sender};
use oxccl_transports::Error;

const HANDLE_VAR: &str = "OXCCL_TEST_SHM_HANDLE";
const TOTAL: usize = 64 << 20;
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);
static NEVER: AtomicBool = AtomicBool::new(false);

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// The other half of every test below, selected by role.
#[test]
fn child() {
    let Some(role) = child_role() else { return };
    match role.as_str() {
        "send-64-mib" => {
            let region = Region::open_shared(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap();
            let data = stream(TOTAL);
            let mut tx = Sender::new(region);
            let started = Instant::now();
            for chunk in data.chunks(tx.slot_bytes()) {
                tx.wait_reserve(far(), &NEVER).unwrap()[..chunk.len()].copy_from_slice(chunk);
                tx.post(chunk.len());
            }
            tx.wait_drained(far(), &NEVER).unwrap();
            println!("SECONDS {}", started.elapsed().as_secs_f64());
        }
        "send-three-then-hang" => {
            let mut tx = Sender::new(Region::open_shared(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap());
            for i in 0..3u8 {
                tx.wait_reserve(far(), &NEVER).unwrap()[0] = i;
                tx.post(1);
            }
            println!("SENT");
            std::thread::sleep(CHILD_TIMEOUT);
        }
        "create-and-hang" => {
            let (_region, handle) = Region::create_shared(2, 4096).unwrap();
            println!("HANDLE {}", hex(&handle));
            std::thread::sleep(CHILD_TIMEOUT);
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn sixty_four_mib_from_another_process() {
    let geometry = Geometry::default();
    let (region, handle) = Region::create_shared(geometry.slots, geometry.slot_bytes).unwrap();
    let name = region.segment_name().unwrap().to_string();
    let mut sender = ChildProcess::start("child", "send-64-mib", &[(HANDLE_VAR, hex(&handle))]);
    let mut rx = Receiver::new(region);
    // Touched in advance, so that page faults are not timed as FIFO throughput.
    let mut received = vec![1u8; TOTAL];
    let mut at = 0;
    while at < TOTAL {
        let slot = rx.wait_peek(far(), &NEVER).unwrap();
        received[at..at + slot.len()].copy_from_slice(slot);
        at += slot.len();
        rx.release();
    }
    let seconds: f64 = sender.read_tagged_line("SECONDS", CHILD_TIMEOUT).parse().unwrap();
    sender.wait_success(CHILD_TIMEOUT);
    assert!(received == stream(TOTAL), "64 MiB arrived corrupted");
    eprintln!("shm FIFO, {} x {} KiB slots: 64 MiB in {:.1} ms = {:.2} GB/s (copy in + copy out)", geometry.slots, geometry.slot_bytes >> 10, seconds * 1e3, TOTAL as f64 / seconds / 1e9);
    // The sender removed the name as soon as it had mapped the segment.
    assert!(!std::path::Path::new("/dev/shm").join(name).exists());
    assert!(segments_of(sender.id()).is_empty());
}

#[test]
fn a_killed_sender_ends_the_wait_by_deadline_abort_or_exit() {
    let (region, handle) = Region::create_shared(4, 4096).unwrap();
    let mut sender = ChildProcess::start("child", "send-three-then-hang", &[(HANDLE_VAR, hex(&handle))]);
    sender.read_tagged_line("SENT", CHILD_TIMEOUT);
    sender.kill();
    let mut rx = Receiver::new(region);
    // What was posted before the kill is still delivered.
    for i in 0..3u8 {
        assert_eq!(rx.wait_peek(far(), &NEVER).unwrap(), &[i]);
        rx.release();
    }
    // Unreaped, the child is a zombie that still "exists": the deadline ends the wait.
    let started = Instant::now();
    let err = rx.wait_peek(started + Duration::from_millis(300), &NEVER).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The abort flag, set from another thread, ends it too.
    let abort = Arc::new(AtomicBool::new(false));
    let setter = {
        let abort = abort.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            abort.store(true, Ordering::Release);
        })
    };
    let err = rx.wait_peek(far(), &abort).unwrap_err();
    assert!(matches!(err, Error::Aborted { .. }), "{err}");
    setter.join().unwrap();
    // Once reaped, the waiter sees the exit itself, long before its deadline.
    sender.reap();
    let started = Instant::now();
    let err = rx.wait_peek(far(), &NEVER).unwrap_err();
    assert!(matches!(err, Error::PeerExited { pid, .. } if pid == sender.id()), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The child removed the name when it opened the segment; it made none of its own.
    assert!(!std::path::Path::new("/dev/shm").join(segment_name(&handle)).exists());
    assert!(segments_of(sender.id()).is_empty());
}

#[test]
fn a_killed_receiver_ends_the_senders_wait() {
    let mut receiver = ChildProcess::start("child", "create-and-hang", &[]);
    let handle = unhex(&receiver.read_tagged_line("HANDLE", CHILD_TIMEOUT));
    let mut tx = Sender::new(Region::open_shared(&handle).unwrap());
    assert!(segments_of(receiver.id()).is_empty(), "opening removes the name");
    for _ in 0..2 {
        tx.wait_reserve(far(), &NEVER).unwrap();
        tx.post(0);
    }
    receiver.kill_and_reap();
    let started = Instant::now();
    let err = tx.wait_reserve(far(), &NEVER).unwrap_err();
    assert!(matches!(err, Error::PeerExited { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_receiver_killed_before_the_sender_came_leaves_what_cleanup_removes() {
    let mut receiver = ChildProcess::start("child", "create-and-hang", &[]);
    let handle = unhex(&receiver.read_tagged_line("HANDLE", CHILD_TIMEOUT));
    receiver.kill_and_reap();
    assert_eq!(segments_of(receiver.id()).len(), 1, "SIGKILL skips the creator's drop");
    assert!(cleanup_stale() >= 1);
    assert!(segments_of(receiver.id()).is_empty());
    assert!(Region::open_shared(&handle).is_err());
}

/// The segment name at the start of a handle.
fn segment_name(handle: &[u8]) -> String {
    let nul = handle.iter().position(|&b| b == 0).expect("a NUL after the name");
    String::from_utf8_lossy(&handle[..nul]).into_owned()
}
