//! The LL protocol at the proxy's end of a network FIFO whose other end is a GPU kernel
//! (`oxccl_kernels::device::ll`): which messages of a link run LL (from the announcements
//! of the operations), where their slots are, and when a slot the kernel is writing holds
//! the whole message. The kernel writes LL lines without a fence, so its tail may show
//! before its lines do: the sending link sends a slot only once the header line and every
//! data line carry the message's flag.

use std::collections::VecDeque;

use oxccl_kernels::device::{ll, LL_LINE_BYTES};

/// A FIFO's LL slots: one per Simple slot, `slot_bytes` each from host address `base`,
/// right after the Simple slots in the FIFO's memory (one registration covers both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LlSlots {
    pub base: usize,
    pub slot_bytes: usize,
}

impl LlSlots {
    /// The slot of message `message` of a FIFO of `slots` slots.
    pub fn slot(&self, message: u64, slots: usize) -> *mut u8 {
        (self.base + (message % slots as u64) as usize * self.slot_bytes) as *mut u8
    }
}

/// A link's LL side: its FIFO's LL slots, and which of its messages use them. A link
/// without one (a host executor's FIFO, a PXN relay) runs every message Simple.
#[derive(Debug)]
pub(crate) struct LlLink {
    pub slots: LlSlots,
    protocols: Protocols,
}

impl LlLink {
    pub fn new(slots: LlSlots) -> LlLink {
        LlLink { slots, protocols: Protocols::default() }
    }
}

/// Records an operation's announcement of `messages` on a link with `link` as its LL
/// side: an error for LL messages on a link that has none.
pub(crate) fn announce(link: &mut Option<LlLink>, messages: u64, ll: bool) -> Result<(), String> {
    match link {
        Some(link) => link.protocols.announce(messages, ll),
        None if ll => return Err(format!("{messages} message(s) announced as LL on a FIFO without LL slots")),
        None => {}
    }
    Ok(())
}

/// Where message `message` of a FIFO of `slots` slots goes: `Some(Some((address, bytes)))`,
/// its LL slot; `Some(None)`, its Simple slot; `None` while no announcement reached it.
pub(crate) fn slot_of(link: &mut Option<LlLink>, message: u64, slots: usize) -> Option<Option<(*mut u8, usize)>> {
    match link {
        None => Some(None),
        Some(link) => link.protocols.is_ll(message).map(|ll| ll.then(|| (link.slots.slot(message, slots), link.slots.slot_bytes))),
    }
}

/// Which of a link's messages run LL: the operations' announcements, in order.
#[derive(Debug, Default)]
struct Protocols {
    /// (end, LL): messages before `end` (counted over the link's life) and after the
    /// previous range's end run LL or Simple.
    ranges: VecDeque<(u64, bool)>,
    announced: u64,
}

impl Protocols {
    /// An operation announced `messages` more, over LL or Simple.
    pub fn announce(&mut self, messages: u64, ll: bool) {
        if messages == 0 {
            return;
        }
        self.announced += messages;
        match self.ranges.back_mut() {
            Some((end, was)) if *was == ll => *end = self.announced,
            _ => self.ranges.push_back((self.announced, ll)),
        }
    }

    /// Whether message `message` runs LL; `None` if no announcement reached it yet. Asked
    /// in increasing order of messages (ranges before it are forgotten).
    pub fn is_ll(&mut self, message: u64) -> Option<bool> {
        while self.ranges.front().is_some_and(|&(end, _)| end <= message) {
            self.ranges.pop_front();
        }
        self.ranges.front().map(|&(_, ll)| ll)
    }
}

/// How far a check of a slot got: the lines (header included) seen complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    message: u64,
    lines: usize,
}

/// Whether the LL slot at `slot` (`slot_bytes`) holds message `message` whole: `Ok(Some(n))`
/// with the `n` bytes to send (header line included), `Ok(None)` while some line lacks the
/// flag (`scan` remembers the lines already seen, for the next look), an error if the
/// header names more than the slot holds.
///
/// # Safety
/// `slot` must be readable for `slot_bytes` bytes, and written meanwhile only by whole
/// 8-byte stores (the kernel's 16-byte LL stores).
pub(crate) unsafe fn ready(slot: *const u8, slot_bytes: usize, message: u64, scan: &mut Scan) -> Result<Option<usize>, String> {
    if scan.message != message {
        *scan = Scan { message, lines: 0 };
    }
    let flag = ll::flag(message);
    // SAFETY: line i lies within the slot (checked by the callers below), 8-aligned.
    let word = |i: usize, half: usize| unsafe { std::ptr::read_volatile(slot.add(i * LL_LINE_BYTES + half * 8).cast::<u64>()) };
    let flagged = |i: usize| (word(i, 0) >> 32) as u32 == flag && (word(i, 1) >> 32) as u32 == flag;
    if !flagged(0) {
        return Ok(None);
    }
    let bytes = (word(0, 0) & 0xffff_ffff) as usize;
    let total = ll::message_bytes(bytes);
    if total > slot_bytes {
        return Err(format!("an LL message of {bytes} bytes ({total} on the wire) in a slot of {slot_bytes}"));
    }
    let lines = total / LL_LINE_BYTES;
    scan.lines = scan.lines.max(1);
    while scan.lines < lines {
        if !flagged(scan.lines) {
            return Ok(None);
        }
        scan.lines += 1;
    }
    Ok(Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`ready`] on a slot of `slot_bytes` in `slot`.
    fn check(slot: &[u64], slot_bytes: usize, message: u64, scan: &mut Scan) -> Result<Option<usize>, String> {
        assert!(slot.len() * 8 >= slot_bytes);
        // SAFETY: the slot is `slot`, readable for slot_bytes (checked above), and nothing
        // writes it meanwhile.
        unsafe { ready(slot.as_ptr().cast(), slot_bytes, message, scan) }
    }

    /// Writes line `i` of an LL slot as the kernel does: data and the flag twice.
    fn put(slot: &mut [u64], i: usize, data: [u32; 2], flag: u32) {
        slot[2 * i] = data[0] as u64 | (flag as u64) << 32;
        slot[2 * i + 1] = data[1] as u64 | (flag as u64) << 32;
    }

    #[test]
    fn a_slot_is_ready_only_when_its_header_and_every_line_show_the_flag() {
        let mut slot = vec![0u64; 2 * 64];
        let bytes = 37; // 5 lines of data, the last partial
        let message = 9;
        let flag = ll::flag(message);
        let mut scan = Scan::default();
        // Lines arrive out of order; the header first, then all but line 3.
        put(&mut slot, 0, [bytes, 0], flag);
        for i in [5, 1, 2, 4] {
            put(&mut slot, i, [i as u32, 0], flag);
        }
        assert_eq!(check(&slot, 1024, message, &mut scan), Ok(None));
        assert_eq!(scan.lines, 3, "lines 0-2 seen");
        // A half with a stale flag is not enough.
        slot[2 * 3] = 3 | (flag as u64) << 32;
        slot[2 * 3 + 1] = (ll::flag(message - 8) as u64) << 32;
        assert_eq!(check(&slot, 1024, message, &mut scan), Ok(None));
        put(&mut slot, 3, [3, 0], flag);
        assert_eq!(check(&slot, 1024, message, &mut scan), Ok(Some(6 * LL_LINE_BYTES)));
        // The same memory is not message 17's (its flag differs), nor message 1's.
        let mut fresh = Scan::default();
        assert_eq!(check(&slot, 1024, 17, &mut fresh), Ok(None));
        assert_eq!(check(&slot, 1024, 1, &mut fresh), Ok(None));
        // A header naming more than the slot holds is an error.
        put(&mut slot, 0, [4096, 0], flag);
        let e = check(&slot, 1024, message, &mut Scan::default()).unwrap_err();
        assert!(e.contains("4096 bytes") && e.contains("slot of 1024"), "{e}");
    }

    #[test]
    fn an_empty_message_is_its_header() {
        let mut slot = vec![0u64; 8];
        put(&mut slot, 0, [0, 0], ll::flag(0));
        assert_eq!(check(&slot, 64, 0, &mut Scan::default()), Ok(Some(LL_LINE_BYTES)));
    }

    #[test]
    fn a_link_without_ll_slots_runs_simple_and_refuses_ll_announcements() {
        let mut none: Option<LlLink> = None;
        assert_eq!(announce(&mut none, 3, false), Ok(()));
        assert_eq!(slot_of(&mut none, 5, 8), Some(None));
        let e = announce(&mut none, 2, true).unwrap_err();
        assert!(e.contains("without LL slots"), "{e}");
        let mut some = Some(LlLink::new(LlSlots { base: 4096, slot_bytes: 1024 }));
        assert_eq!(slot_of(&mut some, 0, 8), None, "nothing announced yet");
        announce(&mut some, 1, false).unwrap();
        announce(&mut some, 1, true).unwrap();
        // Asked in increasing order of messages, as the links do.
        assert_eq!(slot_of(&mut some, 0, 8), Some(None));
        assert_eq!(slot_of(&mut some, 1, 8), Some(Some(((4096 + 1024) as *mut u8, 1024))));
        assert_eq!(slot_of(&mut some, 9, 8), None, "message 9 was not announced");
    }

    #[test]
    fn protocols_follow_the_announcements_in_order() {
        let mut p = Protocols::default();
        assert_eq!(p.is_ll(0), None);
        p.announce(2, true);
        p.announce(1, true);
        p.announce(0, false);
        p.announce(2, false);
        assert_eq!((p.is_ll(0), p.is_ll(2), p.is_ll(3), p.is_ll(4), p.is_ll(5)), (Some(true), Some(true), Some(false), Some(false), None));
        p.announce(1, true);
        assert_eq!(p.is_ll(5), Some(true));
    }
}
