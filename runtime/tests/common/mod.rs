//! Helpers shared by the runtime integration tests.

/// The collective matrix and its reference (also used by `oxccl-perf -c 1`).
pub use oxccl_runtime::check as matrix;
