//! oxccl-runtime: communicators, algorithms, executors and the proxy engine.
pub use oxccl_bootstrap as bootstrap;

pub mod algo;
mod error;
mod stream;

pub use error::{Error, Result};
