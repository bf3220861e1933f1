//! The calls of a communicator on GPU memory ([`Memory::Gpu`]): collectives and send/recv
//! groups on device buffers, enqueued on the caller's CUDA stream, and what a program
//! without the CUDA runtime needs around them (device buffers, streams, waits).

use oxccl_bootstrap::Config;
use oxccl_kernels::{DataType, ReduceOp};

use super::{Backend, Communicator, Memory};
use crate::algo::Collective;
use crate::call::{self, Addresses};
use crate::error::{Error, Result};
use crate::gpu::{CUstream, DeviceBuffer, GpuBackend, P2p, Route, Stream};

/// An enqueue that takes this long is logged (NCCL_DEBUG=INFO): the host's part of a call
/// (routing, planning and uploading a plan, connecting, loading kernels) is microseconds
/// once a call's plan is cached, so a longer one is a one-time cost or a wait on the GPU,
/// and it holds back the rank's next launch.
const SLOW_ENQUEUE: std::time::Duration = std::time::Duration::from_millis(1);

/// Runs `enqueue`, and logs it when it took [`SLOW_ENQUEUE`] or more.
fn timed(rank: usize, what: impl Fn() -> String, enqueue: impl FnOnce() -> Result<()>) -> Result<()> {
    let started = std::time::Instant::now();
    let result = enqueue();
    log_if_slow(rank, what, started.elapsed());
    result
}

/// Logs an enqueue of `what` that `took` [`SLOW_ENQUEUE`] or more.
fn log_if_slow(rank: usize, what: impl Fn() -> String, took: std::time::Duration) {
    if took >= SLOW_ENQUEUE {
        tracing::info!(target: crate::log_target::COLL, "rank {rank}: enqueuing {} took {:.2} ms on the host", what(), took.as_secs_f64() * 1e3);
    }
}

impl Communicator {
    /// `devices.len()` ranks of one job in this process, rank i on GPU `devices[i]`.
    pub fn init_all_gpus(devices: &[usize], config: &Config) -> Result<Vec<Communicator>> {
        Communicator::init_all_gpus_with(devices, &vec![config.clone(); devices.len()])
    }

    /// As [`Communicator::init_all_gpus`], rank i with `configs[i]` (see
    /// [`Communicator::init_all_with`]).
    pub fn init_all_gpus_with(devices: &[usize], configs: &[Config]) -> Result<Vec<Communicator>> {
        if devices.len() != configs.len() {
            return Err(Error::invalid(format!("{} GPUs but {} configurations", devices.len(), configs.len())));
        }
        let memory: Vec<Memory> = devices.iter().map(|&device| Memory::Gpu { device }).collect();
        Communicator::init_all_on(configs, &memory)
    }

    /// The GPU backend, or an error naming the call for a host communicator.
    fn gpu(&self, what: &str) -> Result<&GpuBackend> {
        match &self.backend {
            Backend::Gpu(gpu) => Ok(gpu),
            Backend::Host(_) => Err(Error::InvalidUsage { what: format!("{what} takes GPU memory, but this communicator runs on host memory") }),
        }
    }

    /// Enqueues a collective on device buffers on `stream` and returns; see
    /// [`Communicator::run`] for the buffer sizes and in-place conventions, which are
    /// NCCL's. Results are there once the stream passes this point
    /// ([`Communicator::synchronize_stream`]).
    ///
    /// # Safety
    /// `send` and `recv` must be device addresses this GPU can access (or host memory mapped
    /// into it), sized for the collective, not touched by anything else until the stream
    /// passes this point; `stream` must be a stream of this GPU's primary context, or null.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_collective(&self, collective: Collective, send: u64, recv: u64, count: usize, dtype: DataType, op: ReduceOp, root: usize, stream: CUstream) -> Result<()> {
        let gpu = self.gpu(collective.name())?;
        let checked = call::check_collective(collective, send, recv, count, dtype, self.nranks(), self.rank(), root, Addresses::Device)?;
        self.check_usable()?;
        let what = || format!("{} of {} B", collective.name(), count * dtype.size());
        // SAFETY: the caller's contract; the arguments are checked.
        timed(self.rank(), what, || unsafe { gpu.enqueue(collective, send, recv, count, dtype, op, root, checked, stream) })
    }

    /// Enqueues a group of sends and receives on device buffers on `stream` and returns.
    /// Sends to and receives from each peer pair up in order with the peer's (equal sizes,
    /// as NCCL requires); transfers with this rank itself are copies, paired in order.
    ///
    /// # Safety
    /// Every address must be device memory this GPU can access, holding `bytes`, untouched
    /// until the stream passes this point; `stream` as for
    /// [`Communicator::launch_collective`].
    pub unsafe fn launch_p2p(&self, ops: &[P2p], stream: CUstream) -> Result<()> {
        let gpu = self.gpu("a send/recv group")?;
        for op in ops {
            call::check_transfer(op.send, op.peer, op.addr, op.bytes, self.nranks())?;
        }
        // Zero-byte transfers move nothing: they are left out.
        let own = |send: bool| ops.iter().filter(move |o| o.send == send && o.peer == self.rank() && o.bytes > 0).map(|o| o.bytes);
        call::check_own_transfers(own(true), own(false))?;
        self.check_usable()?;
        let what = || format!("a group of {} send(s) and receive(s), {} B", ops.len(), ops.iter().map(|o| o.bytes).sum::<usize>());
        // SAFETY: the caller's contract; the operations are checked.
        timed(self.rank(), what, || unsafe { gpu.enqueue_p2p(ops, stream) })
    }

    /// Waits until `stream` has run everything enqueued on it so far; an error if a kernel
    /// stopped (abort, a failed peer, a timeout) or the wait outlasts the collective
    /// timeout (the kernels are then told to stop).
    ///
    /// # Safety
    /// `stream` must be a stream of this GPU's primary context, or null.
    pub unsafe fn synchronize_stream(&self, stream: CUstream) -> Result<()> {
        // SAFETY: the caller's stream.
        unsafe { self.gpu("waiting for a CUDA stream")?.synchronize(stream) }
    }

    /// [`Communicator::synchronize_stream`] on a stream made by [`Communicator::stream`].
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        self.gpu("waiting for a CUDA stream")?.wait(stream)
    }

    /// Device memory of this communicator's GPU, freed on drop (for tests and benchmarks).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.gpu("allocating device memory")?.alloc(bytes)
    }

    /// A new stream of this communicator's GPU.
    pub fn stream(&self) -> Result<Stream> {
        self.gpu("making a CUDA stream")?.stream()
    }

    /// This rank's GPU (its CUDA ordinal), on GPU memory.
    pub fn device(&self) -> Option<usize> {
        match self.memory() {
            Memory::Gpu { device } => Some(device),
            Memory::Host => None,
        }
    }

    /// Makes this communicator's GPU current on the calling thread (for calls into other
    /// CUDA libraries).
    pub fn bind(&self) -> Result<()> {
        self.gpu("binding a GPU")?.bind()
    }

    /// The path a call of `collective` on `count` elements of `dtype` (root `root`) takes
    /// on this rank's GPU; the same on every rank of the communicator. An error where
    /// NCCL_PROTO leaves no path.
    pub fn route(&self, collective: Collective, count: usize, dtype: DataType, root: usize) -> Result<Route> {
        self.gpu("a GPU route")?.route(collective, count, dtype, root)
    }
}

#[cfg(test)]
mod tests {
    use super::{log_if_slow, timed, SLOW_ENQUEUE};
    use crate::error::Error;
    use oxccl_testkit::CapturedLogs;

    /// A slow enqueue is logged with what it was and how long it took, a quick one not;
    /// either way its result comes back. (The quick one's time is given, not measured: a
    /// loaded machine may hold any call back for a millisecond.)
    #[test]
    fn slow_enqueues_are_logged_quick_ones_not() {
        let logs = CapturedLogs::default();
        let slow = logs.during(|| timed(3, || "AllReduce of 8 B".into(), || {
            std::thread::sleep(SLOW_ENQUEUE);
            Ok(())
        }));
        assert!(slow.is_ok());
        assert!(timed(3, || "AllGather of 32 B".into(), || Err(Error::invalid("no"))).is_err());
        logs.during(|| log_if_slow(3, || "AllGather of 32 B".into(), SLOW_ENQUEUE - std::time::Duration::from_nanos(1)));
        let lines = logs.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(logs.has("INFO", crate::log_target::COLL, "rank 3: enqueuing AllReduce of 8 B took"), "{lines:?}");
    }
}
