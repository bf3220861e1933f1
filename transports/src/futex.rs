//! Sleeping on 32-bit words until another thread, maybe of another process, changes them:
//! Linux futexes. A word in process memory is waited on privately; a word in a mapping
//! shared with other processes (a FIFO's doorbell in /dev/shm) must be waited on and woken
//! shared, so that the kernel keys it by the mapping and not by this process's address.
//! [`wait_any`] sleeps on several words at once (`futex_waitv`, Linux 5.16 and later:
//! [`wait_any_supported`] says whether this kernel has it).
//!
//! Every wait returns early on a signal or a spurious wake-up, and at its timeout: callers
//! look at their state again, whatever woke them.

use std::sync::atomic::AtomicU32;
use std::sync::LazyLock;
use std::time::Duration;

/// `FUTEX_WAITV_MAX`: the most words one [`wait_any`] takes.
pub const WAIT_ANY_MAX: usize = 128;

/// One word of a [`wait_any`]: sleep while it holds `expected`; `shared` for a word in
/// memory other processes map.
#[derive(Clone, Copy, Debug)]
pub struct Waiter<'a> {
    pub word: &'a AtomicU32,
    pub expected: u32,
    pub shared: bool,
}

fn op(base: i32, shared: bool) -> i32 {
    if shared {
        base
    } else {
        base | libc::FUTEX_PRIVATE_FLAG
    }
}

/// Wakes every thread sleeping on `word`.
pub fn wake(word: &AtomicU32, shared: bool) {
    // SAFETY: FUTEX_WAKE reads nothing through the pointer but uses it as the key of the
    // sleepers' queue; `word` is a live, aligned u32.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op(libc::FUTEX_WAKE, shared), i32::MAX, std::ptr::null::<libc::timespec>(), 0usize, 0u32);
    }
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec { tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long }
}

/// Sleeps while `word` holds `expected`, at most `timeout`.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration, shared: bool) {
    let timeout = timespec(timeout);
    // SAFETY: FUTEX_WAIT reads the u32 at the pointer (live and aligned: `word`) and the
    // timespec (on this stack); it writes nothing.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op(libc::FUTEX_WAIT, shared), expected, &timeout as *const libc::timespec, 0usize, 0u32);
    }
}

/// The kernel's `struct futex_waitv`.
#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`.
const FUTEX2_SIZE_U32: u32 = 0x02;
/// `FUTEX2_PRIVATE`.
const FUTEX2_PRIVATE: u32 = 128;

/// Whether this kernel lets this process call `futex_waitv`: an empty call answers EINVAL
/// where it does, ENOSYS where the kernel lacks it (before Linux 5.16) and EPERM where a
/// seccomp filter (a container's) refuses it.
pub fn wait_any_supported() -> bool {
    static SUPPORTED: LazyLock<bool> = LazyLock::new(|| {
        // SAFETY: no waiters (a null list of length 0) and no timeout: the kernel reads
        // nothing.
        let rc = unsafe { libc::syscall(libc::SYS_futex_waitv, std::ptr::null::<FutexWaitv>(), 0u32, 0u32, std::ptr::null::<libc::timespec>(), libc::CLOCK_MONOTONIC) };
        rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
    });
    *SUPPORTED
}

/// Sleeps while every word of `waiters` holds its expected value, at most `timeout`: until
/// one of them changes and is woken. One word is a plain [`wait`]; without `futex_waitv`
/// ([`wait_any_supported`]), or with more than [`WAIT_ANY_MAX`] words, it sleeps on the
/// first word alone.
pub fn wait_any(waiters: &[Waiter<'_>], timeout: Duration) {
    let Some(first) = waiters.first() else { return };
    if waiters.len() == 1 || !wait_any_supported() || waiters.len() > WAIT_ANY_MAX {
        wait(first.word, first.expected, timeout, first.shared);
        return;
    }
    let list: Vec<FutexWaitv> = waiters
        .iter()
        .map(|w| FutexWaitv { val: w.expected as u64, uaddr: w.word.as_ptr() as u64, flags: FUTEX2_SIZE_U32 | if w.shared { 0 } else { FUTEX2_PRIVATE }, reserved: 0 })
        .collect();
    // futex_waitv's timeout is absolute, on the clock named.
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let until = timespec(Duration::new(now.tv_sec as u64, now.tv_nsec as u32).saturating_add(timeout));
    // SAFETY: `list` holds `list.len()` (<= 128) waiters whose addresses are live, aligned
    // u32s (the borrowed words); the kernel reads them and the timespec, writes nothing.
    unsafe {
        libc::syscall(libc::SYS_futex_waitv, list.as_ptr(), list.len() as u32, 0u32, &until as *const libc::timespec, libc::CLOCK_MONOTONIC);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    /// A word that holds another value returns at once; one that holds the expected value
    /// sleeps to the timeout.
    #[test]
    fn waits_only_while_the_word_holds_the_value() {
        let word = AtomicU32::new(5);
        let start = Instant::now();
        wait(&word, 4, Duration::from_secs(5), false);
        wait_any(&[Waiter { word: &word, expected: 4, shared: false }], Duration::from_secs(5));
        assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
        let start = Instant::now();
        wait(&word, 5, Duration::from_millis(50), false);
        assert!(start.elapsed() >= Duration::from_millis(45), "{:?}", start.elapsed());
        let start = Instant::now();
        wait_any(&[Waiter { word: &word, expected: 5, shared: false }, Waiter { word: &word, expected: 5, shared: true }], Duration::from_millis(50));
        assert!(start.elapsed() >= Duration::from_millis(45), "wait_any returned after {:?}: {}", start.elapsed(), std::io::Error::last_os_error());
    }

    /// A thread asleep on two words (one private, one in a shared mapping) wakes when the
    /// second changes and is woken; a wake-up of a word nobody waits on is harmless.
    #[test]
    fn wait_any_wakes_on_any_of_its_words() {
        if !wait_any_supported() {
            eprintln!("futex_waitv is unavailable here (Linux before 5.16, or a seccomp filter): skipped");
            return;
        }
        // A shared anonymous mapping: the kernel keys its futexes by the mapping.
        // SAFETY: a fresh anonymous mapping of one page, unmapped below.
        let page = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(page, libc::MAP_FAILED);
        // SAFETY: the page is zeroed, aligned and lives until the munmap at the end, after
        // both threads are done with it.
        let shared: &AtomicU32 = unsafe { &*(page as *const AtomicU32) };
        let local = Arc::new(AtomicU32::new(0));
        wake(shared, true);
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                shared.fetch_add(1, Ordering::SeqCst);
                wake(shared, true);
            });
            // Woken (a wait that was not would last its 10 s), or back early: look again.
            while shared.load(Ordering::SeqCst) == 0 {
                wait_any(&[Waiter { word: &local, expected: 0, shared: false }, Waiter { word: shared, expected: 0, shared: true }], Duration::from_secs(10));
            }
        });
        let waited = start.elapsed();
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // SAFETY: mapped above, no reference to it is used after this.
        unsafe { libc::munmap(page, 4096) };
    }
}
