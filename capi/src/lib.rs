//! oxccl's `libnccl.so.2`: NCCL's C API (capi/include/nccl.h) over the oxccl runtime.
//!
//! Every exported function validates its arguments, turns errors into `ncclResult_t` codes
//! with a message for `ncclGetLastError`, and runs inside `catch_unwind`, so no Rust panic
//! crosses the ABI. A communicator runs on one of two backends (`OXCCL_BACKEND`,
//! docs/CAPI.md): the GPU backend takes device buffers and enqueues on the caller's CUDA
//! stream, as NCCL does; the host backend takes host pointers and a NULL stream (a
//! non-NULL one is refused), and a call completes before it returns (a group in
//! `ncclGroupEnd`). Calls not implemented yet return `ncclInvalidUsage` with a message.
//!
//! `unsafe` is the nature of this crate: it dereferences what C callers pass. Each export
//! documents what it trusts the caller for; everything checkable is checked.

#![allow(clippy::missing_safety_doc)]

mod comm;
mod exports;
mod group;
mod result;

pub use exports::*;
pub use result::NcclResult;
