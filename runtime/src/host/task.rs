//! Work as the stream runs it: a collective, or a fused group of point-to-point operations.

use oxccl_kernels::{DataType, ReduceOp};

use super::exec::Buffers;
use crate::algo::Collective;
use crate::call::{self, Addresses};
use crate::error::Result;

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

impl CollectiveTask {
    /// One collective on host buffers, checked (`crate::call`) for rank `rank` of `nranks`.
    #[allow(clippy::too_many_arguments)]
    pub fn checked(collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize, nranks: usize, rank: usize) -> Result<CollectiveTask> {
        let checked = call::check_collective(collective, send as u64, recv as u64, count, dtype, nranks, rank, root, Addresses::Host)?;
        Ok(CollectiveTask { collective, count, dtype, op, root, buffers: Buffers { send, send_bytes: checked.send_bytes, recv, recv_bytes: checked.recv_bytes } })
    }
}

impl PointToPoint {
    /// One send (`send`) or receive of `bytes` at `data` with `peer`, checked for a
    /// communicator of `nranks`.
    pub fn checked(send: bool, peer: usize, data: *mut u8, bytes: usize, nranks: usize) -> Result<PointToPoint> {
        call::check_transfer(send, peer, data as u64, bytes, nranks)?;
        let buffers = if send { Buffers { send: data, send_bytes: bytes, recv: std::ptr::null_mut(), recv_bytes: 0 } } else { Buffers { send: std::ptr::null(), send_bytes: 0, recv: data, recv_bytes: bytes } };
        Ok(PointToPoint { peer, bytes, buffers, send })
    }
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
