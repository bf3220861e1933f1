//! oxccl-runtime: communicators, algorithms (schedules), the host executor and the proxy
//! engine.
//!
//! ```no_run
//! use oxccl_runtime::{Communicator, ReduceOp};
//! # fn main() -> oxccl_runtime::Result<()> {
//! let config = oxccl_runtime::bootstrap::Config::from_env().map_err(oxccl_runtime::Error::from)?;
//! let comm = Communicator::from_env(&config)?;
//! let mut data = vec![comm.rank() as f32; 1024];
//! comm.all_reduce_in_place(&mut data, ReduceOp::Sum)?;
//! # Ok(()) }
//! ```

pub use oxccl_bootstrap as bootstrap;

pub mod algo;
mod base;
mod call;
mod comm;
mod error;
pub mod gpu;
mod host;
mod proxy;
mod pxn;
mod topo;
mod types;

pub use algo::Collective;
pub use comm::{host_id, Communicator, Group, Memory, MemoryStats, PendingCommunicator};
pub use error::{Error, Result};
pub use host::stream::Work;
pub use proxy::NetConnection;
pub use host::SLOTS;
pub use types::{DataType, Element, ReduceOp, E4M3, E5M2};

pub(crate) use oxccl_bootstrap::log::target as log_target;

impl From<oxccl_kernels::Error> for Error {
    fn from(e: oxccl_kernels::Error) -> Self {
        Error::InvalidArgument { what: e.to_string() }
    }
}
