//! oxccl-runtime: communicators, algorithms, executors and the proxy engine.
pub use oxccl_bootstrap as bootstrap;
