//! The `libnccl.so.2`-compatible C ABI. Filled in by the C API issue; the crate exists now
//! so that the workspace has the layout of docs/ARCHITECTURE.md from the start.
#![forbid(unsafe_code)]
