//! A communicator's end: [`GpuBackend`]'s drop, which returns at once and leaves the
//! meeting with the peers and the freeing of GPU memory to a thread of its own, and
//! [`wait_for_teardowns`], which waits for those threads.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::staged::Staged;
use super::GpuBackend;

impl Drop for GpuBackend {
    fn drop(&mut self) {
        let healthy = self.inner.failure.lock().is_none();
        let mut finished = self.inner.drain(if healthy { self.inner.timeout } else { Duration::ZERO });
        let net = self.inner.state.lock().conns.any_net();
        if finished && healthy && net && !self.flush_net_sends(Duration::from_secs(5)) {
            tracing::warn!(target: crate::log_target::INIT, "rank {}: the proxy had not sent everything this rank's kernels posted within 5 s", self.core.rank);
        }
        if finished {
            // Nothing more will come from this rank: a peer's kernel still waiting for it
            // (the ranks' calls differ) stops now rather than at the collective timeout.
            match self.inner.say_gone(self.core.rank) {
                Ok(true) => {}
                Ok(false) => {
                    // Copies into peers' memory still pending: nothing may be unmapped.
                    tracing::warn!(target: crate::log_target::INIT, "rank {}: telling the peers' GPU kernels that it leaves did not finish within 5 s", self.core.rank);
                    finished = false;
                }
                Err(e) => tracing::warn!(target: crate::log_target::INIT, "rank {}: could not tell the peers' GPU kernels that it leaves: {e}", self.core.rank),
            }
        }
        if finished {
            // Every launch has ended: its stamps are all in.
            if let Some(timeline) = &self.inner.timeline {
                timeline.write();
            }
        }
        self.inner.stop.store(true, Ordering::Release);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        let staged = self.staged.take();
        let core = self.core.clone();
        if !finished {
            // A kernel or copy is still running on this memory: leaking it is the only safe
            // choice.
            tracing::error!(target: crate::log_target::INIT, "rank {}: GPU work did not stop; leaking its memory", core.rank);
            std::mem::forget(std::mem::take(&mut *self.inner.state.lock()));
            if let Some(staged) = staged {
                staged.leak();
            }
            return;
        }
        if !healthy {
            // Aborted or failed: nobody is waited for. The network links go first (their
            // FIFOs are this memory), then the memory with the last handle.
            if let Some(staged) = staged {
                staged.abandon();
            }
            if net && !self.core.net.close(Duration::from_secs(5)) {
                tracing::error!(target: crate::log_target::INIT, "rank {}: the proxy did not let go of the network links; leaking their memory", core.rank);
                std::mem::forget(std::mem::take(&mut *self.inner.state.lock()));
            }
            return;
        }
        // Peers may still write heads and tails into this rank's memory until their own
        // kernels end: meet them (a timed barrier that fails fast on a dead peer) before
        // freeing it — on a thread of its own, so that destroy returns at once and one
        // thread may destroy every rank of a job in turn (as with NCCL). Staged, or with no
        // peer on this host, no peer reaches this rank's GPU memory: nobody is met (a peer
        // still waiting for this rank then learns soon that it left: the host path or the
        // watcher's `gone` flags, after the network's grace).
        let state = std::mem::take(&mut *self.inner.state.lock());
        let inner = self.inner.clone();
        // Only peers of this host write into this rank's GPU memory (over the network the
        // proxy does, and its links are closed below).
        let meet = staged.is_none() && self.core.same_host.iter().enumerate().any(|(r, &same)| same && r != self.core.rank);
        let pending = Teardown::begin();
        let reaper = std::thread::Builder::new().name("oxccl-gpu-teardown".into()).spawn(move || {
            let _pending = pending;
            let (rank, start) = (core.rank, Instant::now());
            if meet {
                if let Err(e) = core.boot.barrier() {
                    tracing::warn!(target: crate::log_target::INIT, "rank {rank}: GPU teardown barrier failed: {e}");
                }
            }
            // The network links go before their FIFOs' memory (freed below, here, not by a
            // proxy thread that other communicators need).
            if net && !core.net.close(Duration::from_secs(5)) {
                tracing::error!(target: crate::log_target::INIT, "rank {rank}: the proxy did not let go of the network links; leaking their memory");
                std::mem::forget(state);
                return;
            }
            let _ = inner.device.bind();
            // Staged: the communicator goes first (its staging host communicator, then with
            // the last handle of the core the bootstrap: a peer still waiting for this rank
            // in the host path learns it left), then the memory.
            let buffers = staged.map(Staged::finish);
            crate::pxn::relay::stop_service(&core);
            drop(core);
            // Freeing waits for every kernel on the GPU, other communicators' included, and
            // meanwhile the driver holds up the process's other CUDA calls (GPU.md, "Using
            // it"): the time it took says whether it met one.
            let freeing = Instant::now();
            drop(buffers);
            drop(state);
            tracing::info!(target: crate::log_target::INIT, "rank {rank}: GPU teardown done in {:.1?} (freeing the memory {:.1?})", start.elapsed(), freeing.elapsed());
        });
        if let Err(e) = reaper {
            tracing::warn!(target: crate::log_target::INIT, "no GPU teardown thread ({e}): the connection memory is leaked");
        }
    }
}

impl GpuBackend {
    /// Waits up to `limit` until the proxy has sent everything this rank's kernels posted on
    /// its network connections (the kernels have ended); whether it has.
    fn flush_net_sends(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.inner.state.lock().conns.net_unsent() > 0 {
            if Instant::now() >= deadline || self.core.health().is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        true
    }
}

/// Teardowns of this process's communicators still running (their memory not yet freed).
static TEARDOWNS: (Mutex<usize>, parking_lot::Condvar) = (Mutex::new(0), parking_lot::Condvar::new());

/// One teardown in progress, counted until dropped.
struct Teardown;

impl Teardown {
    fn begin() -> Teardown {
        *TEARDOWNS.0.lock() += 1;
        Teardown
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        *TEARDOWNS.0.lock() -= 1;
        TEARDOWNS.1.notify_all();
    }
}

/// Waits up to `limit` until every communicator dropped so far has freed its GPU memory;
/// whether they all did. Dropping a communicator returns at once and its teardown goes on
/// in the background: it meets its peers, then frees its memory (a failed or aborted one
/// meets nobody: its memory goes with its last handle, buffer or stream). Freeing GPU
/// memory waits for every kernel on the GPU while the driver holds up the process's other
/// CUDA calls. A program that makes new communicators (or launches work that waits on
/// other threads' CUDA calls) right after dropping old ones on the same GPUs can call this
/// in between, as NCCL's blocking ncclCommDestroy would have.
pub fn wait_for_teardowns(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut pending = TEARDOWNS.0.lock();
    while *pending > 0 {
        if TEARDOWNS.1.wait_until(&mut pending, deadline).timed_out() {
            return *pending == 0;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The teardown count needs no GPU: a wait ends when the last teardown does, and one
    /// that outlasts the limit says so.
    #[test]
    fn waiting_for_teardowns_ends_with_the_last_one() {
        let (first, second) = (Teardown::begin(), Teardown::begin());
        assert!(!wait_for_teardowns(Duration::from_millis(20)), "two teardowns still run");
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                drop(first);
                std::thread::sleep(Duration::from_millis(50));
                drop(second);
            });
            assert!(wait_for_teardowns(Duration::from_secs(10)));
        });
        assert!(start.elapsed() >= Duration::from_millis(100), "returned after {:?}, before the second teardown ended", start.elapsed());
    }
}
