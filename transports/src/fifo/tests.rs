use super::*;
use std::time::{Duration, Instant};

fn pattern(message: u64, i: usize) -> u8 {
    (message.wrapping_mul(31) as usize + i * 7) as u8
}

/// Sends `messages` messages of varying length through `tx`.
fn produce(mut tx: Sender, messages: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for m in 0..messages {
        let len = (m as usize * 977) % (tx.slot_bytes() + 1);
        loop {
            if let Some(slot) = tx.try_reserve() {
                for (i, b) in slot[..len].iter_mut().enumerate() {
                    *b = pattern(m, i);
                }
                tx.post(len);
                break;
            }
            assert!(Instant::now() < deadline, "sender stuck");
            std::hint::spin_loop();
        }
    }
}

fn consume(mut rx: Receiver, messages: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for m in 0..messages {
        let len = (m as usize * 977) % (rx.slot_bytes() + 1);
        loop {
            if let Some(slot) = rx.try_peek() {
                assert_eq!(slot.len(), len, "message {m}");
                assert!(slot.iter().enumerate().all(|(i, &b)| b == pattern(m, i)), "message {m} corrupted");
                rx.release();
                break;
            }
            assert!(Instant::now() < deadline, "receiver stuck");
            std::hint::spin_loop();
        }
    }
}

#[test]
fn heap_fifo_between_threads() {
    let region = Region::heap(4, 64 * 1024).unwrap();
    let tx = Sender::new(region.clone());
    let rx = Receiver::new(region);
    // 64 MiB in all.
    let messages = 1024;
    let producer = std::thread::spawn(move || produce(tx, messages));
    consume(rx, messages);
    producer.join().unwrap();
}

#[test]
fn full_and_empty_are_reported() {
    let region = Region::heap(2, 8).unwrap();
    let (mut tx, mut rx) = (Sender::new(region.clone()), Receiver::new(region));
    assert!(rx.try_peek().is_none());
    for _ in 0..2 {
        tx.try_reserve().unwrap();
        tx.post(8);
    }
    assert!(tx.try_reserve().is_none());
    assert!(!tx.drained());
    rx.try_peek().unwrap();
    rx.release();
    assert!(tx.try_reserve().is_some());
}

#[test]
fn bad_geometry_and_handles_are_refused() {
    assert!(Region::heap(1, 8).is_err());
    assert!(Region::heap(MAX_SLOTS + 1, 8).is_err());
    assert!(Region::open_shared(b"nonsense").is_err());
    assert!(Region::open_shared(b"../etc/passwd\0\x02\0\0\0\x08\0\0\0").is_err());
}

const CHILD_ENV: &str = "OXCCL_FIFO_TEST_HANDLE";

/// The sending half of `shared_fifo_between_processes`, run in a child process.
#[test]
fn child_sender() {
    let Ok(hex) = std::env::var(CHILD_ENV) else { return };
    let handle: Vec<u8> = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    let region = Region::open_shared(&handle).unwrap();
    produce(Sender::new(region), 1024);
}

#[test]
fn shared_fifo_between_processes() {
    let (region, handle) = Region::create_shared(8, 64 * 1024).unwrap();
    let name = String::from_utf8_lossy(&handle[..handle.iter().position(|&b| b == 0).unwrap()]).into_owned();
    let hex: String = handle.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fifo::tests::child_sender", "--nocapture"])
        .env(CHILD_ENV, hex)
        .spawn()
        .unwrap();
    consume(Receiver::new(region.clone()), 1024);
    assert!(child.wait().unwrap().success());
    // The sender removed the name as soon as it had mapped the segment.
    assert!(!std::path::Path::new(SHM_DIR).join(&name).exists());
    drop(region);
}

#[test]
fn unopened_segments_are_removed_on_drop() {
    let (region, handle) = Region::create_shared(2, 64).unwrap();
    let name = String::from_utf8_lossy(&handle[..handle.iter().position(|&b| b == 0).unwrap()]).into_owned();
    assert!(std::path::Path::new(SHM_DIR).join(&name).exists());
    drop(region);
    assert!(!std::path::Path::new(SHM_DIR).join(&name).exists());
}

#[test]
fn stale_segments_of_dead_processes_are_cleaned() {
    // A pid far above pid_max's default never runs.
    let path = std::path::Path::new(SHM_DIR).join(format!("{SHM_PREFIX}999999999-0000000000000000"));
    std::fs::write(&path, b"x").unwrap();
    assert!(cleanup_stale() >= 1);
    assert!(!path.exists());
}
