use super::*;
use std::path::Path;

/// An abort flag nobody sets.
static NEVER: AtomicBool = AtomicBool::new(false);

fn pattern(message: u64, i: usize) -> u8 {
    (message.wrapping_mul(31) as usize + i * 7) as u8
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[test]
fn heap_fifo_between_threads_with_waits() {
    let region = Region::heap(4, 64 * 1024).unwrap();
    let (mut tx, mut rx) = (Sender::new(region.clone()), Receiver::new(region));
    let messages = 1024; // up to 64 MiB in all
    let producer = std::thread::spawn(move || {
        let abort = &NEVER;
        for m in 0..messages {
            let slot = tx.wait_reserve(soon(), abort).unwrap();
            let len = (m as usize * 977) % (slot.len() + 1);
            for (i, byte) in slot[..len].iter_mut().enumerate() {
                *byte = pattern(m, i);
            }
            tx.post(len);
        }
        tx.wait_drained(soon(), abort).unwrap();
    });
    for m in 0..messages {
        let slot = rx.wait_peek(soon(), &NEVER).unwrap();
        assert_eq!(slot.len(), (m as usize * 977) % (64 * 1024 + 1), "message {m}");
        assert!(slot.iter().enumerate().all(|(i, &b)| b == pattern(m, i)), "message {m} corrupted");
        rx.release();
    }
    producer.join().unwrap();
}

#[test]
fn full_and_empty_are_reported() {
    let region = Region::heap(2, 8).unwrap();
    let (mut tx, mut rx) = (Sender::new(region.clone()), Receiver::new(region));
    assert!(rx.try_peek().is_none());
    assert_eq!(tx.free(), 2);
    for _ in 0..2 {
        tx.try_reserve().unwrap()[0] = 9;
        tx.post(1);
    }
    assert!(tx.try_reserve().is_none());
    assert!(!tx.drained());
    assert_eq!(rx.filled(), 2);
    assert_eq!(rx.try_peek().unwrap(), &[9]);
    rx.release();
    assert!(tx.try_reserve().is_some());
    assert_eq!(tx.free(), 1);
}

#[test]
fn slots_handed_out_by_address_follow_the_counters() {
    let region = Region::heap(4, 16).unwrap();
    let (mut tx, mut rx) = (Sender::new(region.clone()), Receiver::new(region));
    // Fill two free slots out of order through their addresses, as a network receive does.
    assert_eq!(tx.free(), 4);
    for i in [1usize, 0] {
        let data = tx.free_slot_ptr(i);
        // SAFETY: slot i is free and 16 bytes long; nothing else writes it until posted.
        unsafe { std::ptr::write_bytes(data, i as u8 + 1, 16) };
    }
    tx.post(16);
    tx.post(3);
    assert_eq!(rx.filled(), 2);
    let (data, len) = rx.filled_slot(1);
    assert_eq!(len, 3);
    // SAFETY: slot 1 is filled with 3 bytes and stays so until released.
    assert_eq!(unsafe { std::slice::from_raw_parts(data, len) }, &[2, 2, 2]);
    assert_eq!(rx.try_peek().unwrap(), &[1; 16]);
}

#[test]
#[should_panic(expected = "post without a free slot")]
fn posting_into_a_full_fifo_panics() {
    let region = Region::heap(2, 8).unwrap();
    let mut tx = Sender::new(region);
    for _ in 0..3 {
        tx.post(0);
    }
}

#[test]
#[should_panic(expected = "into a 8-byte slot")]
fn posting_more_than_a_slot_panics() {
    let mut tx = Sender::new(Region::heap(2, 8).unwrap());
    tx.post(9);
}

#[test]
fn waits_end_at_the_deadline() {
    let region = Region::heap(2, 8).unwrap();
    let mut rx = Receiver::new(region.clone());
    let started = Instant::now();
    let err = rx.wait_peek(started + Duration::from_millis(50), &NEVER).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let mut tx = Sender::new(region);
    tx.post(0);
    tx.post(0);
    let err = tx.wait_reserve(Instant::now() + Duration::from_millis(50), &NEVER).unwrap_err();
    assert!(err.to_string().contains("a free FIFO slot"), "{err}");
}

#[test]
fn waits_end_when_aborted_from_another_thread() {
    let region = Region::heap(2, 8).unwrap();
    let mut rx = Receiver::new(region);
    let abort = std::sync::Arc::new(AtomicBool::new(false));
    let setter = {
        let abort = abort.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            abort.store(true, Ordering::Release);
        })
    };
    let started = Instant::now();
    let err = rx.wait_peek(started + Duration::from_secs(60), &abort).unwrap_err();
    assert!(matches!(err, Error::Aborted { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    setter.join().unwrap();
}

#[test]
fn bad_geometry_and_handles_are_refused() {
    assert!(Region::heap(1, 8).is_err());
    assert!(Region::heap(MAX_SLOTS + 1, 8).is_err());
    assert!(Region::heap(2, 0).is_err());
    assert!(Region::open_shared(b"nonsense").is_err());
    assert!(Region::open_shared(b"../etc/passwd\0\x02\0\0\0\x08\0\0\0").is_err());
    assert!(Region::open_shared(b"oxccl-1-0000000000000000\0\x02\0\0\0").is_err());
}

#[test]
fn default_geometry_is_nccls() {
    let geometry = Geometry::default();
    assert_eq!((geometry.slots, geometry.slot_bytes), (8, 512 * 1024));
    assert_eq!(Geometry::from_buffer(4 << 20, 8), geometry);
    assert_eq!(geometry.region_bytes(), 4096 + (4 << 20));
}

#[test]
fn a_shared_segment_opened_in_process_loses_its_name() {
    let (region, handle) = Region::create_shared(2, 64).unwrap();
    let name = region.segment_name().unwrap().to_string();
    let path = Path::new("/dev/shm").join(&name);
    assert!(path.exists());
    let opened = Region::open_shared(&handle).unwrap();
    assert!(!path.exists(), "the opener removes the name");
    // A second sender cannot open it.
    assert!(Region::open_shared(&handle).is_err());
    let (mut tx, mut rx) = (Sender::new(opened), Receiver::new(region));
    tx.try_reserve().unwrap()[..5].copy_from_slice(b"hello");
    tx.post(5);
    assert_eq!(rx.try_peek().unwrap(), b"hello");
}

#[test]
fn unopened_segments_are_removed_on_drop() {
    let (region, _handle) = Region::create_shared(2, 64).unwrap();
    let path = Path::new("/dev/shm").join(region.segment_name().unwrap());
    assert!(path.exists());
    drop(region);
    assert!(!path.exists());
}

#[test]
fn stale_segments_of_dead_processes_are_cleaned() {
    // Above the kernel's largest pid_max (2^22), so no such process ever exists.
    let stale = Path::new("/dev/shm").join("oxccl-999999999-0000000000000000");
    std::fs::write(&stale, b"x").unwrap();
    // Segments of live processes (ours) and other files stay.
    let (live, _handle) = Region::create_shared(2, 64).unwrap();
    let live_path = Path::new("/dev/shm").join(live.segment_name().unwrap());
    assert!(cleanup_stale() >= 1);
    assert!(!stale.exists());
    assert!(live_path.exists());
}

/// A lent region's other end speaks the protocol through raw addresses and the header
/// offsets alone, as a GPU kernel does: it writes a slot, its size and the tail, or reads
/// a slot and writes the head. A thread plays that end here, against the Rust ends.
#[test]
fn lent_fifo_spoken_through_the_header_offsets() {
    let geometry = Geometry { slots: 4, slot_bytes: 100 };
    for kernel_sends in [true, false] {
        #[repr(C, align(128))]
        #[derive(Clone, Copy)]
        struct Line([u8; 128]);
        let header = vec![Line([0; 128]); HEADER_BYTES / 128].into_boxed_slice();
        let slots = vec![Line([0; 128]); (geometry.slots * geometry.stride()).div_ceil(128)].into_boxed_slice();
        let (h, s) = (header.as_ptr() as usize, slots.as_ptr() as usize);
        // SAFETY: both boxes live in the owner, which outlives the region; only the two
        // ends below touch them, through the FIFO protocol.
        let region = unsafe { Region::lent(geometry, h as *mut u8, s as *mut u8, Box::new((header, slots))) }.unwrap();
        let messages = 200u64;
        let word = move |offset: usize| (h + offset) as *const std::sync::atomic::AtomicU64;
        let other_end = std::thread::spawn(move || {
            // SAFETY: the header's counters are 8-byte aligned u64s inside the header.
            let (tail, head) = unsafe { (&*word(TAIL_OFFSET), &*word(HEAD_OFFSET)) };
            for m in 0..messages {
                let slot = (s + (m % geometry.slots as u64) as usize * geometry.stride()) as *mut u8;
                let len = (m as usize * 13) % (geometry.slot_bytes + 1);
                if kernel_sends {
                    while m + 1 > head.load(Ordering::Acquire) + geometry.slots as u64 {
                        std::hint::spin_loop();
                    }
                    // SAFETY: slot m is free (the head says so) and within the slots.
                    unsafe { (0..len).for_each(|i| *slot.add(i) = pattern(m, i)) };
                    // SAFETY: sizes are u32s at SIZES_OFFSET, one per slot.
                    unsafe { (*((h + SIZES_OFFSET) as *const AtomicU32).add((m % geometry.slots as u64) as usize)).store(len as u32, Ordering::Relaxed) };
                    tail.store(m + 1, Ordering::Release);
                } else {
                    while tail.load(Ordering::Acquire) < m + 1 {
                        std::hint::spin_loop();
                    }
                    // SAFETY: slot m is filled (the tail says so) and within the slots.
                    let bad = unsafe { (0..len).find(|&i| *slot.add(i) != pattern(m, i)).map(|i| (i, *slot.add(i), pattern(m, i))) };
                    assert!(bad.is_none(), "message {m} corrupted on the lent end: {bad:?}, len {len}, tail {}", tail.load(Ordering::Acquire));
                    head.store(m + 1, Ordering::Release);
                }
            }
        });
        // The region (and the memory it was lent) outlives the other end's last access.
        let keep = region.clone();
        if kernel_sends {
            let mut rx = Receiver::new(region);
            for m in 0..messages {
                let slot = rx.wait_peek(soon(), &NEVER).unwrap();
                assert_eq!(slot.len(), (m as usize * 13) % (geometry.slot_bytes + 1));
                assert!(slot.iter().enumerate().all(|(i, &b)| b == pattern(m, i)), "message {m}");
                rx.release();
            }
        } else {
            let mut tx = Sender::new(region);
            for m in 0..messages {
                let slot = tx.wait_reserve(soon(), &NEVER).unwrap();
                let len = (m as usize * 13) % (geometry.slot_bytes + 1);
                slot[..len].iter_mut().enumerate().for_each(|(i, b)| *b = pattern(m, i));
                tx.post(len);
            }
        }
        other_end.join().unwrap();
        drop(keep);
    }
    let unaligned = vec![0u8; 8192];
    // SAFETY: refused before any use.
    let e = unsafe { Region::lent(Geometry { slots: 2, slot_bytes: 64 }, unaligned.as_ptr().wrapping_add(1).cast_mut(), unaligned.as_ptr().cast_mut(), Box::new(())) };
    assert!(e.err().unwrap().to_string().contains("128-byte"));
}

/// A reader sleeping on a shared FIFO's doorbell wakes when the sender posts; senders
/// ring only while the reader is armed, and a FIFO without a doorbell has none.
#[test]
fn a_post_wakes_the_reader_asleep_on_the_doorbell() {
    let (region, handle) = Region::create_shared(4, 4096).unwrap();
    assert!(region.doorbell().is_none(), "a FIFO has no doorbell unless its receiver gives it one");
    region.enable_doorbell();
    let mut tx = Sender::new(Region::open_shared(&handle).unwrap());
    let mut rx = Receiver::new(region.clone());
    let bell = region.doorbell().unwrap();
    // Awake: posts do not ring.
    tx.wait_reserve(soon(), &NEVER).unwrap();
    tx.post(8);
    assert_eq!(bell.word().load(Ordering::SeqCst), 0);
    rx.wait_peek(soon(), &NEVER).unwrap();
    rx.release();
    // Armed and asleep: the next post rings. A sleep that was not woken lasts 20 s.
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            tx.wait_reserve(soon(), &NEVER).unwrap();
            tx.post(8);
        });
        let seen = bell.arm();
        while rx.try_peek().is_none() {
            crate::futex::wait(bell.word(), seen, Duration::from_secs(20), true);
        }
        bell.disarm();
    });
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    assert_eq!(bell.word().load(Ordering::SeqCst), 1, "one post while armed, one ring");
}

/// A segment made with tail bytes maps them at both ends (one memory: what one end writes
/// there the other reads), the handle carries their size, and the whole mapping is what
/// [`Region::segment_memory`] gives; other FIFOs have no tail and no segment memory.
#[test]
fn tail_bytes_after_the_slots_are_shared_with_the_opener() {
    let geometry = Geometry { slots: 4, slot_bytes: 1000 };
    let (region, handle) = Region::create_shared_with_tail(geometry, 3 * 4096).unwrap();
    let opened = Region::open_shared(&handle).unwrap();
    for end in [&region, &opened] {
        let (tail, len) = end.tail_memory();
        assert_eq!(len, 3 * 4096);
        let (slots, slots_len) = end.slots_memory();
        assert_eq!(tail as usize, slots as usize + slots_len, "the tail follows the slots");
        let (start, whole) = end.segment_memory().unwrap();
        assert_eq!((tail as usize + len - start as usize, whole), (geometry.region_bytes() + 3 * 4096, geometry.region_bytes() + 3 * 4096));
    }
    // SAFETY: both point at the last byte of the tail, within each end's mapping.
    unsafe {
        *region.tail_memory().0.add(3 * 4096 - 1) = 0xa5;
        assert_eq!(*opened.tail_memory().0.add(3 * 4096 - 1), 0xa5);
    }
    let plain = Region::heap(2, 64).unwrap();
    assert_eq!((plain.tail_memory().1, plain.segment_memory()), (0, None));
    assert!(Region::create_shared_with_tail(geometry, usize::MAX).is_err(), "a tail beyond the handle's u32");
}

/// Notes go from sender to receiver in order, at most [`NOTES`] untaken (the next is
/// refused, nothing lost); a note rings the doorbell of a receiver asleep on it.
#[test]
fn notes_arrive_in_order_and_wake_a_sleeping_receiver() {
    let (region, handle) = Region::create_shared(2, 64).unwrap();
    let sender_side = Region::open_shared(&handle).unwrap();
    assert_eq!(region.take_note(), None);
    for round in 0..3u64 {
        for i in 0..NOTES as u64 {
            assert!(sender_side.note(round << 32 | i), "note {i} of round {round}");
        }
        assert!(!sender_side.note(u64::MAX), "a note beyond the ring's room");
        let taken: Vec<u64> = std::iter::from_fn(|| region.take_note()).collect();
        assert_eq!(taken, (0..NOTES as u64).map(|i| round << 32 | i).collect::<Vec<_>>());
    }
    region.enable_doorbell();
    let bell = region.doorbell().unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            assert!(sender_side.note(7));
        });
        let seen = bell.arm();
        let note = loop {
            if let Some(note) = region.take_note() {
                break note;
            }
            crate::futex::wait(bell.word(), seen, Duration::from_secs(20), true);
        };
        bell.disarm();
        assert_eq!(note, 7);
    });
    assert!(start.elapsed() < Duration::from_secs(10), "the note did not wake the receiver: {:?}", start.elapsed());
}
