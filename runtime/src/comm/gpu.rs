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
        // SAFETY: the caller's contract; the arguments are checked.
        unsafe { gpu.enqueue(collective, send, recv, count, dtype, op, root, checked, stream) }
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
        // SAFETY: the caller's contract; the operations are checked.
        unsafe { gpu.enqueue_p2p(ops, stream) }
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
