//! oxccl-transports: moving bytes between two ranks.
//!
//! A connection is a one-way FIFO of slots with head and tail counters ([`fifo`]), placed
//! where both ends can see it: a mapping under /dev/shm for ranks on one host, or local
//! memory that the runtime's proxy engine moves through a [`net::Net`] for ranks on other
//! hosts. Executors only see FIFOs.
//!
//! Exchanging connection handles between ranks is the caller's job: every handle here is an
//! opaque byte vector (at most [`net::HANDLE_MAX_BYTES`] for the net, as in NCCL).
//!
//! `unsafe` lives in five places: [`fifo`] (the mapping and the slots handed out in place),
//! `futex` (the system calls that sleep on a word and wake its sleepers),
//! [`inbox`] (the nodes of its lock-free list), `net::lent` (the raw buffers that cross
//! the [`net::Net`] boundary, as in NCCL's C plugin API) and [`net::plugin`] (the C ABI of
//! NCCL net plugins). Everything else is safe code.

pub mod fifo;
#[cfg(not(loom))]
pub mod futex;
pub mod inbox;
pub mod net;
mod sync;

use std::time::Duration;

/// The transports' one error type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed; `what` says what we were doing.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// Bytes from the peer (a handle, a greeting, a header) that do not parse.
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    /// The caller passed something out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The connection is gone (EOF, reset, or an earlier failure of this comm).
    #[error("connection closed by the peer: {0}")]
    Closed(String),
    /// An incoming message does not fit the receive buffer posted for it.
    #[error("message of {message} bytes (tag {tag}) for a {buffer}-byte receive buffer")]
    MessageTooLarge { message: usize, buffer: usize, tag: u32 },
    /// A wait passed its deadline.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout { what: &'static str, waited: Duration },
    /// A wait saw the caller's abort flag.
    #[error("aborted while waiting for {what}")]
    Aborted { what: &'static str },
    /// The process at the other end of a shared-memory FIFO no longer exists.
    #[error("peer process {pid} exited while we waited for {what}")]
    PeerExited { pid: u32, what: &'static str },
    /// Not implemented by this transport, with the reason.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A net plugin could not be loaded, or one of its calls failed or answered something
    /// out of range: `plugin` names the library (file, ABI version, name), `call` the call.
    #[error("net plugin {plugin}: {call}: {reason}")]
    Plugin { plugin: String, call: String, reason: String },
}

/// The transports' result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}
