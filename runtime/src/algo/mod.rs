//! Algorithms as data: each is a pure function from a [`Shape`] to a [`Schedule`] — for
//! every rank, lanes of steps that an executor walks. No I/O here: schedules are validated
//! ([`validate`]) and simulated for all ranks together ([`simulate`]) in unit tests, and the
//! host executor and the CUDA kernels interpret the same steps.
//!
//! # Buffers and aliasing
//!
//! Steps name slices of the user's `Send` and `Recv` buffers, in elements. Buffer sizes
//! follow NCCL (`count` as the user passes it): all_reduce `count`/`count`; broadcast
//! `count`/`count`; reduce `count`/`count` (recv at the root); all_gather `count`/`n*count`;
//! reduce_scatter `n*count`/`count`; all_to_all `n*count`/`n*count`; gather `count`/`n*count`
//! (root); scatter `n*count` (root)/`count`.
//!
//! In-place calls use NCCL's conventions: send == recv for all_reduce, broadcast and
//! reduce (all_to_all in place is refused by the runtime); all_gather's send is
//! `recv + rank*count`; reduce_scatter's recv is `send + rank*count`; gather's send is the
//! root's `recv + root*count`; scatter's recv is the root's `send + root*count`. Every
//! schedule is correct under those aliasings: no step reads a region of `Send` after a step
//! wrote different data to the same memory through `Recv`. The simulator checks both ways.
//! An executor treats a `Copy` whose source and destination are the same memory as a no-op,
//! and a reduce whose local operand and destination coincide as an in-place reduce.
//!
//! # Connections
//!
//! A step that sends or receives names a peer and a channel; messages from rank a to rank b
//! on one channel form one FIFO, so on each side they must all come from one lane, in the
//! same order (the validator checks this). Each message carries at most `chunk` elements.

mod direct;
mod ring;
mod simulate;
mod validate;

pub use simulate::{simulate, Element};
pub use validate::validate;

use std::fmt;

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Scatter,
}

impl Collective {
    pub const ALL: [Collective; 8] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Gather,
        Collective::Scatter,
    ];

    /// The name nccl-tests gives its binary for this collective.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "alltoall",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
        }
    }

    /// Whether the collective reduces (needs an op).
    pub fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter)
    }

    /// Whether a root matters.
    pub fn rooted(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter)
    }

    /// Elements of (send, recv) buffers on `rank` for `count`.
    pub fn buffer_counts(self, count: usize, nranks: usize, rank: usize, root: usize) -> (usize, usize) {
        let n = nranks;
        let is_root = rank == root;
        match self {
            Collective::AllReduce => (count, count),
            Collective::Broadcast => (if is_root { count } else { 0 }, count),
            Collective::Reduce => (count, if is_root { count } else { 0 }),
            Collective::AllGather => (count, n * count),
            Collective::ReduceScatter => (n * count, count),
            Collective::AllToAll => (n * count, n * count),
            Collective::Gather => (count, if is_root { n * count } else { 0 }),
            Collective::Scatter => (if is_root { n * count } else { 0 }, count),
        }
    }

    /// Where, in elements of `Recv`, the in-place `Send` of `rank` starts (NCCL's convention),
    /// when in-place means an offset rather than the same pointer.
    pub fn in_place_send_offset(self, count: usize, rank: usize, root: usize) -> Option<usize> {
        match self {
            Collective::AllGather => Some(rank * count),
            Collective::Gather if rank == root => Some(root * count),
            _ => None,
        }
    }

    /// Where, in elements of `Send`, the in-place `Recv` of `rank` starts.
    pub fn in_place_recv_offset(self, count: usize, rank: usize, root: usize) -> Option<usize> {
        match self {
            Collective::ReduceScatter => Some(rank * count),
            Collective::Scatter if rank == root => Some(root * count),
            _ => None,
        }
    }
}

/// How the data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Ring,
    Tree,
    Direct,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Direct => "direct",
        }
    }
}

/// What to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub collective: Collective,
    pub count: usize,
    pub nranks: usize,
    pub root: usize,
    /// Most elements one message (one FIFO slot) carries; at least 1.
    pub chunk: usize,
    /// Channels to spread the data over (ring); at least 1.
    pub channels: usize,
}

/// The user buffer a slice is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    Send,
    Recv,
}

/// A range of elements of a user buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub buffer: Buffer,
    pub offset: usize,
    pub count: usize,
}

impl Slice {
    pub fn send(offset: usize, count: usize) -> Slice {
        Slice { buffer: Buffer::Send, offset, count }
    }

    pub fn recv(offset: usize, count: usize) -> Slice {
        Slice { buffer: Buffer::Recv, offset, count }
    }
}

/// One end of a message: the peer and the channel of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Link {
    pub peer: usize,
    pub channel: usize,
}

/// One step of a lane. Each message is `count` elements; reductions use the collective's op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send `src` to `to`.
    Send { to: Link, src: Slice },
    /// Receive into `dst` from `from`.
    Recv { from: Link, dst: Slice },
    /// Receive from `from`, reduce with `local`, send the result to `to`.
    RecvReduceSend { from: Link, to: Link, local: Slice },
    /// Receive from `from`, reduce with `local`, write the result to `dst`.
    RecvReduceCopy { from: Link, local: Slice, dst: Slice },
    /// Receive from `from`, reduce with `local`, write the result to `dst` and send it to `to`.
    RecvReduceCopySend { from: Link, to: Link, local: Slice, dst: Slice },
    /// Receive from `from` into `dst` and send the same data on to `to`.
    RecvCopySend { from: Link, to: Link, dst: Slice },
    /// Copy `src` to `dst` locally (a no-op when they are the same memory).
    Copy { src: Slice, dst: Slice },
}

impl Step {
    /// The link this step receives from, if any.
    pub fn receives(&self) -> Option<Link> {
        match *self {
            Step::Recv { from, .. }
            | Step::RecvReduceSend { from, .. }
            | Step::RecvReduceCopy { from, .. }
            | Step::RecvReduceCopySend { from, .. }
            | Step::RecvCopySend { from, .. } => Some(from),
            Step::Send { .. } | Step::Copy { .. } => None,
        }
    }

    /// The link this step sends to, if any.
    pub fn sends(&self) -> Option<Link> {
        match *self {
            Step::Send { to, .. } | Step::RecvReduceSend { to, .. } | Step::RecvReduceCopySend { to, .. } | Step::RecvCopySend { to, .. } => Some(to),
            _ => None,
        }
    }

    /// Elements this step moves.
    pub fn count(&self) -> usize {
        match *self {
            Step::Send { src, .. } => src.count,
            Step::Recv { dst, .. } | Step::RecvCopySend { dst, .. } => dst.count,
            Step::RecvReduceSend { local, .. } | Step::RecvReduceCopy { local, .. } | Step::RecvReduceCopySend { local, .. } => local.count,
            Step::Copy { src, .. } => src.count,
        }
    }
}

/// Every rank's lanes for one collective. `ranks[r][l]` is lane `l` of rank `r`: lanes of a
/// rank progress independently; the steps of a lane run in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub shape: Shape,
    pub algorithm: Algorithm,
    pub ranks: Vec<Vec<Vec<Step>>>,
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
    let ranks = (0..shape.nranks).map(|rank| plan_rank(shape, algorithm, rank)).collect::<Result<_, _>>()?;
    Ok(Schedule { shape, algorithm, ranks })
}

/// Plans `shape` with `algorithm` for one rank: its lanes.
pub fn plan_rank(shape: Shape, algorithm: Algorithm, rank: usize) -> Result<Vec<Vec<Step>>, Unsupported> {
    let unsupported = |reason: &str| Unsupported { algorithm: algorithm.name(), collective: shape.collective.name(), reason: reason.into() };
    if shape.nranks == 0 || shape.chunk == 0 || shape.channels == 0 || shape.root >= shape.nranks || rank >= shape.nranks {
        return Err(unsupported("nranks, chunk and channels must be positive, root and rank below nranks"));
    }
    match (algorithm, shape.collective) {
        (Algorithm::Ring | Algorithm::Direct, Collective::AllToAll | Collective::Gather | Collective::Scatter) => Ok(direct::lanes(&shape, rank)),
        (Algorithm::Ring, _) => Ok(ring::lanes(&shape, rank)),
        (Algorithm::Direct, _) => Err(unsupported("direct exchange serves all_to_all, gather and scatter")),
        (Algorithm::Tree, _) => Err(unsupported("the double binary tree is not implemented yet")),
    }
}

/// Splits `total` elements into `parts` near-equal consecutive ranges: (offset, count).
pub(crate) fn split(total: usize, parts: usize) -> impl Iterator<Item = (usize, usize)> {
    let (base, extra) = (total / parts, total % parts);
    (0..parts).map(move |i| (i * base + i.min(extra), base + usize::from(i < extra)))
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {} {:?}", self.algorithm.name(), self.shape.collective.name(), self.shape)?;
        for (rank, lanes) in self.ranks.iter().enumerate() {
            for (lane, steps) in lanes.iter().enumerate() {
                writeln!(f, "rank {rank} lane {lane}:")?;
                for step in steps {
                    writeln!(f, "  {step:?}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
