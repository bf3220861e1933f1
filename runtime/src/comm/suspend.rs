//! Suspending a communicator (ncclCommSuspend/ncclCommResume) and what its memory holds
//! (ncclCommMemStats).
//!
//! Memory a suspension may release is what the communicator re-creates by itself on
//! demand: the scratch buffer that Avg and PreMulSum scale their input into, and the cache
//! of plans. The connections' FIFOs stay: each is one end of a pair that its peer set up
//! with this rank, and neither end can rebuild it alone.

use std::sync::atomic::Ordering;

use super::{Backend, Communicator};
pub use crate::base::MemoryStats;
use crate::error::{Error, Result};

impl Communicator {
    /// Suspends the communicator (ncclCommSuspend): waits for the work queued so far (on a
    /// GPU: until every stream's launches of this communicator have run), then refuses
    /// collectives and point-to-point operations with `InvalidUsage` naming the suspension
    /// until [`Communicator::resume`]. With `release_memory` (`NCCL_SUSPEND_MEM`) it also
    /// frees what the communicator re-creates on demand (see [`MemoryStats`]). Local to
    /// this rank. Suspending a suspended communicator is `InvalidUsage`.
    pub fn suspend(&self, release_memory: bool) -> Result<()> {
        if self.core.suspended.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidUsage { what: format!("{}: it is already suspended", self.core.name()) });
        }
        // Calls from now on are refused at their entry.
        match &self.backend {
            Backend::Host(host) => host.suspend(release_memory),
            Backend::Gpu(gpu) => gpu.suspend(release_memory)?,
        }
        tracing::info!(target: crate::log_target::INIT, "{} suspended{}", self.core.name(), if release_memory { ", memory released" } else { "" });
        Ok(())
    }

    /// Resumes a suspended communicator (ncclCommResume): what the suspension released is
    /// allocated again (the host scratch buffer at its former size; a GPU's first block of
    /// plan memory), and operations are accepted again. Resuming a communicator that is
    /// not suspended is `InvalidUsage`.
    pub fn resume(&self) -> Result<()> {
        if !self.suspended() {
            return Err(Error::InvalidUsage { what: format!("{}: resume without a suspension", self.core.name()) });
        }
        match &self.backend {
            Backend::Host(host) => host.resume()?,
            Backend::Gpu(gpu) => gpu.resume()?,
        }
        self.core.suspended.store(false, Ordering::Release);
        Ok(())
    }

    /// Whether the communicator is suspended.
    pub fn suspended(&self) -> bool {
        self.core.suspended.load(Ordering::Acquire)
    }

    /// What the communicator's memory holds now (never waits on running work): host memory
    /// on host memory, GPU memory on a GPU.
    pub fn memory_stats(&self) -> MemoryStats {
        match &self.backend {
            Backend::Host(host) => host.memory_stats(),
            Backend::Gpu(gpu) => gpu.memory_stats(),
        }
    }
}
