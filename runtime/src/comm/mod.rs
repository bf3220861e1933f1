//! [`Communicator`]: a set of ranks that run collectives together, on host memory or on one
//! GPU per rank ([`Memory`]).
//!
//! A communicator is a [`Core`](crate::base::Core) (bootstrap, settings, network links, fault
//! state), shared by its backend: the host backend (`crate::host`) or the GPU backend
//! (`crate::gpu`). Every call is checked once here (`crate::call`; a caller error leaves
//! the communicator usable) and handed to the backend, which plans and runs it.
//!
//! On host memory the typed methods wait for their work; the `unsafe` `enqueue_*` methods
//! return a [`Work`] handle at once. Errors of the work surface on the handle, in
//! [`Communicator::synchronize`] and in [`Communicator::error`]. On GPU memory calls are
//! enqueued on the caller's CUDA stream (see `gpu.rs` in this folder).
//!
//! Where things are: `create` makes communicators (join, split, shrink, grow), `pending`
//! runs creations in the background, `group` collects grouped operations, `suspend`
//! suspends and reports memory, `gpu` holds the calls on device memory.

mod create;
mod gpu;
mod group;
pub(crate) mod pending;
mod suspend;

use std::sync::Arc;

use oxccl_bootstrap::Config;
use oxccl_kernels::{DataType, ReduceOp};

use crate::proxy::NetConnection;
use crate::algo::Collective;
use crate::error::{Error, Result};
use crate::host::stream::Work;
use crate::host::task::{CollectiveTask, Task};
use crate::host::HostBackend;
use crate::log_target;
use crate::base::Core;

pub use crate::base::host_id;
pub use group::Group;
pub use pending::PendingCommunicator;
pub use suspend::MemoryStats;

/// Where a communicator's buffers live, which decides the backend its calls run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Host memory: calls run on the communicator's host stream, by the CPU.
    Host,
    /// Device memory of one GPU (its CUDA ordinal): calls are enqueued on the caller's
    /// CUDA stream and run by kernels.
    Gpu { device: usize },
}

impl Memory {
    /// What OXCCL_BACKEND (`config.backend`) asks for on this machine: the GPU backend when
    /// it says `gpu`, or `auto` and a GPU is visible; the GPU is `device`, else the calling
    /// thread's current one (`cudaSetDevice`). `gpu` with no GPU visible is an error.
    pub fn from_config(config: &Config, device: Option<usize>) -> Result<Memory> {
        if !Memory::wants_gpu(config)? {
            return Ok(Memory::Host);
        }
        Ok(Memory::Gpu { device: match device {
            Some(d) => d,
            None => crate::gpu::current_device()?,
        } })
    }
}

impl Memory {
    /// Whether OXCCL_BACKEND asks for GPU memory on this machine (see
    /// [`Memory::from_config`]).
    pub fn wants_gpu(config: &Config) -> Result<bool> {
        use oxccl_bootstrap::config::Backend as Choice;
        let visible = crate::gpu::device_count() > 0;
        match config.backend {
            Choice::Host => Ok(false),
            Choice::Auto => Ok(visible),
            Choice::Gpu if visible => Ok(true),
            Choice::Gpu => Err(Error::InvalidUsage { what: "OXCCL_BACKEND=gpu, but no GPU is visible (no driver, or CUDA_VISIBLE_DEVICES is empty)".into() }),
        }
    }
}

/// A communicator. Dropping it waits for its queued work, then closes its connections (on
/// a GPU: frees its memory in the background, see `gpu::wait_for_teardowns`).
pub struct Communicator {
    // Dropped first: a backend's teardown still uses the core.
    backend: Backend,
    core: Arc<Core>,
}

/// The backend a communicator's calls run on.
pub(crate) enum Backend {
    Host(HostBackend),
    Gpu(Box<crate::gpu::GpuBackend>),
}

impl Communicator {
    /// A communicator on `memory` over `core` (collective for a GPU: the ranks connect).
    pub(crate) fn over(core: Arc<Core>, memory: Memory) -> Result<Communicator> {
        crate::topo::dump_if_asked(&core)?;
        crate::pxn::relay::serve_if_needed(&core);
        let backend = match memory {
            Memory::Host => Backend::Host(HostBackend::new(core.clone())?),
            Memory::Gpu { device } => Backend::Gpu(Box::new(crate::gpu::GpuBackend::new(core.clone(), device)?)),
        };
        // Ready: from now on only its own members' failures break it.
        core.boot.created();
        tracing::info!(target: log_target::INIT, "rank {}/{} ready ({memory:?})", core.rank, core.nranks);
        Ok(Communicator { backend, core })
    }

    /// The shared part (for the backends' tests).
    #[cfg(test)]
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The configuration the communicator was made with.
    pub fn config(&self) -> &Config {
        &self.core.config
    }

    pub fn rank(&self) -> usize {
        self.core.rank
    }

    pub fn nranks(&self) -> usize {
        self.core.nranks
    }

    /// Where the communicator's buffers live.
    pub fn memory(&self) -> Memory {
        match &self.backend {
            Backend::Host(_) => Memory::Host,
            Backend::Gpu(g) => Memory::Gpu { device: g.device() },
        }
    }

    /// The ranks that share this rank's host (NCCL_HOSTID, else host name and boot id),
    /// this one included, in rank order.
    pub fn local_ranks(&self) -> Vec<usize> {
        self.core.same_host.iter().enumerate().filter(|(_, &same)| same).map(|(r, _)| r).collect()
    }

    /// The network connections of a host-memory communicator this rank sends or receives
    /// on, in the order they were made: for each, whose data it carries to whom on which
    /// channel, which rank's proxy sends it (another rank of the sender's host for a PXN
    /// relay; see docs/NET.md) and the NIC at this rank's end. Empty on one host.
    pub fn net_connections(&self) -> Vec<NetConnection> {
        self.core.net.connections()
    }

    /// Counts of the socket net's receive calls: (calls, calls carrying several buffers).
    pub fn net_receive_stats(&self) -> (u64, u64) {
        let s = self.core.socket.stats();
        use std::sync::atomic::Ordering::Relaxed;
        (s.irecv_calls.load(Relaxed), s.irecv_grouped.load(Relaxed))
    }

    /// How many receives this rank's proxy posted together for several ranks' messages:
    /// those one rank of another host sends here on a shared comm (its own and those it
    /// relays, PXN), when the Net takes several buffers a receive (docs/NET.md).
    pub fn net_receives_across_links(&self) -> u64 {
        self.core.net.receives_across_links()
    }

    /// Waits until every rank of the communicator has called this (over the control plane:
    /// host or GPU memory alike, nothing is enqueued on a stream). Bounded by the bootstrap
    /// timeout; ends early on abort or a peer's failure.
    pub fn barrier(&self) -> Result<()> {
        Ok(self.core.boot.barrier()?)
    }

    /// Revokes the communicator (ncclCommRevoke): in-flight work stops on every rank — a
    /// collective waiting here or on any other live rank returns an error promptly, also
    /// on ranks that did not call this (the notice goes through the bootstrap) — and the
    /// communicator is then usable only for destroy (drop), [`Communicator::split`],
    /// [`Communicator::shrink`] and [`Communicator::shrink_failed`]; other calls return
    /// `InvalidUsage`. Returns once this rank's in-flight work on host memory has ended.
    /// Callable from any thread, and by any number of ranks.
    pub fn revoke(&self) -> Result<()> {
        self.core.boot.revoke();
        match &self.backend {
            Backend::Host(host) => {
                host.wake();
                // In-flight work sees the revocation in its health checks and ends with an
                // error, which is the point.
                let _ = host.synchronize();
            }
            Backend::Gpu(gpu) => gpu.stop_kernels(),
        }
        Ok(())
    }

    /// Why the communicator was revoked (here or by another rank), if it was.
    pub fn revoked(&self) -> Option<String> {
        self.core.boot.revoked()
    }

    /// The communicator's error, if an operation failed or it cannot take calls now (never
    /// blocks): aborted, revoked, a creation from it in progress, a failed peer, a kernel
    /// that stopped.
    pub fn error(&self) -> Option<Error> {
        match &self.backend {
            Backend::Host(host) => self.core.error().or_else(|| host.error()),
            // A kernel's stop or a failed peer says more than the abort it caused.
            Backend::Gpu(gpu) => gpu.async_error().or_else(|| self.core.error()),
        }
    }

    /// Stops every operation and wait of this communicator, from any thread; they return
    /// `Aborted` in bounded time (a GPU kernel waiting on a peer stops too).
    pub fn abort(&self) {
        if let Backend::Gpu(gpu) = &self.backend {
            gpu.fail(Error::Aborted { reason: String::new() });
        }
        self.core.abort();
        if let Backend::Host(host) = &self.backend {
            host.wake();
        }
    }

    /// Waits for every operation enqueued so far on host memory (on a GPU communicator:
    /// for its background work; wait on the CUDA streams with
    /// [`Communicator::synchronize_stream`]).
    pub fn synchronize(&self) -> Result<()> {
        match &self.backend {
            Backend::Host(host) => host.synchronize(),
            Backend::Gpu(gpu) => gpu.async_error().map_or(Ok(()), Err),
        }
    }

    /// Waits for queued work, then for every message this rank sent to be taken by its
    /// receiver's transport (the proxy's network sends included), so that the rank can exit
    /// without cutting off data its peers still read. Dropping a communicator does the same
    /// (logging instead of returning a failure). Bounded by OXCCL_COLL_TIMEOUT_MS; ends
    /// early on abort or a peer's failure.
    pub fn finalize(&self) -> Result<()> {
        if let Some(reason) = self.revoked() {
            return Err(Error::InvalidUsage { what: format!("finalize after revoke ({reason}): only destroy, split or shrink remain") });
        }
        match &self.backend {
            Backend::Host(host) => host.finalize(),
            Backend::Gpu(gpu) => gpu.finalize(),
        }
    }

    /// An error if the communicator cannot take a call now.
    pub(crate) fn check_usable(&self) -> Result<()> {
        self.core.refuse_if_suspended()?;
        if let Some(reason) = self.revoked() {
            return Err(Error::InvalidUsage { what: format!("the communicator is revoked ({reason}): only destroy, split or shrink remain") });
        }
        match self.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The host backend, or an error naming the call for a GPU communicator.
    fn host(&self, what: &str) -> Result<&HostBackend> {
        match &self.backend {
            Backend::Host(host) => Ok(host),
            Backend::Gpu(g) => Err(Error::InvalidUsage { what: format!("{what} takes host memory, but this communicator runs on GPU {}: enqueue device buffers on a CUDA stream", g.device()) }),
        }
    }

    /// Enqueues one collective on host buffers.
    ///
    /// # Safety
    /// `send` and `recv` must be valid for the byte sizes the collective needs on this rank
    /// (see [`Collective::buffer_counts`]), may alias only as NCCL's in-place conventions
    /// say, and must not be touched by anyone else until the returned work completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn enqueue_collective(&self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<Work> {
        let host = self.host(collective.name())?;
        self.check_usable()?;
        let task = self.collective_task(collective, send, recv, count, dtype, op, root)?;
        host.submit(Task::Collective(task))
    }

    /// Runs one collective on host buffers and waits for it: on this thread when nothing
    /// else is queued (the blocking path of the typed methods, without a thread handoff).
    ///
    /// # Safety
    /// As [`Communicator::enqueue_collective`], until this returns.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_raw(&self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<()> {
        let host = self.host(collective.name())?;
        self.check_usable()?;
        let task = self.collective_task(collective, send, recv, count, dtype, op, root)?;
        host.run_now(Task::Collective(task))
    }

    /// A checked collective on host buffers.
    #[allow(clippy::too_many_arguments)]
    fn collective_task(&self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<CollectiveTask> {
        CollectiveTask::checked(collective, send, recv, count, dtype, op, root, self.nranks(), self.rank())
    }

    /// Starts a group: operations added to it are launched together by [`Group::end`].
    pub fn group(&self) -> Group<'_> {
        Group::new(self)
    }

    /// Runs one collective on typed host buffers and waits for it. `send: None` runs in
    /// place.
    pub fn run<T: crate::Element>(&self, collective: Collective, send: Option<&[T]>, recv: &mut [T], count: usize, op: ReduceOp, root: usize) -> Result<()> {
        let host = self.host(collective.name())?;
        self.check_usable()?;
        let task = typed_task(self, collective, send, recv, count, op, root)?;
        host.run_now(Task::Collective(task))
    }

    /// How the host path runs a call of `collective` on `count` elements of `dtype`: the
    /// algorithm, protocol and predicted time the tuner chose (NCCL_ALGO/NCCL_PROTO, the
    /// host model, the tuner plugin), and the cost table it chose from. Errors as the call
    /// itself would fail for want of a runnable choice.
    pub fn tuning(&self, collective: Collective, count: usize, dtype: crate::DataType) -> Result<oxccl_tuning::Choice> {
        self.host(collective.name())?.choice(collective, count, dtype.size())
    }

    /// `recv[i] = op over ranks of send[i]`, `count = recv.len()`.
    pub fn all_reduce<T: crate::Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        let count = recv.len();
        self.run(Collective::AllReduce, Some(send), recv, count, op, 0)
    }

    /// All-reduce in place.
    pub fn all_reduce_in_place<T: crate::Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let count = buf.len();
        self.run(Collective::AllReduce, None, buf, count, op, 0)
    }

    /// Every rank's `buf` becomes the root's.
    pub fn broadcast<T: crate::Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let count = buf.len();
        self.run(Collective::Broadcast, None, buf, count, ReduceOp::Sum, root)
    }

    /// The root's `recv` becomes the reduction of every rank's `send` (`recv` is ignored
    /// elsewhere and may be empty).
    pub fn reduce<T: crate::Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        self.run(Collective::Reduce, Some(send), recv, send.len(), op, root)
    }

    /// `recv` (n × send.len()) holds every rank's `send`, in rank order.
    pub fn all_gather<T: crate::Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.run(Collective::AllGather, Some(send), recv, send.len(), ReduceOp::Sum, 0)
    }

    /// `recv` (count) is block `rank` of the reduction of every rank's `send` (n × count).
    pub fn reduce_scatter<T: crate::Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        let count = recv.len();
        self.run(Collective::ReduceScatter, Some(send), recv, count, op, 0)
    }

    /// Block p of `send` goes to rank p, arriving as block `rank` of its `recv`.
    pub fn all_to_all<T: crate::Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let count = send.len() / self.nranks();
        self.run(Collective::AllToAll, Some(send), recv, count, ReduceOp::Sum, 0)
    }

    /// The root's `recv` (n × send.len()) holds every rank's `send`.
    pub fn gather<T: crate::Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.run(Collective::Gather, Some(send), recv, send.len(), ReduceOp::Sum, root)
    }

    /// Block p of the root's `send` lands in rank p's `recv`.
    pub fn scatter<T: crate::Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let count = recv.len();
        self.run(Collective::Scatter, Some(send), recv, count, ReduceOp::Sum, root)
    }

    /// Sends `data` to `peer` and waits (pair with the peer's `recv`; for exchanges, use a
    /// [`Group`] so both directions progress together).
    pub fn send<T: crate::Element>(&self, data: &[T], peer: usize) -> Result<()> {
        let mut g = self.group();
        g.send(data, peer)?;
        g.end()
    }

    /// Receives from `peer` into `data` and waits.
    pub fn recv<T: crate::Element>(&self, data: &mut [T], peer: usize) -> Result<()> {
        let mut g = self.group();
        g.recv(data, peer)?;
        g.end()
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        match &self.backend {
            Backend::Host(host) => {
                if self.error().is_some() {
                    host.part_in_error();
                    return;
                }
                if let Err(e) = host.finalize() {
                    tracing::warn!(target: log_target::INIT, "rank {}: finalizing on drop: {e}", self.core.rank);
                }
            }
            // The GPU backend's own drop ends its kernels and frees its memory.
            Backend::Gpu(_) => {}
        }
    }
}

/// Checks typed host buffers against the collective's needs and builds its task.
pub(crate) fn typed_task<T: crate::Element>(comm: &Communicator, collective: Collective, send: Option<&[T]>, recv: &mut [T], count: usize, op: ReduceOp, root: usize) -> Result<CollectiveTask> {
    let (n, rank) = (comm.nranks(), comm.rank());
    // A root out of range is refused by `collective_task`, whatever sizes it gives here.
    let (send_count, recv_count) = collective.buffer_counts(count, n, rank, root);
    if recv.len() < recv_count {
        return Err(Error::invalid(format!("{}: recv buffer holds {} elements, {recv_count} needed", collective.name(), recv.len())));
    }
    let recv_ptr = bytemuck::cast_slice_mut::<T, u8>(recv).as_mut_ptr();
    let send_ptr: *const u8 = match send {
        Some(send) if send.len() < send_count => {
            return Err(Error::invalid(format!("{}: send buffer holds {} elements, {send_count} needed", collective.name(), send.len())));
        }
        Some(send) => bytemuck::cast_slice::<T, u8>(send).as_ptr(),
        None => {
            if let Some(offset) = collective.in_place_recv_offset(count, rank, root) {
                return Err(Error::invalid(format!(
                    "{} in place reads its input from the send buffer (recv = send + {offset} elements): pass the send buffer",
                    collective.name()
                )));
            }
            let offset = collective.in_place_send_offset(count, rank, root).unwrap_or(0);
            recv_ptr.wrapping_add(offset * std::mem::size_of::<T>())
        }
    };
    comm.collective_task(collective, send_ptr, recv_ptr, count, T::DATATYPE, op, root)
}
