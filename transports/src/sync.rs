//! The atomics of the lock-free FIFO protocol, from std or, under `cfg(loom)`, from loom.
//!
//! The FIFO code in [`crate::fifo`] takes its atomics from here so that the same code runs
//! under the loom model checker:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p oxccl-transports --release loom
//! ```
//!
//! [`SlotAccess`] lets loom see the slot bytes, which are plain memory it cannot track by
//! itself: each end records its accesses to a slot at the edges of the window in which it
//! owns it, and loom reports a race if the head/tail protocol fails to order them.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// A hint inside a spin loop: the CPU's pause, or under loom a yield so that the model
/// checker schedules the other thread.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Ownership marker of one slot; free outside loom.
#[derive(Default)]
pub(crate) struct SlotAccess {
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<()>,
}

impl SlotAccess {
    /// The sender is about to write, or has written, the slot.
    #[inline]
    pub(crate) fn writing(&self) {
        #[cfg(loom)]
        self.cell.with_mut(|_| ());
    }

    /// The receiver is about to read, or has read, the slot.
    #[inline]
    pub(crate) fn reading(&self) {
        #[cfg(loom)]
        self.cell.with(|_| ());
    }
}
