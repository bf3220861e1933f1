//! The head/tail protocol under the loom model checker, on heap FIFOs with the same code as
//! shared ones. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p oxccl-transports --release loom
//! ```
//!
//! Loom explores every interleaving (and every allowed weak-memory outcome of the atomics)
//! up to its preemption bound; the slot accesses recorded through `sync::SlotAccess` make
//! it report a race if a slot could be written while the other end still reads it.

use super::*;
use loom::thread;

/// Sends `messages` one-byte messages (byte and size both encode the index) through a FIFO
/// of `slots` slots, and checks order, contents and sizes on the other side.
fn send_and_receive(slots: usize, messages: u8) {
    let region = Region::heap(slots, 4).unwrap();
    let (mut tx, mut rx) = (Sender::new(region.clone()), Receiver::new(region));
    let producer = thread::spawn(move || {
        for m in 0..messages {
            let slot = loop {
                if tx.has_free_slot() {
                    break tx.reserved_slot();
                }
                thread::yield_now();
            };
            slot[0] = m;
            tx.post(1 + m as usize % 4);
        }
    });
    for m in 0..messages {
        loop {
            if let Some(slot) = rx.try_peek() {
                assert_eq!(slot.len(), 1 + m as usize % 4, "size of message {m}");
                assert_eq!(slot[0], m, "message {m}");
                break;
            }
            thread::yield_now();
        }
        rx.release();
    }
    producer.join().unwrap();
}

fn model(test: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Bounding preemptions keeps the search finite with spinning threads; protocol bugs of
    // a two-party FIFO show within a few preemptions.
    builder.preemption_bound = Some(3);
    builder.check(test);
}

#[test]
fn loom_messages_arrive_in_order_through_two_slots() {
    // Three messages through two slots: the sender must wrap onto a slot the receiver frees.
    model(|| send_and_receive(2, 3));
}

#[test]
fn loom_a_slot_is_reused_only_after_release() {
    model(|| send_and_receive(2, 4));
}

#[test]
fn loom_counts_seen_by_the_proxy_stay_consistent() {
    // The proxy engine's view: `free` and `filled` from both ends never exceed the slots.
    model(|| {
        let region = Region::heap(2, 4).unwrap();
        let (mut tx, mut rx) = (Sender::new(region.clone()), Receiver::new(region));
        let producer = thread::spawn(move || {
            for _ in 0..2 {
                while tx.free() == 0 {
                    thread::yield_now();
                }
                tx.post(0);
            }
        });
        let mut received = 0;
        while received < 2 {
            let filled = rx.filled();
            assert!(filled <= 2);
            if filled > 0 {
                rx.release();
                received += 1;
            } else {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
    });
}
