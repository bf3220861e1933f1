//! oxccl-tuning: how a collective runs.
//!
//! - The names said once: [`Collective`], [`Algorithm`] (NCCL's seven and oxccl's Direct),
//!   [`Protocol`] (LL, LL128, Simple).
//! - [`Selection`]: `NCCL_ALGO` / `NCCL_PROTO` in NCCL's syntax.
//! - The cost models: [`NcclModel`] (NCCL's, from the searched topology, for GPU paths) and
//!   [`HostModel`] (the host executor's, measured), [`NetKernelModel`] (GPU kernels across
//!   hosts over the network, measured), [`OneHostModel`] (GPU kernels on one host, what a
//!   tuner plugin sees there).
//! - [`CostTable`]: predicted µs per algorithm × protocol, the table a choice is made from.
//! - [`Tuner`]: the choice — model, settings, tuner plugin, cheapest runnable entry; pairs
//!   that cannot run are errors, never silently replaced.
//! - [`plugin`]: the [`TunerPlugin`] trait and the loader of NCCL's C tuner plugins (v2-v6).

mod collective;
mod error;
mod host;
mod names;
mod nccl;
mod net_kernels;
mod one_host;
pub mod plugin;
mod selection;
mod setup;
mod table;
mod tuner;

pub use collective::Collective;
pub use error::{Error, Result};
pub use host::HostModel;
pub use names::{Algorithm, Protocol};
pub use nccl::{Constants, ModelInput, NcclModel};
pub use net_kernels::NetKernelModel;
pub use one_host::OneHostModel;
pub use plugin::{InitInfo, NvlDomains, TunerPlugin};
pub use selection::Selection;
pub use setup::{gpu_setup, rank_locally, GpuSetup};
pub use table::{CostTable, IGNORE};
pub use tuner::{Choice, Model, Request, Runnable, Tuner};
