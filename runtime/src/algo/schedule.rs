//! The data a schedule is made of: buffer slices, links, steps, lanes, and the schedule of
//! every rank, with a readable `Display` for debugging.

use std::fmt;

use super::{Algorithm, Shape};

/// The user buffer a slice is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The user's input (`sendbuff`).
    Send,
    /// The user's output (`recvbuff`).
    Recv,
}

/// A range of elements of a user buffer: `count` elements from `offset`.
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

    /// One past the last element.
    pub fn end(&self) -> usize {
        self.offset + self.count
    }
}

/// One end of a message: the peer rank and the channel of the connection. Messages from
/// rank a to rank b on one channel form one FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Link {
    pub peer: usize,
    pub channel: usize,
}

/// One step of a lane: at most one message received, at most one sent (both of
/// `count()` elements, at most a chunk), at most one local slice read and one written.
/// Reductions use the collective's op, which the executor applies; steps are op-agnostic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send `src` to `to`.
    Send { to: Link, src: Slice },
    /// Receive into `dst` from `from`.
    Recv { from: Link, dst: Slice },
    /// Receive from `from`, reduce with `local`, send the result to `to`.
    RecvReduceSend { from: Link, to: Link, local: Slice },
    /// Receive from `from`, reduce with `local`, write the result to `dst`. `local` and
    /// `dst` are the same memory (an in-place reduce) or disjoint, never partly overlapping.
    RecvReduceCopy { from: Link, local: Slice, dst: Slice },
    /// As `RecvReduceCopy`, and send the result to `to`.
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
            Step::Recv { .. } | Step::RecvReduceCopy { .. } | Step::Copy { .. } => None,
        }
    }

    /// The local slice this step reads, if any.
    pub fn reads(&self) -> Option<Slice> {
        match *self {
            Step::Send { src, .. } | Step::Copy { src, .. } => Some(src),
            Step::RecvReduceSend { local, .. } | Step::RecvReduceCopy { local, .. } | Step::RecvReduceCopySend { local, .. } => Some(local),
            Step::Recv { .. } | Step::RecvCopySend { .. } => None,
        }
    }

    /// The local slice this step writes, if any.
    pub fn writes(&self) -> Option<Slice> {
        match *self {
            Step::Recv { dst, .. }
            | Step::RecvReduceCopy { dst, .. }
            | Step::RecvReduceCopySend { dst, .. }
            | Step::RecvCopySend { dst, .. }
            | Step::Copy { dst, .. } => Some(dst),
            Step::Send { .. } | Step::RecvReduceSend { .. } => None,
        }
    }

    /// Whether the step combines a received message with local data.
    pub fn reduces(&self) -> bool {
        matches!(self, Step::RecvReduceSend { .. } | Step::RecvReduceCopy { .. } | Step::RecvReduceCopySend { .. })
    }

    /// Elements this step moves (every slice of a step has this length).
    pub fn count(&self) -> usize {
        match (self.reads(), self.writes()) {
            (Some(s), _) | (None, Some(s)) => s.count,
            (None, None) => unreachable!("every step reads or writes a slice"),
        }
    }

    /// The step's name in full words, as kernels and logs spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Send { .. } => "send",
            Step::Recv { .. } => "recv",
            Step::RecvReduceSend { .. } => "recv_reduce_send",
            Step::RecvReduceCopy { .. } => "recv_reduce_copy",
            Step::RecvReduceCopySend { .. } => "recv_reduce_copy_send",
            Step::RecvCopySend { .. } => "recv_copy_send",
            Step::Copy { .. } => "copy",
        }
    }
}

/// What a lane does, for printing and for executors that map lanes onto workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Local copies only.
    Local,
    /// One ring channel: receives from the previous rank, sends to the next.
    Ring { channel: usize },
    /// Reduction toward the root of tree `tree` (0 or 1) of `channel`; at the root it also
    /// starts the broadcast back down.
    TreeUp { channel: usize, tree: usize },
    /// Broadcast from the parent down to the children in tree `tree` of `channel`.
    TreeDown { channel: usize, tree: usize },
    /// Messages to one peer.
    SendTo { peer: usize, channel: usize },
    /// Messages from one peer.
    RecvFrom { peer: usize, channel: usize },
    /// Messages to and from one peer, each sent before the one received in its place.
    Exchange { peer: usize, channel: usize },
}

/// An ordered list of steps. The lanes of a rank progress independently of each other (an
/// executor may interleave them in any way); the steps of a lane run in order, each one
/// only when its incoming message has arrived and its outgoing FIFO has a free slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    pub role: Role,
    pub steps: Vec<Step>,
}

/// Every rank's lanes for one collective: `ranks[r]` are the lanes of rank r.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub shape: Shape,
    pub algorithm: Algorithm,
    pub ranks: Vec<Vec<Lane>>,
}

impl Schedule {
    /// Every step of every lane of every rank: (rank, lane, index, step).
    pub fn steps(&self) -> impl Iterator<Item = (usize, usize, usize, &Step)> + '_ {
        self.ranks
            .iter()
            .enumerate()
            .flat_map(|(rank, lanes)| lanes.iter().enumerate().flat_map(move |(lane, l)| l.steps.iter().enumerate().map(move |(i, s)| (rank, lane, i, s))))
    }

    /// Elements each rank sends over connections: the schedule's traffic.
    pub fn elements_sent(&self) -> Vec<usize> {
        let mut sent = vec![0; self.ranks.len()];
        for (rank, _, _, step) in self.steps() {
            if step.sends().is_some() {
                sent[rank] += step.count();
            }
        }
        sent
    }

    /// Messages sent by all ranks together.
    pub fn messages(&self) -> usize {
        self.steps().filter(|(.., s)| s.sends().is_some()).count()
    }
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buffer::Send => "send",
            Buffer::Recv => "recv",
        })
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}..{}]", self.buffer, self.offset, self.end())
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} ch {}", self.peer, self.channel)
    }
}

/// `recv_reduce_send from rank 2 ch 0 to rank 4 ch 0 local send[5..10]`; the alternate
/// form (`{:#}`) pads the name so that steps line up in a table.
impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "{:<21}", self.name())?;
        } else {
            f.write_str(self.name())?;
        }
        if let Some(from) = self.receives() {
            write!(f, " from {from}")?;
        }
        if let Some(to) = self.sends() {
            write!(f, " to {to}")?;
        }
        match *self {
            Step::Send { src, .. } | Step::Copy { src, .. } => write!(f, " {src}")?,
            Step::RecvReduceSend { local, .. } | Step::RecvReduceCopy { local, .. } | Step::RecvReduceCopySend { local, .. } => write!(f, " local {local}")?,
            Step::Recv { .. } | Step::RecvCopySend { .. } => {}
        }
        if let Some(dst) = self.writes() {
            write!(f, " -> {dst}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Role::Local => write!(f, "local"),
            Role::Ring { channel } => write!(f, "ring, channel {channel}"),
            Role::TreeUp { channel, tree } => write!(f, "tree {tree} up, channel {channel}"),
            Role::TreeDown { channel, tree } => write!(f, "tree {tree} down, channel {channel}"),
            Role::SendTo { peer, channel } => write!(f, "send to rank {peer}, channel {channel}"),
            Role::RecvFrom { peer, channel } => write!(f, "receive from rank {peer}, channel {channel}"),
            Role::Exchange { peer, channel } => write!(f, "exchange with rank {peer}, channel {channel}"),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} elements over {} ranks", self.collective.name(), self.count, self.nranks)?;
        if self.collective.rooted() {
            write!(f, ", root {}", self.root)?;
        }
        write!(f, ", chunks of at most {} elements, {} channel(s)", self.chunk, self.channels)
    }
}

/// One block per rank, one paragraph per lane, one line per step, numbered.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.algorithm.name(), self.shape)?;
        for (rank, lanes) in self.ranks.iter().enumerate() {
            writeln!(f, "rank {rank}:")?;
            for (index, lane) in lanes.iter().enumerate() {
                writeln!(f, "  lane {index} ({}), {} steps:", lane.role, lane.steps.len())?;
                for (i, step) in lane.steps.iter().enumerate() {
                    writeln!(f, "    {i:>4}  {step:#}")?;
                }
            }
        }
        Ok(())
    }
}
