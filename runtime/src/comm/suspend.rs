//! Suspending a communicator (ncclCommSuspend/ncclCommResume) and what its memory holds
//! (ncclCommMemStats).
//!
//! Memory a suspension may release is what the communicator re-creates by itself on
//! demand: the scratch buffer that Avg and PreMulSum scale their input into, and the cache
//! of plans. The connections' FIFOs stay: each is one end of a pair that its peer set up
//! with this rank, and neither end can rebuild it alone.

use std::sync::atomic::Ordering;

use super::{Communicator, Exec};
use crate::error::{Error, Result};

/// A communicator's memory, in bytes, as `ncclCommMemStats` reports it (on the host
/// backend the buffers are host memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStats {
    /// Held now and released by [`Communicator::suspend`] with `release_memory` (0 while
    /// suspended so).
    pub releasable: u64,
    /// Held for the communicator's life: the FIFO slots of its connections (this rank's
    /// receiving ends, and the sending ends it keeps itself, over the network).
    pub persistent: u64,
    /// Whether the communicator is suspended.
    pub suspended: bool,
}

impl MemoryStats {
    /// Everything counted.
    pub fn total(&self) -> u64 {
        self.releasable + self.persistent
    }
}

impl Communicator {
    /// Suspends the communicator (ncclCommSuspend): waits for the work queued so far, then
    /// refuses collectives and point-to-point operations with `InvalidUsage` naming the
    /// suspension until [`Communicator::resume`]. With `release_memory`
    /// (`NCCL_SUSPEND_MEM`) it also frees what the communicator re-creates on demand (see
    /// [`MemoryStats`]). Local to this rank. Suspending a suspended communicator is
    /// `InvalidUsage`.
    pub fn suspend(&self, release_memory: bool) -> Result<()> {
        if self.exec.suspended.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidUsage { what: format!("{}: it is already suspended", self.name()) });
        }
        // Calls from now on are refused at their entry; work queued before runs to its end
        // (its failure stays its own), and the release below waits for the task running
        // (which holds the connections). A call racing this one on another thread may run
        // and re-create what it needs: memory re-created on demand, never a wrong result.
        let _ = self.stream.synchronize();
        if release_memory {
            self.exec.release_memory();
        }
        tracing::info!(target: crate::log_target::INIT, "{} suspended{}", self.name(), if release_memory { ", memory released" } else { "" });
        Ok(())
    }

    /// Resumes a suspended communicator (ncclCommResume): the scratch buffer released by
    /// the suspension is allocated again at its former size, and operations are accepted
    /// again. Resuming a communicator that is not suspended is `InvalidUsage`.
    pub fn resume(&self) -> Result<()> {
        let exec = &self.exec;
        let _connections = exec.connections.lock();
        if !exec.suspended.load(Ordering::Acquire) {
            return Err(Error::InvalidUsage { what: format!("{}: resume without a suspension", self.name()) });
        }
        let released = std::mem::take(&mut *exec.released_scratch.lock());
        if released > 0 {
            let mut scratch = exec.scratch.lock();
            scratch.try_reserve_exact(released).map_err(|e| Error::Internal(format!("re-allocating {released} bytes of scratch on resume: {e}")))?;
            scratch.resize(released, 0);
            exec.scratch_bytes.store(released as u64, Ordering::Release);
        }
        exec.suspended.store(false, Ordering::Release);
        Ok(())
    }

    /// `InvalidUsage` naming the suspension, while suspended.
    pub(crate) fn refuse_if_suspended(&self) -> Result<()> {
        if self.suspended() {
            return Err(self.exec.suspended_error());
        }
        Ok(())
    }

    /// Whether the communicator is suspended.
    pub fn suspended(&self) -> bool {
        self.exec.suspended.load(Ordering::Acquire)
    }

    /// What the communicator's memory holds now (never waits on running work).
    pub fn memory_stats(&self) -> MemoryStats {
        let exec = &self.exec;
        let plans: u64 = exec.plans.lock().values().map(|p| p.bytes()).sum();
        MemoryStats {
            releasable: exec.scratch_bytes.load(Ordering::Acquire) + plans,
            persistent: exec.fifo_bytes.load(Ordering::Acquire),
            suspended: exec.suspended.load(Ordering::Acquire),
        }
    }

    /// "rank r of n", for messages.
    fn name(&self) -> String {
        format!("communicator rank {} of {}", self.rank(), self.nranks())
    }
}

impl Exec {
    /// The error for work that meets a suspended communicator.
    pub(super) fn suspended_error(&self) -> Error {
        Error::InvalidUsage { what: format!("communicator rank {} of {} is suspended (ncclCommSuspend): resume it (ncclCommResume) before using it", self.rank, self.nranks) }
    }

    /// Frees the scratch buffer (remembering its size for the resumption) and the plans,
    /// once no task runs (a task holds the connections throughout).
    fn release_memory(&self) {
        let _connections = self.connections.lock();
        let mut scratch = self.scratch.lock();
        *self.released_scratch.lock() += scratch.len();
        *scratch = Vec::new();
        self.scratch_bytes.store(0, Ordering::Release);
        self.plans.lock().clear();
    }
}
