//! [`AbortFlag`]: how one thread makes the waits of others end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A flag that one thread raises to end the waits of others, promptly and for good.
///
/// A cheap handle: clones share one flag, so the thread that may abort keeps a clone and
/// hands another to the operation (a bootstrap's join, split or agreement, a communicator's
/// creation, a background thread's loop). Once raised it stays raised. Waits look at it at
/// least every 100 ms, and whoever raises it may also wake them sooner (as
/// `Bootstrap::abort` does).
///
/// ```
/// use oxccl_bootstrap::AbortFlag;
///
/// let abort = AbortFlag::new();
/// let watcher = abort.clone();
/// assert!(!watcher.is_raised());
/// abort.raise();
/// assert!(watcher.is_raised());
/// ```
#[derive(Clone, Debug, Default)]
pub struct AbortFlag(Arc<AtomicBool>);

impl AbortFlag {
    /// A flag not raised, shared with nobody yet.
    pub fn new() -> AbortFlag {
        AbortFlag::default()
    }

    /// Raises the flag: every holder of a clone sees it raised from now on. What a thread
    /// wrote before raising it is visible to the threads that see it raised.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the flag was raised, by this handle or a clone.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Whether `self` and `other` are clones of one flag (not merely both raised or not).
    pub fn ptr_eq(&self, other: &AbortFlag) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Whether any of `flags` is raised: the waits inside the bootstrap take the flags that
/// end them as a list, so that a split's exchange ends on the parent's flag and on the
/// split's own, and a send that nothing may abort passes none.
pub(crate) fn any_raised(flags: &[&AbortFlag]) -> bool {
    flags.iter().any(|flag| flag.is_raised())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_flag_and_new_ones_do_not() {
        let (a, b) = (AbortFlag::new(), AbortFlag::new());
        let a2 = a.clone();
        assert!(a.ptr_eq(&a2) && !a.ptr_eq(&b));
        a2.raise();
        assert!(a.is_raised() && !b.is_raised());
        // Raised for good.
        a.raise();
        assert!(a2.is_raised());
    }

    #[test]
    fn a_raise_on_another_thread_is_seen() {
        let flag = AbortFlag::new();
        let raiser = flag.clone();
        std::thread::spawn(move || raiser.raise()).join().unwrap();
        assert!(flag.is_raised());
    }
}
