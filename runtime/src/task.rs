//! Work as the stream runs it: a collective, or a fused group of point-to-point operations.

use oxccl_kernels::{DataType, ReduceOp};

use crate::algo::Collective;
use crate::exec::Buffers;

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

/// What one stream job does: point-to-point operations all together, then collectives in
/// call order (the same order on every rank).
#[derive(Debug, Default)]
pub(crate) struct Task {
    pub p2p: Vec<PointToPoint>,
    pub collectives: Vec<CollectiveTask>,
}
