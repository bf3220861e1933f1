//! The GPU backend: collectives on device buffers, run by the CUDA executor kernel
//! (`kernels/cuda/collective.cu`) over FIFOs in GPU memory, on the caller's stream.
//!
//! A [`GpuBackend`] is the backend of a [`Communicator`](crate::Communicator) on GPU
//! memory: the communicator's core (bootstrap, failure detection, abort) plus a GPU. A
//! collective call, its arguments checked by the communicator, takes its [`Route`] (the direct kernel for
//! small calls, an LL exchange, or the executor kernel), finds or makes the plan for its
//! shape (the same schedules the host executor runs, encoded for the kernel, with the
//! connections they use set up over the bootstrap and the encoding uploaded once), and
//! launches one thread block per lane on the caller's stream; it returns at once. Results are visible once the
//! stream reaches that point; [`GpuBackend::synchronize`] waits for a stream with a timeout
//! and the abort and failure checks of every wait in oxccl.
//!
//! Kernels watch an abort flag in mapped host memory: [`GpuBackend::fail`] raises it, and
//! so does a watcher thread when the control plane reports a failed peer, so a kernel
//! waiting on a dead peer exits. Kernels also give up on a wait that lasts longer than the
//! communicator's collective timeout (`OXCCL_COLL_TIMEOUT_MS`, docs/CONFIG.md), and
//! report why through a status word that [`GpuBackend::async_error`] reads.
//!
//! Where things are: `init` makes a communicator (connections, inboxes, the watcher),
//! `route` picks a call's path, `encode` and `arena` turn schedules into uploaded plans,
//! `launch` starts the kernels, `p2p` runs send/recv groups, `staged` runs calls across
//! hosts through host memory, `teardown` ends a communicator, `conns` and `driver` hold the
//! connections and the CUDA driver calls, `memory` the buffers and copies for callers
//! without the CUDA runtime.

mod arena;
mod conns;
mod driver;
mod encode;
mod init;
mod launch;
mod memory;
mod p2p;
mod route;
mod staged;
mod teardown;
mod timeline;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use oxccl_kernels::cuda::{Specialization, Toolchain};
use oxccl_kernels::device::{direct, launch as launch_bits, ll_args, ll_entry_fits, status, DevConn, DevStep, DevWatch};

use crate::algo::{self, Algorithm, Collective, Planned, Shape};
use crate::call::PlanKey;
use crate::base::Core;
use crate::base::MemoryStats;
use crate::error::{Error, Result};
use crate::{DataType, ReduceOp};

pub use cudarc::driver::sys::CUstream;
pub use driver::{device_count, Stream};

use conns::{Connections, Inbox, Origin};
use encode::End;
use crate::proxy::Direction;
use oxccl_transports::fifo::Geometry;
use driver::{Device, DeviceMemory, Event, Function, MappedHost, Module};
use arena::Arena;
use staged::Staged;
pub use p2p::P2p;
pub use route::{KernelRoutes, Route};
pub use memory::{copy_from_device, copy_to_device, current_device, mem_alloc, mem_free, set_current_device, DeviceBuffer};
pub use teardown::wait_for_teardowns;

/// Plans cached per communicator before the cache starts over in another arena.
const MAX_PLANS: usize = 512;
/// Arenas kept for reuse while launches may still read them; past this, starting over
/// waits for every stream.
const MAX_OLD_ARENAS: usize = 4;
/// Data per channel before another channel pays for itself: one block moves some tens of
/// GB/s, so all but the smallest messages want several.
const BYTES_PER_CHANNEL: usize = 64 << 10;
/// The same over LL between the GPUs of a host, where a step costs its lines' round trips
/// more than their bytes, up to [`LL_SPREAD_CHANNELS`]: 4×H200, all_reduce 1 MiB over LL in
/// 32 lanes took 22.3–22.6 µs against 27.0–28.6 in 16 (more than 32 never measured).
const LL_BYTES_PER_CHANNEL: usize = 32 << 10;
const LL_SPREAD_CHANNELS: usize = 32;
/// A send or receive on the Simple FIFOs moves each channel's part in one step, which
/// nothing overlaps: up to [`P2P_SPREAD_CHANNELS`] channels of 16 KiB each do better than
/// a few of 64 KiB (2×H200, sendrecv 128–256 KiB: 10.3–10.6 µs against 11.7–13.2).
const P2P_BYTES_PER_CHANNEL: usize = 16 << 10;
const P2P_SPREAD_CHANNELS: usize = 16;

/// Channels for a message of `bytes`: one per [`BYTES_PER_CHANNEL`] within `min..=max`
/// (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS as agreed), and where `spread` is
/// `(bytes_per_channel, cap)`, at least one per `bytes_per_channel` up to `cap` (never past
/// `max`).
fn channel_count(bytes: usize, min: usize, max: usize, spread: Option<(usize, usize)>) -> usize {
    let base = bytes.div_ceil(BYTES_PER_CHANNEL).clamp(min, max);
    spread.map_or(base, |(per, cap)| base.max(bytes.div_ceil(per).min(cap)).min(max))
}

/// The most channels this rank offers the others (init agrees on the least offered):
/// NCCL_MAX_NCHANNELS, past NCCL's 64 too, up to the `multiprocessors` this rank gets (a
/// block each; more blocks issue more of the stores to the peers at the largest sizes,
/// docs/PERFORMANCE.md, the NVLink ceiling, at the cost of FIFOs for every channel); with
/// the network kernels at most OXCCL_GPU_NET_CHANNELS, each channel having network
/// connections of its own, of which a few carry what the Net can. Unset, 128 where the
/// rank has [`WIDE_MULTIPROCESSORS`] to itself on one host, else 64.
fn most_channels(config: &crate::bootstrap::Config, net_kernels: bool, multiprocessors: usize) -> usize {
    let wide = wide(net_kernels, multiprocessors);
    let most = config.max_channels.unwrap_or(if wide { WIDE_CHANNELS } else { 64 }).max(1).min(multiprocessors.max(1));
    if net_kernels { most.min(config.gpu_net_channels) } else { most }
}

/// Whether a rank with `multiprocessors` to itself gets the wide defaults ([`WIDE_CHANNELS`],
/// [`WIDE_NEIGHBOUR_CHANNELS`]): on one host, a GPU of [`WIDE_MULTIPROCESSORS`] or more.
fn wide(net_kernels: bool, multiprocessors: usize) -> bool {
    !net_kernels && multiprocessors >= WIDE_MULTIPROCESSORS
}

/// The most channels a send/recv transfer along the ring takes on one host
/// (OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS, held to [`NEIGHBOUR_MOST_CHANNELS`]): unset,
/// [`WIDE_NEIGHBOUR_CHANNELS`] where the rank has [`WIDE_MULTIPROCESSORS`] to itself (a
/// shift's two transfers then run 128 blocks), else none past the direct exchange's share;
/// none across hosts (the network kernels' connections are the direct exchange's).
fn neighbour_channels(config: &crate::bootstrap::Config, net_kernels: bool, multiprocessors: usize) -> usize {
    if net_kernels {
        return 0;
    }
    let asked = config.gpu_p2p_neighbour_channels.unwrap_or(if wide(net_kernels, multiprocessors) { WIDE_NEIGHBOUR_CHANNELS } else { 0 });
    asked.min(NEIGHBOUR_MOST_CHANNELS)
}

/// The most channels a transfer along the ring takes: a shift's two (the send to the next
/// rank, the receive from the previous one) then fit the send/recv kernel's blocks (twice
/// [`DIRECT_MOST_CHANNELS`]) without folding. Folded, a block ran a send lane and then a
/// receive lane: 128 channels each way between 2 H200s (256 lanes on 128 blocks) took
/// 5064 µs for sendrecv at 1 GiB against 2952 on 64 (docs/PERFORMANCE.md).
const NEIGHBOUR_MOST_CHANNELS: usize = DIRECT_MOST_CHANNELS;

/// Channels of a transfer along the ring by default on a wide GPU: with 4 ranks on
/// 4×H200, sendrecv at 1 GiB took 2937–2940 µs on 64 against 3214–3273 on the direct
/// exchange's 21 (NCCL 2981; docs/results/2026-11-28-h200x2-x4-neighbours). A group to
/// every peer then has 212 lanes, folded onto 128 blocks (p2p.rs): correct on GPUs, and as
/// fast as unfolded in a model (`folded_groups_keep_both_directions_busy`), not yet timed
/// on a GPU.
const WIDE_NEIGHBOUR_CHANNELS: usize = 64;

/// Multiprocessors a rank needs to itself for [`WIDE_CHANNELS`] by default (H100 and H200
/// have 132): a block each, so that the largest calls keep more stores in flight to the
/// peers than 64 blocks do (4×H200, 16 MiB–1 GiB: 1.00–1.19× the busbw of 64 for every
/// collective; 2 GPUs, all_reduce at 1 GiB 1.05× against NCCL's busbw with 64, 1.10× with
/// 128; docs/results/2026-11-28-h200x4-channels), for twice the FIFOs.
const WIDE_MULTIPROCESSORS: usize = 128;
const WIDE_CHANNELS: usize = 128;

/// Bytes of a FIFO slot: OXCCL_GPU_SLOT_BYTES in whole 128-byte lines.
fn slot_bytes(config: &crate::bootstrap::Config) -> usize {
    config.gpu_slot_bytes.next_multiple_of(128)
}

/// Channels of the direct exchange with each of `nranks - 1` peers out of `max`, held to
/// [`DIRECT_MOST_CHANNELS`] in all: as many FIFOs as the ring's up to 64 channels.
fn direct_channels(max: usize, nranks: usize) -> usize {
    (max.min(DIRECT_MOST_CHANNELS) / nranks.saturating_sub(1).max(1)).max(1)
}

/// The most channels the direct exchange (sends and receives, alltoall, gather, scatter,
/// two-shot and recursive doubling) spreads over its peers. A send/recv kernel runs a
/// block for each channel of each other peer, both ways: 126 blocks for an alltoall of 4
/// ranks at 21 channels a peer, and 252 at 42 (from 128 channels), where
/// nccl-tests' alltoall fell to 0.74–0.85× NCCL's busbw at 32–128 MiB; held to 64 it
/// took 1.04–1.25× at 16–256 MiB again (4×H200, docs/results/2026-11-28-h200x4-channels).
/// The ring runs a block a channel.
const DIRECT_MOST_CHANNELS: usize = 64;

/// An out-of-place alltoall's `lanes` (a lane per peer, direction and channel, then as many
/// copying the rank's own block) on as many blocks as `most` channels take: channel c's
/// lane of each kind runs channel c + `most`'s after its own (and c + 2·`most`'s after
/// that), the copy lanes likewise, where in place (no copy lanes) a lane per channel both
/// sends and receives. Both ends of a connection put it at the same place in their lanes'
/// orders (ascending channels), so no lane waits for a message queued behind another.
fn two_channels_a_lane(lanes: Vec<Vec<algo::Step>>, most: usize) -> Vec<Vec<algo::Step>> {
    // Keyed (kind, peer, channel), the copy lanes numbered in their order.
    let mut copies = 0..;
    let mut merged: std::collections::BTreeMap<(u8, usize, usize), Vec<algo::Step>> = Default::default();
    for lane in lanes {
        let (kind, peer, channel) = match lane.first() {
            Some(algo::Step::Send { to, .. }) => (0, to.peer, to.channel),
            Some(algo::Step::Recv { from, .. }) => (1, from.peer, from.channel),
            _ => (2, 0, copies.next().expect("an unbounded count")),
        };
        merged.entry((kind, peer, channel % most)).or_default().extend(lane);
    }
    merged.into_values().collect()
}

/// Mapped host ints: [0] the abort flag; [4..9] the kernels' status (`status::WORDS`:
/// code, lane, step, kernel, peer); [12] a 1, the source of the copies that raise this
/// rank's `gone` flag in its peers' memory; [14..16] a u64, the last staged operation the
/// host finished; [16..18] a u64, the last staged operation whose kernel its stream reached.
const ABORT_WORD: usize = 0;
const STATUS_WORD: usize = 4;
const ONE_WORD: usize = 12;
const DONE_WORD: usize = 14;
const REACHED_WORD: usize = 16;
const FLAG_WORDS: usize = 18;

/// A host wait's pause between polls of the GPU: spin (the GPU answers within
/// microseconds), then sleep 20 µs a round.
#[derive(Default)]
struct Pause {
    spins: u32,
}

impl Pause {
    fn pause(&mut self) {
        self.spins += 1;
        if self.spins < 1000 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Why a kernel stopped (`status::*`), the peer it waited for, and where, in words.
struct KernelStop {
    code: i32,
    peer: u32,
    place: String,
}

/// The GPU backend of a communicator whose collectives run on one GPU per rank.
pub(crate) struct GpuBackend {
    inner: Arc<Inner>,
    watcher: Option<std::thread::JoinHandle<()>>,
    // Kept by Drop's teardown until the peers are met (the bootstrap lives as long).
    core: Arc<Core>,
    /// Ranks on other hosts: every operation staged through host memory (staged.rs).
    staged: Option<Staged>,
}

struct Inner {
    device: Device,
    arch: &'static str,
    toolchain: Toolchain,
    origin: Origin,
    geometry: Geometry,
    max_channels: usize,
    min_channels: usize,
    /// The channels of a send/recv transfer along the ring, as the ranks agreed (the fewest
    /// of each rank's [`neighbour_channels`]), at most `max_channels`; 0: off.
    neighbour_channels: usize,
    timeout: Duration,
    /// The direct (LL, one hop) path for small collectives, when enabled.
    direct: std::sync::OnceLock<Direct>,
    /// The LL path for small sends and receives, when enabled.
    p2p_ll: std::sync::OnceLock<P2pLl>,
    /// This rank's `gone` flags (`DevWatch::gone`), set at init.
    gone: std::sync::OnceLock<u64>,
    /// Across hosts: the `gone` flags themselves, in mapped host memory that the watcher
    /// raises for peers that left.
    departures: std::sync::OnceLock<MappedHost>,
    /// What NCCL_PROTO allows, per collective (read once: launches only look it up).
    protocols: Protocols,
    /// The executor kernel's timeline (OXCCL_KERNEL_TRACE), if kept.
    timeline: Option<timeline::KernelTimeline>,
    /// NCCL_ALGO and the cost model, for the choice of algorithm across hosts.
    tuner: oxccl_tuning::Tuner,
    state: Mutex<State>,
    flags: MappedHost,
    stop: AtomicBool,
    /// The first failure seen (kernel status, failed peer, abort).
    failure: Mutex<Option<Error>>,
}

/// The protocols NCCL_PROTO allows each collective, as bits per `Collective::ALL` index,
/// and what NCCL_ALGO leaves each on one host: whether the direct kernel may take small
/// calls, and which algorithm takes the others.
struct Protocols {
    per_collective: [u8; Collective::ALL.len()],
    direct: [bool; Collective::ALL.len()],
    one_host: [std::result::Result<Algorithm, String>; Collective::ALL.len()],
}

impl Protocols {
    const SIMPLE: u8 = 1;
    const LL: u8 = 2;
    /// LL128 lines in the one-hop kernel.
    const LL128: u8 = 4;

    fn new(selection: &oxccl_tuning::Selection) -> Protocols {
        use oxccl_tuning::Protocol;
        let per_collective = Collective::ALL.map(|c| {
            (if selection.allows_protocol(c, Protocol::Simple) { Self::SIMPLE } else { 0 })
                | (if selection.allows_protocol(c, Protocol::Ll) { Self::LL } else { 0 })
                | (if selection.allows_protocol(c, Protocol::Ll128) { Self::LL128 } else { 0 })
        });
        let direct = Collective::ALL.map(|c| selection.allows_algorithm(c, Algorithm::Direct));
        let one_host = Collective::ALL.map(|c| {
            let doubling = c == Collective::AllReduce;
            if selection.allows_algorithm(c, Algorithm::Ring) {
                Ok(Algorithm::Ring)
            } else if selection.allows_algorithm(c, Algorithm::Direct) {
                Ok(Algorithm::Direct)
            } else if doubling && selection.allows_algorithm(c, Algorithm::Doubling) {
                Ok(Algorithm::Doubling)
            } else {
                Err(format!(
                    "NCCL_ALGO leaves {} no algorithm the GPU kernels run between ranks of one host (ring, direct{}); across hosts the tree runs too",
                    c.name(),
                    if doubling { ", doubling" } else { "" }
                ))
            }
        });
        Protocols { per_collective, direct, one_host }
    }

    fn allows(&self, collective: Collective, protocol: u8) -> bool {
        self.per_collective[Self::index(collective)] & protocol != 0
    }

    /// Whether a call of `collective` with a message of `bytes` runs LL between the GPUs of
    /// one host: where NCCL_PROTO leaves it LL alone, or up to OXCCL_GPU_LL_BYTES (`limit`;
    /// 0: never) where it allows both. With `bytes` 0: whether any call of it can.
    fn ll_on_one_host(&self, collective: Collective, bytes: usize, limit: usize) -> bool {
        self.allows(collective, Self::LL) && (!self.allows(collective, Self::SIMPLE) || (limit > 0 && bytes <= limit))
    }

    /// Whether NCCL_ALGO lets the direct kernel take `collective`'s small calls.
    fn allows_direct(&self, collective: Collective) -> bool {
        self.direct[Self::index(collective)]
    }

    /// What runs `collective` on one host: the ring, or what NCCL_ALGO leaves it instead
    /// (the direct exchange, recursive doubling); an error where it leaves nothing the
    /// kernels run there, never another algorithm in its place.
    fn on_one_host(&self, collective: Collective) -> Result<Algorithm> {
        self.one_host[Self::index(collective)].clone().map_err(Error::invalid)
    }

    fn index(collective: Collective) -> usize {
        Collective::ALL.iter().position(|&c| c == collective).expect("every collective is in Collective::ALL")
    }
}

/// The direct kernel's inboxes (set up at init, see `DevDirect`).
struct Direct {
    /// The most bytes a rank receives in one direct launch (all peers together).
    limit: usize,
    inbox: u64,
    /// Every rank's inbox address, as this GPU reaches it (device memory).
    table: u64,
    /// Where the rows of each protocol, the second shot's and the acknowledgements lie in
    /// every inbox. LL128 rows stand apart from the LL rows: a line of LL carries its flag
    /// where LL128 carries data, so an LL launch reading a half an LL128 launch wrote before
    /// could take data for its flag.
    layout: init::DirectLayout,
    /// Calls in which a rank receives this many bytes or more go over LL128 lines:
    /// OXCCL_GPU_DIRECT_LL128_BYTES where every rank's GPU stores whole lines into every
    /// other's (init agrees it), else usize::MAX.
    ll128_bytes: usize,
    /// Launches so far (the same on every rank: all call the same collectives in the same
    /// order).
    launches: AtomicU64,
}

impl Direct {
    /// The next launch's number and flag: flags run 1..=u32::MAX and around, never 0
    /// (inboxes start zeroed), so a line of an earlier launch of the same half never
    /// carries this launch's flag (until 2^32 launches later).
    fn next_launch(&self) -> (u64, u32) {
        let launch = self.launches.fetch_add(1, Ordering::Relaxed) + 1;
        (launch, ((launch - 1) % u32::MAX as u64 + 1) as u32)
    }
}

/// The point-to-point LL kernel's inboxes (set up at init, see `DevP2p`).
struct P2pLl {
    /// The largest message it carries (NCCL_P2P_LL_THRESHOLD).
    limit: usize,
    inbox: u64,
    table: u64,
    cap_lines: u32,
    ack_offset: u64,
    count_offset: u64,
    rank: u32,
    nranks: u32,
}

#[derive(Default)]
struct State {
    conns: Connections,
    plans: FxHashMap<CacheKey, Arc<Plan>>,
    /// Where plans live: allocated in blocks, never freed while a kernel may read them
    /// (freeing GPU memory synchronizes the device, and a rank sharing the GPU may be
    /// waiting in a kernel for this one).
    arena: Arena,
    /// The last launch on each stream, to wait for before freeing memory.
    last: FxHashMap<usize, Event>,
    /// Arenas whose plans were dropped from the cache, each with the last launch on each
    /// stream before then: reused once those have run.
    old_arenas: Vec<(Arena, Vec<Event>)>,
    /// In-place alltoall's copy of the input, and copies outgrown.
    scratch: Option<DeviceMemory>,
    retired: Vec<DeviceMemory>,
    /// This rank's `gone` flags when they are not an inbox (staged: no peer reaches them).
    gone: Option<DeviceMemory>,
}

struct Loaded {
    run: Function,
    /// The executor's LL entry, for plans of LL moves and local copies alone.
    run_ll: Function,
    direct: Function,
    p2p: Function,
    divide: Function,
    wait_host: Function,
    _module: Module,
    /// Keeps the primary context (and so the module) alive after the communicators go.
    _device: Device,
}

/// What a cached plan is for.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum CacheKey {
    Collective(PlanKey),
    /// An alltoall whose send and recv are one buffer, on one host
    /// ([`algo::all_to_all_in_place`]'s lanes).
    AllToAllInPlace(PlanKey),
    /// A group of sends and receives, each address an offset from the group's lowest send
    /// or receive address (the launch's bases).
    PointToPoint(Vec<P2p>),
    /// A group's messages that go over LL (`p2p_ll_bytes` at most each), addresses as
    /// above; `one_base`: sends and receives measured from one base (a group in place when
    /// each send to a peer and the receive from it also share their offset).
    PointToPointLl { ops: Vec<P2p>, one_base: bool },
}

impl CacheKey {
    /// A point-to-point key's transfers (none for a collective's).
    fn transfers(&self) -> &[P2p] {
        match self {
            CacheKey::Collective(_) | CacheKey::AllToAllInPlace(_) => &[],
            CacheKey::PointToPoint(ops) | CacheKey::PointToPointLl { ops, .. } => ops,
        }
    }
}

/// A plan in GPU memory.
enum Plan {
    /// For the executor kernel: the connection table, the lanes' bounds, then the steps;
    /// how many messages each of its network ends carries per launch (announced to the
    /// proxy before each launch); and each lane's steps (a lane a block).
    /// `labels`: what the traced lanes' first steps do, for the kernel timeline (empty
    /// where none is kept). `ll_entry`: the `DevArgs::ll` bits of the launches that the
    /// kernel's LL entry can run this plan in ([`ll_entry_fits`]), as a set: bit `1 << ll`;
    /// empty when the plan's image is larger than the entry's parameters hold
    /// ([`ll_args::IMAGE_BYTES`]). `image`: the uploaded bytes (connections at 0, then bounds
    /// and steps at their addresses' offsets from `conns`), for the LL entry's parameters.
    Steps { conns: u64, bounds: u64, steps: u64, net: Vec<(algo::Link, Direction, u64)>, lane_steps: Vec<u32>, labels: timeline::Labels, ll_entry: u8, image: Box<[u8]> },
    /// For the point-to-point LL kernel: its lanes (`DevP2pLane`), then their messages.
    Messages { lanes: u32, at: u64, msgs: u64 },
}

// SAFETY: Inner's raw CUDA handles are used with its context bound, from any thread.
unsafe impl Send for Inner {}
// SAFETY: as above; its mutable state is behind the `state` mutex and atomics.
unsafe impl Sync for Inner {}

impl GpuBackend {
    pub fn rank(&self) -> usize {
        self.core.rank
    }

    pub fn nranks(&self) -> usize {
        self.core.nranks
    }

    /// The GPU this rank runs on.
    pub fn device(&self) -> usize {
        self.inner.device.ordinal as usize
    }

    /// Makes this GPU current on the calling thread (for calls into other CUDA libraries).
    pub fn bind(&self) -> Result<()> {
        self.inner.device.bind()
    }

    /// Enqueues a collective whose arguments the communicator checked (`checked`) on
    /// `stream` and returns; see [`Communicator::run`] for the buffer sizes and in-place
    /// conventions, which are NCCL's.
    ///
    /// # Safety
    /// `send` and `recv` must be device addresses this GPU can access (or host memory mapped
    /// into it), sized for the collective, not touched by anything else until the stream
    /// passes this point; `stream` must be a stream of this GPU's primary context, or null.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn enqueue(&self, collective: Collective, send: u64, recv: u64, count: usize, dtype: DataType, op: ReduceOp, root: usize, checked: crate::call::Checked, stream: CUstream) -> Result<()> {
        let (n, rank) = (self.nranks(), self.rank());
        let esize = dtype.size();
        let (send_bytes, recv_bytes) = (checked.send_bytes, checked.recv_bytes);
        if count == 0 {
            return Ok(());
        }
        let inner = &self.inner;
        inner.device.bind()?;
        let route = self.route(collective, count, dtype, root)?;
        if let (Route::Staged, Some(staged)) = (route, &self.staged) {
            // SAFETY: the caller's contract; the sizes are the collective's.
            unsafe { staged.collective(inner, collective, send, recv, send_bytes, recv_bytes, count, dtype, op, root, stream)? };
            return self.mark(stream);
        }
        let reduces = collective.reduces();
        let spec = if reduces { Specialization { dtype, op: op.combine() } } else { Specialization { dtype: DataType::Uint8, op: oxccl_kernels::Combine::Sum } };
        let loaded = inner.loaded(spec)?;
        let scale = if reduces { op.input_scale(dtype, n) } else { None };
        // In place, alltoall reads every block it overwrites. On one host its lanes send
        // each chunk before they receive over it: the Simple exchange's
        // (algo::all_to_all_in_place) and the LL group's (p2p's exchange lanes); across
        // hosts, where proxies complete a peer's receives as a group, it runs from a copy
        // of the input.
        // (The LL group, Route::Exchange, runs on one host only.)
        let in_place = collective == Collective::AllToAll && send == recv;
        let ordered = in_place && (matches!(route, Route::Exchange) || matches!(route, Route::Schedule { algorithm: Algorithm::Direct, .. }) && !inner.across_hosts());
        let send = if in_place && !ordered { inner.scratch_copy(send, send_bytes, stream)? } else { send };
        match route {
            Route::Direct { ll128 } => {
                let mode = route::direct_mode(collective).ok_or_else(|| Error::Internal(format!("{} routed to the direct kernel", collective.name())))?;
                // SAFETY: the caller's buffers and stream (this function's contract).
                unsafe { inner.launch_direct(&loaded, mode, send, recv, count * esize, root, rank, n, scale, ll128, stream)? };
            }
            // SAFETY: as above; the route holds count to a multiple of the ranks, so the blocks
            // tile both buffers.
            Route::TwoShot => unsafe { inner.launch_direct(&loaded, direct::TWO_SHOT, send, recv, count / n * esize, root, rank, n, scale, true, stream)? },
            // SAFETY: as above; the exchange's transfers are within the buffers.
            Route::Exchange => unsafe { self.launch_group(&p2p::exchange_ops(collective, send, recv, count * esize, root, rank, n), stream)? },
            Route::Schedule { shape, algorithm, ll } => {
                let plan = self.plan(PlanKey { collective, count, esize, root }, shape, algorithm, ordered)?;
                self.announce(&plan, algorithm.sends_independently(collective, n, ordered), ll);
                // SAFETY: as above; the plan was checked against buffers of these sizes.
                unsafe { inner.launch(&loaded, &plan, send, recv, scale, ll, stream, &|| format!("{} {} B", collective.name(), count * esize))? };
            }
            Route::Staged => return Err(Error::Internal("a call routed through host memory on a communicator with no staging".into())),
        }
        if reduces && op.needs_final_division(dtype) && recv_bytes > 0 {
            let (mut buf, mut elements, mut divisor) = (recv, (recv_bytes / esize) as u64, n as u64);
            let blocks = elements.div_ceil(256).clamp(1, 4096) as u32;
            // SAFETY: ox_divide takes (T*, u64, u64); the output holds `elements` elements.
            unsafe { loaded.divide.launch(blocks, 256, stream, &mut [(&mut buf as *mut u64).cast(), (&mut elements as *mut u64).cast(), (&mut divisor as *mut u64).cast()])? };
        }
        self.mark(stream)
    }

    /// Waits until `stream` has run everything enqueued on it so far; an error if a kernel
    /// stopped (abort, a failed peer, a timeout) or the wait outlasts the collective
    /// timeout (the kernels are then told to stop).
    ///
    /// # Safety
    /// `stream` must be a stream of this GPU's primary context, or null.
    pub unsafe fn synchronize(&self, stream: CUstream) -> Result<()> {
        self.inner.device.bind()?;
        // SAFETY: the caller's stream of this context (this function's contract).
        let event = unsafe { Event::record(stream)? };
        let deadline = Instant::now() + self.inner.timeout;
        let mut pause = Pause::default();
        loop {
            if event.done()? {
                return self.async_error().map_or(Ok(()), Err);
            }
            if let Some(e) = self.inner.failure.lock().clone() {
                // The kernels were told to stop; wait (briefly) for them to leave.
                self.inner.drain(Duration::from_secs(5));
                return Err(e);
            }
            if Instant::now() >= deadline {
                let phase = format!("waiting for GPU {}'s stream", self.inner.device.ordinal);
                self.inner.fail(Error::Timeout { phase: phase.clone(), waited: self.inner.timeout });
                self.inner.drain(Duration::from_secs(5));
                // Where the kernels were waiting, now that the abort stopped them.
                let place = self.inner.kernel_stop().map(|stop| format!(" ({})", stop.place)).unwrap_or_default();
                return Err(Error::Timeout { phase: phase + &place, waited: self.inner.timeout });
            }
            pause.pause();
        }
    }

    /// [`GpuBackend::synchronize`] on a stream made by [`GpuBackend::stream`].
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live stream oxccl created (on a GPU's primary context; one of another
        // GPU is refused by the driver, not misused).
        unsafe { self.synchronize(stream.raw()) }
    }

    /// The communicator's error, if any, never blocking: a kernel that stopped, a failed
    /// peer, an abort.
    pub fn async_error(&self) -> Option<Error> {
        if let Some(e) = self.inner.failure.lock().clone() {
            return Some(e);
        }
        if let Some(stop) = self.inner.kernel_stop() {
            let e = self.inner.stop_error(&stop).or_else(|| self.core.error()).unwrap_or(Error::Aborted { reason: format!("a GPU kernel stopped ({})", stop.place) });
            self.inner.fail(e.clone());
            return Some(e);
        }
        if let Some(staged) = &self.staged {
            return staged.error();
        }
        None
    }

    /// Stops every kernel of this communicator and fails its waits with `e`; returns at
    /// once.
    pub fn fail(&self, e: Error) {
        self.inner.fail(e);
    }

    /// Tells the kernels to stop (a revocation: the communicator's error says why).
    pub fn stop_kernels(&self) {
        let reason = self.core.boot.revoked().unwrap_or_default();
        self.inner.fail(Error::Aborted { reason });
    }

    /// Waits for the staged work (nothing else runs off the streams): the streams are the
    /// caller's to wait on.
    pub fn finalize(&self) -> Result<()> {
        self.async_error().map_or(Ok(()), Err)
    }

    /// Suspends the communicator (ncclCommSuspend): waits until every stream's launches
    /// of this communicator have run, then refuses collectives and send/recv with
    /// `InvalidUsage` until [`GpuBackend::resume`]. With `release_memory`
    /// (`NCCL_SUSPEND_MEM`) it also frees what is made again on demand: the uploaded plans
    /// (their arena) and the in-place alltoall scratch copy. The FIFOs and the direct
    /// inboxes stay: each is connected with a peer. Freeing GPU memory waits for the whole
    /// GPU, as cudaFree does: do not suspend while a rank sharing this GPU waits in a
    /// collective for a launch of this one.
    pub fn suspend(&self, release_memory: bool) -> Result<()> {
        if !self.inner.drain(self.inner.timeout) {
            let e = Error::Timeout { phase: "suspending: waiting for the GPU's launches".into(), waited: self.inner.timeout };
            self.inner.fail(e.clone());
            return Err(e);
        }
        if release_memory {
            let inner = &self.inner;
            inner.device.bind()?;
            let mut state = inner.state.lock();
            state.plans.clear();
            let freed = (std::mem::take(&mut state.arena), std::mem::take(&mut state.old_arenas), state.scratch.take(), std::mem::take(&mut state.retired));
            drop(freed);
        }
        Ok(())
    }

    /// Resumes a suspended communicator (ncclCommResume); the plans' first block of GPU
    /// memory is allocated again here, not in the next collective.
    pub fn resume(&self) -> Result<()> {
        self.inner.device.bind()?;
        self.inner.state.lock().arena.reserve()
    }

    /// What this communicator's GPU memory holds now (ncclCommMemStats): releasable (plans,
    /// scratch) and persistent (connections, inboxes) bytes.
    pub fn memory_stats(&self) -> MemoryStats {
        let state = self.inner.state.lock();
        let scratch: usize = state.scratch.iter().chain(&state.retired).map(|m| m.bytes).sum();
        let suspended = self.core.suspended.load(Ordering::Acquire);
        MemoryStats { releasable: (state.arena.bytes() + state.old_arenas.iter().map(|(a, _)| a.bytes()).sum::<usize>() + scratch) as u64, persistent: state.conns.bytes() as u64, suspended }
    }

    /// Device memory for tests and benchmarks, freed on drop.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.inner.device.bind()?;
        Ok(DeviceBuffer { memory: DeviceMemory::zeroed(bytes)?, inner: self.inner.clone() })
    }

    /// A new stream of this GPU.
    pub fn stream(&self) -> Result<Stream> {
        self.inner.device.bind()?;
        Stream::create()
    }

    /// The plan of `algorithm`'s schedule for `shape` (the call `key` describes, routed to
    /// the executor kernel), cached by `key`.
    fn plan(&self, key: PlanKey, shape: Shape, algorithm: Algorithm, all_to_all_in_place: bool) -> Result<Arc<Plan>> {
        let cache_key = if all_to_all_in_place { CacheKey::AllToAllInPlace(key) } else { CacheKey::Collective(key) };
        if let Some(p) = self.inner.cached(&cache_key) {
            return Ok(p);
        }
        let lanes = algo::plan_call(shape, algorithm, self.rank(), all_to_all_in_place).map_err(|e| Error::invalid(e.to_string()))?;
        let mut lanes: Vec<_> = lanes.into_iter().filter(|l| !l.is_empty()).collect();
        if key.collective == Collective::AllToAll && !all_to_all_in_place && algorithm == Algorithm::Direct && shape.channels > DIRECT_MOST_CHANNELS {
            lanes = two_channels_a_lane(lanes, DIRECT_MOST_CHANNELS);
        }
        if key.collective == Collective::Broadcast {
            // The root's copy into its own output ends each ring lane; a block of its own
            // runs it beside the sends. Out of place it touches nothing the sends do; in
            // place it copies a slice onto itself, which the kernel skips.
            let copies: Vec<Vec<algo::Step>> = lanes.iter_mut().filter(|l| matches!(l.last(), Some(algo::Step::Copy { .. }))).filter_map(|l| l.pop()).map(|s| vec![s]).collect();
            lanes.retain(|l| !l.is_empty());
            lanes.extend(copies);
        }
        tracing::debug!(target: crate::log_target::COLL, "GPU plan {cache_key:?}: {} channel(s), {} lane(s)", shape.channels, lanes.len());
        self.upload(cache_key, &lanes, key.esize)
    }

    /// Encodes `lanes`, connects what they use, and uploads them into the arena (cached).
    fn upload(&self, key: CacheKey, lanes: &[Vec<algo::Step>], esize: usize) -> Result<Arc<Plan>> {
        let (inner, encoded_lanes) = (&self.inner, lanes);
        let encoded = encode::encode(lanes, esize, inner.geometry.slot_bytes)?;
        let mut state = inner.state.lock();
        state.conns.ensure(&encoded.ends, &self.setup())?;
        let table = state.conns.table(&encoded.ends)?;
        // One upload: connections, bounds, steps (each part 16-byte aligned).
        let conn_bytes = std::mem::size_of_val(&table[..]);
        let bounds_bytes = (encoded.bounds.len() * 4).next_multiple_of(16);
        let mut image = Vec::with_capacity(conn_bytes + bounds_bytes + std::mem::size_of_val(&encoded.steps[..]));
        image.extend_from_slice(bytemuck::cast_slice::<DevConn, u8>(&table));
        image.extend_from_slice(bytemuck::cast_slice::<u32, u8>(&encoded.bounds));
        image.resize(conn_bytes + bounds_bytes, 0);
        image.extend_from_slice(bytemuck::cast_slice::<DevStep, u8>(&encoded.steps));
        let lane_steps = encoded.lane_steps();
        let mut net: Vec<(algo::Link, Direction, u64)> = Vec::new();
        for step in encoded_lanes.iter().flatten() {
            let ends = step.receives().map(End::Recv).into_iter().chain(step.sends().map(End::Send));
            for end in ends.filter(|e| state.conns.is_net(e)) {
                match net.iter_mut().find(|(l, d, _)| *l == end.link() && *d == end.direction()) {
                    Some(entry) => entry.2 += 1,
                    None => net.push((end.link(), end.direction(), 1)),
                }
            }
        }
        let labels = if inner.timeline.is_some() { timeline::labels(encoded_lanes, |end| state.conns.is_net(end)) } else { Arc::from(Vec::new()) };
        let small = image.len() <= ll_args::IMAGE_BYTES;
        let ll_entry = [launch_bits::NET_LL, launch_bits::PEER_LL].into_iter().filter(|&ll| small && ll_entry_fits(&encoded.steps, &table, ll)).fold(0, |set, ll| set | 1 << ll);
        let kept = if ll_entry != 0 { image.clone().into_boxed_slice() } else { Box::default() };
        inner.store(state, key, &image, |base| Plan::Steps { conns: base, bounds: base + conn_bytes as u64, steps: base + (conn_bytes + bounds_bytes) as u64, net, lane_steps, labels, ll_entry, image: kept })
    }

    /// Tells the proxy how many messages `plan`'s launch moves over each network end:
    /// `independent` when every sender sends without waiting for its receiver (the proxy
    /// may then post the receives together); `ll` when they run LL.
    fn announce(&self, plan: &Plan, independent: bool, ll: bool) {
        if let Plan::Steps { net, .. } = plan {
            for &(link, direction, messages) in net {
                self.core.net.announce(link, direction, messages, independent, ll);
            }
        }
    }

    /// Remembers `stream`'s last launch (to wait for before freeing memory).
    fn mark(&self, stream: CUstream) -> Result<()> {
        let mut state = self.inner.state.lock();
        match state.last.get(&(stream as usize)) {
            // SAFETY: the caller's stream of this context.
            Some(event) => unsafe { event.rerecord(stream) },
            None => {
                // SAFETY: as above.
                let event = unsafe { Event::record(stream)? };
                state.last.insert(stream as usize, event);
                Ok(())
            }
        }
    }
}

/// Whether every launch of `events` has run by `until` (polled until then; a failed one
/// counts: nothing of it runs any more).
fn ran_by<'a>(events: impl IntoIterator<Item = &'a Event>, until: Instant) -> bool {
    events.into_iter().all(|e| e.done_by(until).unwrap_or(true))
}

impl Inner {
    /// The plan cached for `key`, if any.
    fn cached(&self, key: &CacheKey) -> Option<Arc<Plan>> {
        self.state.lock().plans.get(key).cloned()
    }

    /// The plan cached for `key`, else the one `build` makes of it (and caches).
    fn cached_or(&self, key: CacheKey, build: impl FnOnce(CacheKey) -> Result<Arc<Plan>>) -> Result<Arc<Plan>> {
        match self.cached(&key) {
            Some(plan) => Ok(plan),
            None => build(key),
        }
    }

    /// Places `image` in the arena and caches the plan `make` describes from its address.
    /// Past [`MAX_PLANS`] cached plans, the cache starts over in another arena: one whose
    /// launches have all run, else a new one (plans in flight must outlive their kernels);
    /// past [`MAX_OLD_ARENAS`] waiting, it first waits for every stream.
    fn store<'a>(&'a self, mut state: parking_lot::MutexGuard<'a, State>, key: CacheKey, image: &[u8], make: impl FnOnce(u64) -> Plan) -> Result<Arc<Plan>> {
        if state.plans.len() >= MAX_PLANS {
            // A set-aside arena whose launches have all run, asked once (each is a driver
            // query per stream); none and no room for another: wait for every stream.
            let reusable = |state: &State| state.old_arenas.iter().position(|(_, e)| ran_by(e, Instant::now()));
            let mut reuse = reusable(&state);
            if reuse.is_none() && state.old_arenas.len() >= MAX_OLD_ARENAS {
                drop(state);
                self.drain(self.timeout);
                state = self.state.lock();
                reuse = reusable(&state);
            }
            let state = &mut *state;
            state.plans.clear();
            // The launches so far are what the arena's plans wait for; the next launch on
            // each stream records an event of its own.
            let launched = std::mem::take(&mut state.last).into_values().collect();
            let next = match reuse {
                Some(i) => {
                    let mut arena = state.old_arenas.swap_remove(i).0;
                    arena.reset();
                    arena
                }
                None => Arena::default(),
            };
            let old = std::mem::replace(&mut state.arena, next);
            state.old_arenas.push((old, launched));
            tracing::debug!(target: crate::log_target::COLL, "{MAX_PLANS} GPU plans cached: starting over in another arena ({} kept)", state.old_arenas.len());
        }
        let plan = Arc::new(make(state.arena.place(image)?));
        state.plans.insert(key, plan.clone());
        Ok(plan)
    }

    /// Publishes that the host finished staged operation `seq`.
    fn set_host_done(&self, seq: u64) {
        self.flags.set_u64(DONE_WORD, seq);
    }

    /// The last staged operation whose kernel its stream reached.
    fn stream_reached(&self) -> u64 {
        self.flags.get_u64(REACHED_WORD)
    }

    /// What every launch's waits watch: the abort flag, the status word, the peers'
    /// `gone` flags, the wait limit.
    fn watch(&self) -> DevWatch {
        DevWatch {
            abort: self.flags.device + (ABORT_WORD * 4) as u64,
            status: self.flags.device + (STATUS_WORD * 4) as u64,
            gone: self.gone.get().copied().unwrap_or(0),
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
        }
    }

    /// Raises this rank's `gone` flag in every peer's GPU memory: their waits on this rank
    /// then stop (`status::PEER_LEFT`) instead of lasting until the collective timeout.
    /// Only once this rank's kernels have all ended: what they sent has landed, so a peer
    /// still waiting for this rank waits for something it will never get. Whether the
    /// flags landed within 5 s (else their copies may still be pending).
    fn say_gone(&self, rank: usize) -> Result<bool> {
        self.device.bind()?;
        let state = self.state.lock();
        // Peers in this process that already freed their memory (they failed) are skipped.
        state.conns.with_live_peer_inboxes(Inbox::Gone, |inboxes| {
            let slots: Vec<u64> = inboxes.iter().map(|gone| gone + 4 * rank as u64).collect();
            // SAFETY: this rank's slot in each peer's `gone` array (u32 per rank): opened
            // at init and kept open until this communicator's memory is freed, after this;
            // a peer's in this process stays allocated until the copies landed or timed out.
            unsafe { self.flags.copy_int_to_devices(ONE_WORD, &slots, Duration::from_secs(5)) }
        })
    }

    /// Why and where a kernel stopped, if one did.
    fn kernel_stop(&self) -> Option<KernelStop> {
        let code = self.flags.get(STATUS_WORD);
        if code == 0 {
            return None;
        }
        let [lane, step, kernel, peer] = [1, 2, 3, 4].map(|i| self.flags.get(STATUS_WORD + i));
        let place = match kernel {
            status::KERNEL_DIRECT => format!("the direct kernel, block {lane}, waiting on rank {peer}"),
            status::KERNEL_P2P_SEND => format!("the send/recv LL kernel, sending to rank {peer}, message {step} of the launch"),
            status::KERNEL_P2P_RECV => format!("the send/recv LL kernel, receiving from rank {peer}, message {step} of the launch"),
            status::KERNEL_WAIT_HOST => "the stream's wait for the host's part of a staged operation".to_string(),
            _ => format!("the executor kernel, lane {lane}, step {step}, waiting on rank {peer}"),
        };
        Some(KernelStop { code, peer: peer as u32, place })
    }

    /// The error a kernel's stop means by itself (a timeout, a peer that left); `None` for
    /// an abort, whose cause the communicator knows.
    fn stop_error(&self, stop: &KernelStop) -> Option<Error> {
        let KernelStop { code, peer, place } = stop;
        match *code {
            status::TIMED_OUT => Some(Error::Timeout { phase: format!("a GPU kernel's wait ({place})"), waited: self.timeout }),
            status::MISPLANNED => Some(Error::Internal(format!("the executor's LL entry was launched over a plan with a step it cannot move ({place})"))),
            status::PEER_LEFT => Some(Error::PeerFailed {
                rank: *peer,
                reason: format!("rank {peer} left the job (destroyed its communicator) while this rank still waited for it in a GPU kernel ({place}): the ranks did not make the same calls"),
            }),
            _ => None,
        }
    }

    fn fail(&self, e: Error) {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            *failure = Some(e);
        }
        self.flags.set(ABORT_WORD, 1);
    }

    /// Channels of one send or receive on the Simple FIFOs: never fewer than a collective
    /// of that size has, more for messages up to a few hundred KiB.
    fn p2p_channels(&self, bytes: usize) -> usize {
        channel_count(bytes, self.min_channels, self.max_channels, Some((P2P_BYTES_PER_CHANNEL, P2P_SPREAD_CHANNELS)))
    }

    /// Channels of the direct exchange with each peer: as many FIFOs in all as the ring's.
    fn direct_channels(&self, nranks: usize) -> usize {
        direct_channels(self.max_channels, nranks)
    }

    /// Whether this communicator's ranks span hosts (its kernels then reach some peers
    /// through the network, and init made the departure flags for them).
    fn across_hosts(&self) -> bool {
        self.departures.get().is_some()
    }

    /// Waits up to `limit` for every stream's last launch; past it, raises the abort flag
    /// and waits up to 5 s more. Whether everything finished.
    fn drain(&self, limit: Duration) -> bool {
        let _ = self.device.bind();
        let state = self.state.lock();
        let all_done = |until: Instant| ran_by(state.last.values().chain(state.old_arenas.iter().flat_map(|(_, e)| e)), until);
        if all_done(Instant::now() + limit) {
            return true;
        }
        self.flags.set(ABORT_WORD, 1);
        all_done(Instant::now() + Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An out-of-place alltoall of 2 ranks on 128 channels runs on as many blocks as on 64:
    /// each step once, every connection end in one lane, each lane's connections in
    /// ascending order of channel (both ends alike), its copies split as before.
    #[test]
    fn alltoall_lanes_take_two_channels_each() {
        let shape = algo::Shape { collective: Collective::AllToAll, count: 1 << 20, nranks: 2, root: 0, chunk: 4096, channels: 128, per_host: 2 };
        for rank in 0..2 {
            let lanes = algo::plan_call(shape, Algorithm::Direct, rank, false).unwrap();
            assert_eq!(lanes.len(), 3 * 128);
            let merged = two_channels_a_lane(lanes.clone(), 64);
            assert_eq!(merged.len(), 3 * 64);
            let mut before: Vec<String> = lanes.iter().flatten().map(|s| format!("{s:?}")).collect();
            let mut after: Vec<String> = merged.iter().flatten().map(|s| format!("{s:?}")).collect();
            before.sort();
            after.sort();
            assert_eq!(before, after, "each step once");
            let mut owner = std::collections::HashMap::new();
            for (i, lane) in merged.iter().enumerate() {
                let links: Vec<algo::Link> = lane.iter().filter_map(|s| s.sends().or(s.receives())).collect();
                assert!(links.windows(2).all(|w| w[0].channel <= w[1].channel), "lane {i}: channels out of order");
                assert!(links.iter().all(|l| l.channel % 64 == links[0].channel % 64), "lane {i}: channels c and c + 64 only");
                for s in lane {
                    if let Some(end) = s.sends().map(|l| (true, l)).or(s.receives().map(|l| (false, l))) {
                        assert_eq!(*owner.entry(end).or_insert(i), i, "{end:?} in two lanes");
                    }
                }
                let copies = lane.iter().filter(|s| matches!(s, algo::Step::Copy { .. })).count();
                assert!(copies == 0 || copies == lane.len(), "lane {i}: copies beside transfers");
            }
        }
    }

    fn protocols(algo: Option<&str>) -> Protocols {
        Protocols::new(&oxccl_tuning::Selection::parse(algo, None).unwrap())
    }

    /// On one host NCCL_ALGO gets what it names among the ring, the direct exchange and
    /// recursive doubling, keeps the direct kernel off small calls unless it allows the
    /// direct exchange, and an algorithm the kernels do not run there (the tree) is an
    /// error, not the ring in its place.
    #[test]
    fn nccl_algo_on_one_host_runs_what_it_names_or_refuses() {
        let unset = protocols(None);
        assert_eq!(unset.on_one_host(Collective::AllReduce).unwrap(), Algorithm::Ring);
        assert!(unset.allows_direct(Collective::AllReduce));
        let ring = protocols(Some("ring"));
        assert_eq!(ring.on_one_host(Collective::Broadcast).unwrap(), Algorithm::Ring);
        assert!(!ring.allows_direct(Collective::AllReduce), "NCCL_ALGO=ring keeps the direct kernel off");
        let direct = protocols(Some("direct"));
        assert_eq!(direct.on_one_host(Collective::AllGather).unwrap(), Algorithm::Direct);
        assert!(direct.allows_direct(Collective::AllGather));
        let doubling = protocols(Some("allreduce:doubling"));
        assert_eq!(doubling.on_one_host(Collective::AllReduce).unwrap(), Algorithm::Doubling);
        assert_eq!(doubling.on_one_host(Collective::Broadcast).unwrap(), Algorithm::Ring, "a collective NCCL_ALGO does not name keeps every algorithm");
        let tree = protocols(Some("tree"));
        for c in [Collective::AllReduce, Collective::Broadcast] {
            let e = tree.on_one_host(c).unwrap_err().to_string();
            assert!(e.contains("NCCL_ALGO leaves") && e.contains(c.name()), "{e}");
        }
        assert!(tree.on_one_host(Collective::AllReduce).unwrap_err().to_string().contains("doubling"));
    }

    /// LL schedules between the GPUs of a host take a channel per 32 KiB up to 32 (1 MiB
    /// in 32 lanes, as measured), Simple's count where that is more, and never more than
    /// the communicator agreed; sends and receives a channel per 16 KiB up to 16.
    #[test]
    fn channels_spread_small_messages_within_the_agreed_bounds() {
        let ll = Some((LL_BYTES_PER_CHANNEL, LL_SPREAD_CHANNELS));
        assert_eq!(channel_count(1 << 20, 1, 64, None), 16);
        assert_eq!(channel_count(1 << 20, 1, 64, ll), 32);
        assert_eq!(channel_count(512 << 10, 1, 64, ll), 16);
        assert_eq!(channel_count(1, 1, 64, ll), 1);
        assert_eq!(channel_count(4 << 20, 1, 64, ll), 64, "past 1 MiB Simple's count stands");
        assert_eq!(channel_count(1 << 20, 1, 24, ll), 24, "never past NCCL_MAX_NCHANNELS");
        assert_eq!(channel_count(64 << 10, 8, 64, ll), 8, "never under NCCL_MIN_NCHANNELS");
        assert_eq!(channel_count(256 << 10, 1, 64, Some((P2P_BYTES_PER_CHANNEL, P2P_SPREAD_CHANNELS))), 16);
    }

    /// NCCL_MAX_NCHANNELS unset: 128 channels for a rank with 128 multiprocessors or more
    /// to itself on one host (an H100 or H200 alone), else 64; as set, up to the
    /// multiprocessors; across hosts at most OXCCL_GPU_NET_CHANNELS. The direct exchange
    /// spreads over at most 64 channels in all, whatever the ring has.
    #[test]
    fn channels_by_default_follow_the_multiprocessors_a_rank_has() {
        let unset = crate::bootstrap::Config::defaults();
        assert_eq!(most_channels(&unset, false, 132), 128, "an H100 or H200 to itself");
        assert_eq!(most_channels(&unset, false, 108), 64, "an A100");
        assert_eq!(most_channels(&unset, false, 66), 64, "an H100 shared by two ranks");
        assert_eq!(most_channels(&unset, false, 40), 40, "never more blocks than multiprocessors");
        assert_eq!(most_channels(&unset, true, 132), unset.gpu_net_channels, "across hosts");
        let mut set = crate::bootstrap::Config::defaults();
        set.set("NCCL_MAX_NCHANNELS", "64").unwrap();
        assert_eq!(most_channels(&set, false, 132), 64, "as set");
        set.set("NCCL_MAX_NCHANNELS", "256").unwrap();
        assert_eq!(most_channels(&set, false, 132), 132, "above 64 up to the multiprocessors");
        assert_eq!([(128, 4), (64, 4), (128, 2), (128, 3), (8, 4), (1, 8)].map(|(max, n)| direct_channels(max, n)), [21, 21, 64, 32, 2, 1]);
    }

    /// Transfers along the ring take 64 channels by default only where a rank has a wide
    /// GPU to itself on one host; a set value rules everywhere (0: off).
    #[test]
    fn neighbour_channels_by_default_follow_the_multiprocessors_a_rank_has() {
        let unset = crate::bootstrap::Config::defaults();
        assert_eq!(neighbour_channels(&unset, false, 132), 64, "an H100 or H200 to itself");
        assert_eq!(neighbour_channels(&unset, false, 108), 0, "an A100");
        assert_eq!(neighbour_channels(&unset, false, 66), 0, "an H100 shared by two ranks");
        assert_eq!(neighbour_channels(&unset, true, 132), 0, "across hosts");
        let mut set = crate::bootstrap::Config::defaults();
        set.set("OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS", "0").unwrap();
        assert_eq!(neighbour_channels(&set, false, 132), 0, "off as set");
        set.set("OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS", "32").unwrap();
        assert_eq!(neighbour_channels(&set, false, 108), 32, "as set");
        assert_eq!(neighbour_channels(&set, true, 132), 0, "never across hosts");
        set.set("OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS", "128").unwrap();
        assert_eq!(neighbour_channels(&set, false, 132), NEIGHBOUR_MOST_CHANNELS, "held to 64");
        assert!(set.set("OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS", "many").unwrap_err().to_string().contains("OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS"));
    }
}
