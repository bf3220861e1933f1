//! [`Group`]: operations on host memory launched together (ncclGroupStart/End semantics
//! for one communicator).

use crate::algo::Collective;
use crate::error::Result;
use crate::host::stream::Work;
use crate::host::task::{CollectiveTask, PointToPoint, Task};
use crate::ReduceOp;
use oxccl_kernels::DataType;

use super::{typed_task, Communicator};

/// Operations launched together: point-to-point operations all progress at once (matched
/// send/recv pairs never deadlock, whatever their order), collectives follow in call order.
pub struct Group<'a> {
    comm: &'a Communicator,
    p2p: Vec<PointToPoint>,
    collectives: Vec<CollectiveTask>,
}

impl<'a> Group<'a> {
    pub(super) fn new(comm: &'a Communicator) -> Group<'a> {
        Group { comm, p2p: Vec::new(), collectives: Vec::new() }
    }

    /// Adds a send of `data` to `peer`.
    pub fn send<T: crate::Element>(&mut self, data: &'a [T], peer: usize) -> Result<&mut Self> {
        self.point_to_point(peer, bytemuck::cast_slice(data).as_ptr(), std::ptr::null_mut(), std::mem::size_of_val(data), true)
    }

    /// Adds a receive from `peer` into `data` (the peer sends exactly as many elements).
    pub fn recv<T: crate::Element>(&mut self, data: &'a mut [T], peer: usize) -> Result<&mut Self> {
        let bytes = std::mem::size_of_val(data);
        self.point_to_point(peer, std::ptr::null(), bytemuck::cast_slice_mut(data).as_mut_ptr(), bytes, false)
    }

    /// Adds a send on raw memory.
    ///
    /// # Safety
    /// `data` is valid for `bytes` bytes until the group's work completes.
    pub unsafe fn send_raw(&mut self, data: *const u8, bytes: usize, peer: usize) -> Result<&mut Self> {
        self.point_to_point(peer, data, std::ptr::null_mut(), bytes, true)
    }

    /// Adds a receive on raw memory.
    ///
    /// # Safety
    /// `data` is valid for `bytes` bytes, untouched by others, until the work completes.
    pub unsafe fn recv_raw(&mut self, data: *mut u8, bytes: usize, peer: usize) -> Result<&mut Self> {
        self.point_to_point(peer, std::ptr::null(), data, bytes, false)
    }

    fn point_to_point(&mut self, peer: usize, send: *const u8, recv: *mut u8, bytes: usize, is_send: bool) -> Result<&mut Self> {
        let data = if is_send { send.cast_mut() } else { recv };
        self.p2p.push(PointToPoint::checked(is_send, peer, data, bytes, self.comm.nranks())?);
        Ok(self)
    }

    /// Adds a collective on raw buffers.
    ///
    /// # Safety
    /// As [`Communicator::enqueue_collective`], until the group's work completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective_raw(&mut self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<&mut Self> {
        let task = self.comm.collective_task(collective, send, recv, count, dtype, op, root)?;
        self.collectives.push(task);
        Ok(self)
    }

    /// Adds a collective on typed buffers (`send` may be `None` for in-place, where `recv`
    /// holds the input as NCCL's in-place conventions say).
    pub fn collective<T: crate::Element>(&mut self, collective: Collective, send: Option<&'a [T]>, recv: &'a mut [T], count: usize, op: ReduceOp, root: usize) -> Result<&mut Self> {
        let task = typed_task(self.comm, collective, send, recv, count, op, root)?;
        self.collectives.push(task);
        Ok(self)
    }

    /// Launches the group and waits for it.
    pub fn end(self) -> Result<()> {
        let host = self.comm.host("a group")?;
        self.comm.check_usable()?;
        host.run_now(Task::Group { p2p: self.p2p, collectives: self.collectives })
    }

    /// Launches the group; the work's handle is returned at once.
    ///
    /// # Safety
    /// The buffers the group borrows must stay untouched until the work completes (the
    /// borrow ends when this returns, so the caller must wait on the handle before using
    /// them again).
    pub unsafe fn launch_async(self) -> Result<Work> {
        let host = self.comm.host("a group")?;
        self.comm.check_usable()?;
        host.submit(Task::Group { p2p: self.p2p, collectives: self.collectives })
    }
}
