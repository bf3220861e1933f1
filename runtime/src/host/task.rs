//! Work as the stream runs it: a collective, or a fused group of point-to-point operations.

use oxccl_kernels::{DataType, ReduceOp};

use crate::algo::Collective;
use super::exec::Buffers;

/// One collective call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CollectiveTask {
    pub collective: Collective,
    pub count: usize,
    pub dtype: DataType,
    pub op: ReduceOp,
    pub root: usize,
    pub buffers: Buffers,
}

/// One send or receive of a group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PointToPoint {
    pub peer: usize,
    pub bytes: usize,
    /// For a send: the data (`buffers.send`); for a receive: where it goes (`buffers.recv`).
    pub buffers: Buffers,
    pub send: bool,
}

/// What one stream job does: one collective (no allocation), or a group: its point-to-point
/// operations all together, then its collectives in call order (the same on every rank).
#[derive(Debug)]
pub(crate) enum Task {
    Collective(CollectiveTask),
    Group { p2p: Vec<PointToPoint>, collectives: Vec<CollectiveTask> },
}
