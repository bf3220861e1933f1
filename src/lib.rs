//! oxccl: collective communication for GPUs and CPUs, of NCCL's class.
//!
//! This facade re-exports the crates users need: [`bootstrap`] (config, logging, how ranks
//! find each other) and [`runtime`] (communicators and collectives).

#![forbid(unsafe_code)]

pub use oxccl_bootstrap as bootstrap;
pub use oxccl_runtime as runtime;
