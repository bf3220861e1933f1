//! oxccl-bootstrap: the base of oxccl — typed configuration, logging, and how the ranks of
//! a job find each other and exchange control data before any data path exists.
//!
//! ```no_run
//! use oxccl_bootstrap::{Bootstrap, Config};
//! # fn main() -> oxccl_bootstrap::Result<()> {
//! let config = Config::from_env()?;
//! // Under mpirun, srun, torchrun or oxccl's own spawner: rank and size from the launcher.
//! let boot = Bootstrap::from_env(&config)?;
//! let all = boot.allgather(&boot.rank().to_le_bytes())?;
//! assert_eq!(all.len(), 4 * boot.nranks() as usize);
//! boot.barrier()?;
//! # Ok(()) }
//! ```
//!
//! See docs/BOOTSTRAP.md for the protocol, the unique id's layout and the refusals.

#![forbid(unsafe_code)]

mod abort;
pub mod agree;
mod bootstrap;
pub mod config;
pub mod detect;
mod endpoint;
mod error;
pub mod id;
pub mod iface;
mod join;
pub mod launcher;
pub mod log;
pub mod rendezvous;
mod root;
mod sock;
pub mod spawn;
pub mod wire;

pub use abort::AbortFlag;
pub use bootstrap::{Bootstrap, RESERVED_TAGS};
pub use config::{Config, ConfigBuilder};
pub use error::{Error, Result};
pub use id::{UniqueId, UNIQUE_ID_BYTES};

/// Split color that joins no communicator (NCCL_SPLIT_NOCOLOR).
pub const NOCOLOR: i32 = -1;

/// This machine's host name ("unknown" if it cannot be read).
pub fn host_name() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "unknown".into())
}
