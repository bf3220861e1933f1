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
pub mod check;
mod comm;
mod conn;
mod error;
mod exec;
mod pending;
pub mod gpu;
mod proxy;
mod stream;
mod task;
mod tune;
mod types;

pub use algo::Collective;
pub use comm::{Communicator, Group, MemoryStats, SLOTS};
pub use pending::PendingCommunicator;
pub use error::{Error, Result};
pub use stream::Work;
pub use types::{DataType, Element, Fp8E4M3, Fp8E5M2, ReduceOp};

pub(crate) use oxccl_bootstrap::log::target as log_target;

impl From<oxccl_kernels::Error> for Error {
    fn from(e: oxccl_kernels::Error) -> Self {
        Error::InvalidArgument { what: e.to_string() }
    }
}
