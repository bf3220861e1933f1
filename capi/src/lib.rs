//! oxccl's `libnccl.so.2`: NCCL's C API (capi/include/nccl.h) over the oxccl runtime.
//!
//! Every exported function validates its arguments, turns errors into `ncclResult_t` codes
//! with a message for `ncclGetLastError`, and runs inside `catch_unwind`, so no Rust panic
//! crosses the ABI. This release serves the host backend: buffers are host pointers and
//! the stream must be NULL (a call completes before it returns; a group completes in
//! `ncclGroupEnd`). Calls not implemented yet return `ncclInvalidUsage` with a message.
//!
//! `unsafe` is the nature of this crate: it dereferences what C callers pass. Each export
//! documents what it trusts the caller for; everything checkable is checked.

#![allow(clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]

mod comm;
mod exports;
mod group;
mod result;

pub use exports::*;
pub use result::NcclResult;
