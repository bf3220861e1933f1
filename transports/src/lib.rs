//! oxccl-transports: moving bytes between two ranks.
//!
//! A connection is a one-way [`fifo`] of slots with head and tail counters, placed where
//! both ends can see it: a shared-memory mapping for ranks on one host, or local memory
//! that the runtime's proxy engine moves through a [`net::Net`] for ranks on other hosts.
//! Executors only see FIFOs.

pub mod fifo;
pub mod net;

/// The transports' one error type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("connection closed by the peer: {0}")]
    Closed(String),
    #[error("not supported: {0}")]
    Unsupported(String),
}

/// The transports' result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}
