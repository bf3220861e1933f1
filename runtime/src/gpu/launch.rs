//! Launching the kernels on a caller's stream: the executor kernel over a plan, the
//! direct kernel, the staged path's wait for the host, and the modules they come from
//! (compiled per specialisation, loaded once per GPU and process).

use std::ffi::c_void;
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use oxccl_kernels::cuda::{Specialization, DIRECT, DIVIDE, P2P, RUN, RUN_LL, THREADS, WAIT_HOST};
use oxccl_kernels::device::{direct, launch as launch_bits, ll128, ll_args, DevArgs, DevDirect, DevWatch, LL_LINE_BYTES, LL_LINE_DATA};

use super::driver::{self, Device, DeviceMemory, Module};
use super::{CUstream, Inner, Loaded, Plan, DONE_WORD, REACHED_WORD};
use crate::error::{Error, Result};
use crate::DataType;

impl Inner {
    /// Launches the executor kernel of `plan` on `stream`: one block per lane, over the
    /// buffers at `send` and `recv`, reads of the input scaled by `scale` if given, over LL
    /// if `ll` (the plan's steps then fit LL slots): the network connections of a
    /// communicator across hosts, every connection on one host. `what` names the call in
    /// the kernel timeline, where one is kept.
    ///
    /// # Safety
    /// As [`GpuBackend::enqueue`]: the buffers and stream are the caller's contract.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn launch(&self, loaded: &Loaded, plan: &Plan, send: u64, recv: u64, scale: Option<f64>, ll: bool, stream: CUstream, what: &dyn Fn() -> String) -> Result<()> {
        let &Plan::Steps { conns, bounds, steps, ref lane_steps, ref labels, ll_entry, ref image, .. } = plan else { return Err(Error::Internal("the executor kernel launched with a point-to-point LL plan".into())) };
        // LL runs on the network connections of a communicator across hosts (those between
        // its GPUs of a host stay Simple), on all of them on one host.
        let ll = match (ll, self.across_hosts()) {
            (false, _) => 0,
            (true, true) => launch_bits::NET_LL,
            (true, false) => launch_bits::PEER_LL,
        };
        // The LL entry where it can run the plan (a small call's): half the code, the plan
        // in its parameters, and a small call's first send published sooner (docs/GPU.md).
        let ll_entry = ll != 0 && ll_entry & (1 << ll) != 0;
        let what = || if ll_entry { format!("{} [LL entry]", what()) } else { what() };
        let mut args = DevArgs {
            steps,
            bounds,
            conns,
            send,
            recv,
            watch: self.watch(),
            scale: scale.unwrap_or(1.0),
            scaled: scale.is_some() as u32,
            ll,
            stamps: self.timeline.as_ref().map_or(0, |timeline| timeline.record(what(), lane_steps, labels)),
            clock: self.timeline.as_ref().map_or(0, |timeline| timeline.clock()),
        };
        if ll_entry {
            // The plan's addresses as offsets into its image, which the parameters carry.
            (args.conns, args.bounds, args.steps) = (0, bounds - conns, steps - conns);
            let params = ll_args::buffer(&args, image).ok_or_else(|| Error::Internal(format!("a plan image of {} bytes for the LL entry, which holds {}", image.len(), ll_args::IMAGE_BYTES)))?;
            // SAFETY: ox_run_ll takes one OxArgsLl, which `params` begins (the plan's
            // image whole: the kernel reads no further); the buffers and stream are the
            // caller's contract.
            return unsafe { loaded.run_ll.launch_bytes(lane_steps.len() as u32, THREADS, stream, &params) };
        }
        // SAFETY: ox_run takes one OxArgs; the plan's memory lives in the arena until the
        // launch has run, the buffers and stream are the caller's contract.
        unsafe { loaded.run.launch(lane_steps.len() as u32, THREADS, stream, &mut [(&mut args as *mut DevArgs).cast::<c_void>()]) }
    }

    /// Launches the direct kernel: `bytes` per rank, one thread per LL line, or eight per
    /// LL128 line where `ll128` (up to NCCL_MAX_NCHANNELS blocks, then several lines per
    /// thread).
    ///
    /// # Safety
    /// As [`GpuBackend::enqueue`].
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn launch_direct(&self, loaded: &Loaded, mode: u32, send: u64, recv: u64, bytes: usize, root: usize, rank: usize, nranks: usize, scale: Option<f64>, ll128: bool, stream: CUstream) -> Result<()> {
        let d = self.direct.get().ok_or_else(|| Error::Internal("no direct inboxes".into()))?;
        let l = &d.layout;
        if ll128 && l.ll128_lines == 0 {
            return Err(Error::Internal("a one-hop call over LL128 on a communicator with no LL128 rows".into()));
        }
        // Two shots run over LL128 lines alone, in rows of their own.
        if mode == direct::TWO_SHOT && (!ll128 || l.second_offset == 0) {
            return Err(Error::Internal("an all_reduce in two shots without LL128 lines or the rows for its second shot".into()));
        }
        let (rows_offset, cap_lines) = if ll128 { (l.ll128_offset, l.ll128_lines) } else { (0, l.cap_lines) };
        // A row holds OXCCL_GPU_DIRECT_BYTES / (nranks - 1) (over LL128 also a two-shot block,
        // OXCCL_GPU_TWO_SHOT_BYTES / nranks), rounded up to lines: the route sends nothing
        // larger (route.rs), and a row overrun would write a peer's next row.
        let row = if ll128 { ll128::message_bytes(bytes) } else { bytes.div_ceil(LL_LINE_DATA) * LL_LINE_BYTES };
        if row > cap_lines * LL_LINE_BYTES {
            return Err(Error::Internal(format!("a one-hop call of {bytes} bytes a rank is more than an inbox row holds ({} bytes)", cap_lines * LL_LINE_BYTES)));
        }
        let (launch, epoch) = d.next_launch();
        let mut args = DevDirect {
            send,
            recv,
            inbox: d.inbox,
            peers: d.table,
            watch: self.watch(),
            scale: scale.unwrap_or(1.0),
            bytes: bytes as u64,
            launch,
            rows_offset: rows_offset as u64,
            second_offset: l.second_offset as u64,
            ack_offset: l.ack_offset as u64,
            cap_lines: cap_lines as u32,
            epoch,
            rank: rank as u32,
            nranks: nranks as u32,
            root: root as u32,
            mode,
            scaled: scale.is_some() as u32,
            ll128: ll128 as u32,
        };
        // A thread a line over LL; over LL128 eight a line of 15 words (ll128::LINE_DATA).
        let threads = if ll128 { bytes.div_ceil(ll128::LINE_DATA) * ll128::LINE_THREADS } else { bytes.div_ceil(LL_LINE_DATA) };
        let blocks = threads.div_ceil(THREADS as usize).clamp(1, self.max_channels) as u32;
        // SAFETY: the direct kernel takes one OxDirect; the inboxes live as long as the
        // communicator, the buffers and stream are the caller's contract.
        unsafe { loaded.direct.launch(blocks, THREADS, stream, &mut [(&mut args as *mut DevDirect).cast::<c_void>()]) }
    }

    /// Copies `bytes` from `src` into this rank's scratch buffer on `stream`; its address.
    /// The buffer grows (never shrinks) and is freed with the communicator.
    pub(super) fn scratch_copy(&self, src: u64, bytes: usize, stream: CUstream) -> Result<u64> {
        let mut state = self.state.lock();
        if state.scratch.as_ref().is_none_or(|m| m.bytes < bytes) {
            // Growing waits for the GPU (allocation), like cudaMalloc; the old buffer may
            // still be read by an earlier launch, so it is kept until teardown.
            if let Some(old) = state.scratch.take() {
                state.retired.push(old);
            }
            state.scratch = Some(DeviceMemory::zeroed(bytes)?);
        }
        let scratch = state.scratch.as_ref().expect("just made").ptr;
        // SAFETY: both ranges hold `bytes` bytes (the caller's input; the scratch buffer).
        driver::check(unsafe { cudarc::driver::sys::cuMemcpyDtoDAsync_v2(scratch, src, bytes, stream) }, || "copying an in-place alltoall's input aside".into())?;
        Ok(scratch)
    }

    /// Holds `stream` until the host finished staged operation `seq` (`ox_wait_host`).
    ///
    /// # Safety
    /// `stream` is a stream of this GPU's context.
    pub(super) unsafe fn launch_wait_host(&self, seq: u64, rank: u32, stream: CUstream) -> Result<()> {
        let loaded = self.loaded(Specialization { dtype: DataType::Uint8, op: oxccl_kernels::Combine::Sum })?;
        let (mut done, mut reached, mut target, mut watch, mut rank) = (self.flags.device_at(DONE_WORD), self.flags.device_at(REACHED_WORD), seq, self.watch(), rank);
        let params = [(&mut done as *mut u64).cast::<c_void>(), (&mut reached as *mut u64).cast(), (&mut target as *mut u64).cast(), (&mut watch as *mut DevWatch).cast(), (&mut rank as *mut u32).cast()];
        // SAFETY: the kernel's five parameters, in order; the caller's stream.
        unsafe { loaded.wait_host.launch(1, 1, stream, &mut { params }) }
    }

    /// The kernels for `spec`, loaded once per GPU and process: the primary context is
    /// shared by every rank of this process on this GPU, and loading a module waits for the
    /// GPU's running kernels — a rank sharing the GPU may be in one, waiting for this
    /// rank's next launch, so the first rank to need a module loads it for all.
    pub(super) fn loaded(&self, spec: Specialization) -> Result<Arc<Loaded>> {
        type ByDevice = FxHashMap<(i32, Specialization), Arc<Loaded>>;
        static LOADED: std::sync::LazyLock<Mutex<ByDevice>> = std::sync::LazyLock::new(Default::default);
        let mut loaded = LOADED.lock();
        if let Some(l) = loaded.get(&(self.device.ordinal, spec)) {
            return Ok(l.clone());
        }
        let compiled = self.toolchain.compile(spec, self.arch).map_err(|e| Error::from_kernels(format!("compiling the kernels for {}", self.arch), e))?;
        self.device.bind()?;
        let module = Module::load(&compiled.ptx)?;
        let kernels = Arc::new(Loaded { run: module.function(RUN)?, run_ll: module.function(RUN_LL)?, direct: module.function(DIRECT)?, p2p: module.function(P2P)?, divide: module.function(DIVIDE)?, wait_host: module.function(WAIT_HOST)?, _module: module, _device: Device::open(self.device.ordinal as usize)? });
        loaded.insert((self.device.ordinal, spec), kernels.clone());
        Ok(kernels)
    }
}
