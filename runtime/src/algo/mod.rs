//! Algorithms as data: each algorithm is a pure function from a [`Shape`] to a
//! [`Schedule`] — for every rank, lanes of [`Step`]s that an executor walks. No I/O, no
//! threads here: schedules are checked by [`validate`] and run for all ranks together by
//! [`simulate`] in unit tests, and the host executor and the CUDA kernels interpret the
//! same steps; they do not invent their own.
//!
//! | algorithm | collectives | module |
//! |---|---|---|
//! | ring | all_reduce, broadcast, reduce, all_gather, reduce_scatter | `ring` |
//! | double binary tree | all_reduce | `tree` |
//! | direct | every collective (all_reduce two-shot, or one shot for two ranks) | `direct` |
//! | recursive doubling | all_reduce | `doubling` |
//! | ring for all_to_all, gather, scatter | the direct schedule (below) | `direct` |
//! | point-to-point | grouped send/recv | [`point_to_point`] |
//!
//! Ring all_to_all, gather and scatter are the direct schedules: forwarding other ranks'
//! blocks around a ring only adds traffic (each block would cross up to n-1 links instead
//! of one), and NCCL itself runs these collectives as grouped sends and receives.
//!
//! # Lanes, channels and connections
//!
//! A schedule gives each rank a list of [`Lane`]s. A lane is an ordered list of steps; the
//! lanes of a rank progress independently (the host executor round-robins them, a kernel
//! gives each a warp group). A ring channel is one lane; a tree channel is two (reduce up,
//! broadcast down, as NCCL's `runTreeSplit` splits its threads), so that the next chunk
//! climbs while the last one descends; direct exchange has a lane per peer and direction,
//! so that no exchange waits behind another.
//!
//! A step that sends or receives names a [`Link`]: a peer and a channel. Messages from rank
//! a to rank b on one channel form one FIFO of bounded depth (the connection's slots), so
//! each end of a connection belongs to exactly one lane, and the receiver's sequence of
//! message sizes equals the sender's. Each message is at most `shape.chunk` elements — the
//! FIFO slot — and a step moves exactly one message: steps are coarse, one per chunk.
//! Channel numbers: ring channel c uses channel c; tree channel c uses 2c (tree 0) and
//! 2c+1 (tree 1); direct exchange and recursive doubling use channel c for part c of the
//! data (two-shot all_reduce 2c and 2c+1, one per phase); point-to-point uses the channels
//! given.
//!
//! # Buffers and aliasing
//!
//! Steps name [`Slice`]s of the user's `Send` and `Recv` buffers, in elements. No schedule
//! needs scratch memory: a tree node with two children keeps its partial sum in its own
//! output. Buffer sizes follow NCCL (`count` as the user passes it), see
//! [`Collective::buffer_counts`]: all_reduce `count`/`count`; broadcast `count` (root)/`count`;
//! reduce `count`/`count` (root); all_gather `count`/`n*count`; reduce_scatter
//! `n*count`/`count`; all_to_all `n*count`/`n*count`; gather `count`/`n*count` (root);
//! scatter `n*count` (root)/`count`.
//!
//! In-place calls follow NCCL's conventions: send == recv for all_reduce, broadcast and
//! reduce; all_gather's send is `recv + rank*count`; reduce_scatter's recv is
//! `send + rank*count`; gather's send is the root's `recv + root*count`; scatter's recv is
//! the root's `send + root*count` (see [`Collective::in_place_send_offset`] and
//! [`Collective::in_place_recv_offset`]). NCCL defines no in-place all_to_all, and
//! [`plan`]'s schedules for it need separate buffers (every block is both read and
//! overwritten, in different lanes); [`all_to_all_in_place`] sends each chunk before it
//! receives over it, in one lane per peer and channel, which the host path and the GPU
//! backend run for an in-place call (nccl-tests runs all_to_all in place; MPI allows it).
//! The contract every schedule keeps, and the simulator checks by running each one with
//! separate and with aliased buffers:
//!
//! - no step reads input (`Send`) memory after a step wrote different data there through
//!   `Recv`: a lane reads each input element before it writes the output over it;
//! - when two lanes of a rank touch the same memory and one writes, the accesses are ordered
//!   by messages (a happens-before chain), never by luck of interleaving: the simulator
//!   tracks vector clocks and rejects unordered conflicting accesses;
//! - a reduce's `local` and `dst` are the same memory or disjoint. An executor treats a
//!   `Copy` whose source and destination are the same memory as a no-op, and a reduce whose
//!   `local` and `dst` coincide as an in-place reduce.
//!
//! # Reductions and postprocessing
//!
//! Schedules are op-agnostic: every reducing step combines "received (op) local" with the
//! collective's op, which the executor applies (the simulator takes any combine function).
//! Avg and PreMulSum need no steps of their own: the executor scales each rank's input
//! before the schedule runs (PreMulSum, float Avg) or divides the output after it finishes
//! (integer Avg), which is what the host executor does. A kernel may instead scale every
//! read of `Send` (never one of `Recv`): every reducing schedule reads each element of
//! `Send`, once but in two ranks' one-shot all_reduce, which sends it and folds it in
//! (tested).
//! Output chunks may hold partial results while the schedule runs (a tree node's partial
//! sum), so postprocessing the output waits for the schedule to finish.
//!
//! # Deadlock freedom
//!
//! Each connection end belongs to one lane, and a step, once it can run (message there,
//! slot free), stays runnable until it runs. So whether the lanes of all ranks finish does
//! not depend on the order an executor interleaves them, and one simulated order — the
//! validator's — decides it for every order, at the given FIFO depth. Ring schedules need
//! two slots per connection (with one, a full ring of receive-and-send steps jams); trees,
//! direct exchange and point-to-point need one. NCCL's connections have eight.

mod direct;
mod doubling;
mod p2p;
mod ring;
mod schedule;
mod simulate;
mod tree;
mod validate;

pub use direct::all_to_all_in_place;
pub use p2p::{point_to_point, Direction, PointToPointPlan, SelfCopy, Transfer, TransferLane};
pub use schedule::{Buffer, Lane, Link, Role, Schedule, Slice, Step};
pub use simulate::{simulate, simulate_point_to_point, Options};
pub use tree::{binary_tree, double_tree, trees, TreeNode};
pub use validate::{validate, validate_point_to_point, At, ScheduleError, Stuck};

/// The FIFO slot size NCCL's Simple protocol uses by default (4 MiB buffer / 8 steps).
pub const DEFAULT_CHUNK_BYTES: usize = 512 << 10;

pub use oxccl_tuning::{Algorithm, Collective};

/// What the planner knows of an algorithm: which collectives it plans, and how its
/// messages depend on each other. NCCL's algorithms other than Ring and Tree (CollNet,
/// NVLS, PAT) have no schedule here: planning them is an error.
pub trait Planned {
    /// Whether [`plan`] accepts this algorithm for `collective`.
    fn supports(self, collective: Collective) -> bool;

    /// Whether a plan's messages on each link are all sent without waiting for anything
    /// their receiver sends, so that the receiving proxy may post them together and
    /// complete them as a group: direct exchange, but for two ranks' one-shot all_reduce
    /// (each rank's next send waits for its last receive from the same peer) and an
    /// all_to_all on one buffer (`all_to_all_in_place`: [`all_to_all_in_place`]'s lanes,
    /// where each send after a lane's first waits for the receive before it).
    fn sends_independently(self, collective: Collective, nranks: usize, all_to_all_in_place: bool) -> bool;
}

impl Planned for Algorithm {
    fn supports(self, collective: Collective) -> bool {
        match self {
            Algorithm::Ring => true,
            Algorithm::Tree => collective == Collective::AllReduce,
            Algorithm::Direct => true,
            Algorithm::Doubling => collective == Collective::AllReduce,
            _ => false,
        }
    }

    fn sends_independently(self, collective: Collective, nranks: usize, all_to_all_in_place: bool) -> bool {
        self == Algorithm::Direct && !(collective == Collective::AllReduce && nranks == 2) && !(collective == Collective::AllToAll && all_to_all_in_place)
    }
}

/// What to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub collective: Collective,
    /// Elements, as the user passes `count` to NCCL (per rank for all_gather, reduce_scatter,
    /// all_to_all, gather and scatter).
    pub count: usize,
    pub nranks: usize,
    /// Ignored by collectives without a root.
    pub root: usize,
    /// Most elements one message (one FIFO slot) carries; at least 1. Also the pipelining
    /// grain: every algorithm moves data in messages of this size, so a chunk can be on
    /// the next hop while the following one is on this one.
    pub chunk: usize,
    /// Channels the data is split over; at least 1. Ring and tree only; direct exchange
    /// already has a lane per peer.
    pub channels: usize,
    /// How many ranks each host runs when the communicator's ranks lie host by host in
    /// blocks of that many (ranks 0..k on the first host, k..2k on the next, ...), as
    /// launchers place them by default; 1 when they do not (or on one host). With two
    /// hosts or more of two ranks or more, the tree runs across hosts with a chain inside
    /// each ([`tree`]); the other algorithms do not look at it.
    pub per_host: usize,
}

impl Shape {
    /// Root 0, one channel, and messages of at most [`DEFAULT_CHUNK_BYTES`] of
    /// `element_size`-byte elements.
    pub fn new(collective: Collective, count: usize, nranks: usize, element_size: usize) -> Shape {
        Shape { collective, count, nranks, root: 0, chunk: 1, channels: 1, per_host: 1 }.with_chunk_bytes(DEFAULT_CHUNK_BYTES, element_size)
    }

    pub fn with_root(self, root: usize) -> Shape {
        Shape { root, ..self }
    }

    pub fn with_channels(self, channels: usize) -> Shape {
        Shape { channels, ..self }
    }

    /// Messages of at most `chunk_bytes` bytes (the FIFO slot size) of `element_size`-byte
    /// elements, and at least one element.
    pub fn with_chunk_bytes(self, chunk_bytes: usize, element_size: usize) -> Shape {
        Shape { chunk: (chunk_bytes / element_size.max(1)).max(1), ..self }
    }

    /// Elements of (send, recv) buffers on `rank`.
    pub fn buffer_counts(&self, rank: usize) -> (usize, usize) {
        self.collective.buffer_counts(self.count, self.nranks, rank, self.root)
    }
}

/// An algorithm that cannot plan this shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{algorithm} cannot run {collective}: {reason}")]
pub struct Unsupported {
    pub algorithm: &'static str,
    pub collective: &'static str,
    pub reason: String,
}

/// Plans `shape` with `algorithm` for every rank.
pub fn plan(shape: Shape, algorithm: Algorithm) -> Result<Schedule, Unsupported> {
    let ranks = (0..shape.nranks).map(|rank| plan_lanes(shape, algorithm, rank)).collect::<Result<_, _>>()?;
    Ok(Schedule { shape, algorithm, ranks })
}

/// Why `algorithm` cannot plan `shape` for `rank`.
fn unsupported(shape: &Shape, algorithm: Algorithm, reason: &str) -> Unsupported {
    Unsupported { algorithm: algorithm.name(), collective: shape.collective.name(), reason: reason.into() }
}

/// `shape` and `rank` as every planner needs them.
fn check_shape(shape: &Shape, algorithm: Algorithm, rank: usize) -> Result<(), Unsupported> {
    if shape.nranks == 0 || shape.chunk == 0 || shape.channels == 0 || shape.root >= shape.nranks || rank >= shape.nranks {
        return Err(unsupported(shape, algorithm, "nranks, chunk and channels must be positive, root and rank below nranks"));
    }
    Ok(())
}

/// Plans `shape` with `algorithm` for one rank: its lanes (none empty).
pub fn plan_lanes(shape: Shape, algorithm: Algorithm, rank: usize) -> Result<Vec<Lane>, Unsupported> {
    let unsupported = |reason: &str| unsupported(&shape, algorithm, reason);
    check_shape(&shape, algorithm, rank)?;
    let mut lanes = match (algorithm, shape.collective) {
        (Algorithm::Ring | Algorithm::Direct, Collective::AllToAll | Collective::Gather | Collective::Scatter) => direct::lanes(&shape, rank),
        (Algorithm::Direct, _) => direct::lanes(&shape, rank),
        (Algorithm::Ring, _) => ring::lanes(&shape, rank),
        (Algorithm::Tree, Collective::AllReduce) => tree::lanes(&shape, rank),
        (Algorithm::Tree, _) => return Err(unsupported("the double binary tree serves all_reduce only")),
        (Algorithm::Doubling, Collective::AllReduce) => doubling::lanes(&shape, rank),
        (Algorithm::Doubling, _) => return Err(unsupported("recursive doubling serves all_reduce only")),
        (_, _) => return Err(unsupported("oxccl plans ring, tree, direct and recursive doubling schedules only (CollNet, NVLS and PAT need hardware or kernels it does not have)")),
    };
    lanes.retain(|l| !l.steps.is_empty());
    Ok(lanes)
}

/// Plans `shape` with `algorithm` for one rank: its lanes' steps (the executor's view).
pub fn plan_rank(shape: Shape, algorithm: Algorithm, rank: usize) -> Result<Vec<Vec<Step>>, Unsupported> {
    Ok(plan_lanes(shape, algorithm, rank)?.into_iter().map(|l| l.steps).collect())
}

/// [`plan_rank`] for a call, whose all_to_all on one buffer (`all_to_all_in_place`) gets
/// [`all_to_all_in_place`]'s lanes (every algorithm plans all_to_all by direct exchange).
pub fn plan_call(shape: Shape, algorithm: Algorithm, rank: usize, all_to_all_in_place: bool) -> Result<Vec<Vec<Step>>, Unsupported> {
    if !(all_to_all_in_place && shape.collective == Collective::AllToAll) {
        return plan_rank(shape, algorithm, rank);
    }
    check_shape(&shape, algorithm, rank)?;
    Ok(direct::all_to_all_in_place(&shape, rank).into_iter().map(|l| l.steps).filter(|steps| !steps.is_empty()).collect())
}

/// Splits `total` elements into `parts` near-equal consecutive ranges: (offset, count).
pub(crate) fn split(total: usize, parts: usize) -> impl Iterator<Item = (usize, usize)> {
    let (base, extra) = (total / parts, total % parts);
    (0..parts).map(move |i| (i * base + i.min(extra), base + usize::from(i < extra)))
}

/// Elements per granule of [`split_channels`]: 16 elements are a whole number of 16-byte
/// vectors for every datatype (1 to 8 bytes).
pub(crate) const CHANNEL_GRANULE: usize = 16;

/// Splits `total` elements (or bytes) over `parts` channels as [`split`] does, but in
/// whole granules of `granule`, the last part taking the rest: every part but the last
/// starts and ends on a granule, so that a GPU kernel copying a part from an aligned
/// buffer keeps its 16-byte vector path (a part starting off a 16-byte boundary falls
/// back to copying byte by byte: 21 channels per peer among 4 GPUs made send/recv of
/// 2 MiB and more 3-12x slower than NCCL). Parts may be empty when `total` is small.
pub(crate) fn split_channels(total: usize, parts: usize, granule: usize) -> impl Iterator<Item = (usize, usize)> {
    let granules = total / granule;
    split(granules, parts).enumerate().map(move |(i, (o, c))| {
        let offset = o * granule;
        (offset, if i + 1 == parts { total - offset } else { c * granule })
    })
}

/// Consecutive pieces of at most `chunk` elements of [offset, offset+len): (offset, count).
pub(crate) fn chunks(offset: usize, len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(chunk)).map(move |i| (offset + i * chunk, chunk.min(len - i * chunk)))
}

#[cfg(test)]
mod tests;
