//! The runtime's one error type.

use std::time::Duration;

/// What can go wrong in a communicator or a collective.
#[derive(Debug, thiserror::Error, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed a value the call cannot use; the communicator stays usable.
    #[error("invalid argument: {what}")]
    InvalidArgument { what: String },

    /// The call is not allowed in the communicator's current state.
    #[error("invalid usage: {what}")]
    InvalidUsage { what: String },

    /// A peer died, left or stopped answering.
    #[error("rank {rank} failed: {reason}")]
    PeerFailed { rank: u32, reason: String },

    /// A wait ran past its deadline.
    #[error("timed out after {waited:?} during {phase}")]
    Timeout { phase: String, waited: Duration },

    /// A non-blocking operation (init, split) has not finished yet: poll again.
    #[error("in progress: {what}")]
    InProgress { what: String },

    /// The communicator was aborted.
    #[error("communicator aborted{}", if reason.is_empty() { String::new() } else { format!(": {reason}") })]
    Aborted { reason: String },

    /// A transport failed.
    #[error("transport: {0}")]
    Transport(String),

    /// The bootstrap failed.
    #[error("bootstrap: {0}")]
    Bootstrap(String),

    /// The CUDA driver, NVRTC or a kernel failed, or is missing; the message says which.
    #[error("CUDA: {0}")]
    Cuda(String),

    /// A bug: an invariant of oxccl itself does not hold.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The runtime's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument { what: what.into() }
    }

    /// Whether the error was the caller's (the communicator stays usable).
    pub fn is_caller_error(&self) -> bool {
        matches!(self, Error::InvalidArgument { .. } | Error::InvalidUsage { .. })
    }
}

impl From<oxccl_bootstrap::Error> for Error {
    fn from(e: oxccl_bootstrap::Error) -> Self {
        match e {
            oxccl_bootstrap::Error::PeerFailed { rank, phase, reason } => Error::PeerFailed { rank, reason: format!("{reason} (during {phase})") },
            oxccl_bootstrap::Error::Timeout { phase, waited } => Error::Timeout { phase, waited },
            oxccl_bootstrap::Error::Aborted { reason } => Error::Aborted { reason },
            oxccl_bootstrap::Error::InvalidArgument { what } => Error::InvalidArgument { what },
            oxccl_bootstrap::Error::Config { .. } => Error::InvalidArgument { what: e.to_string() },
            oxccl_bootstrap::Error::Excluded { .. } => Error::Aborted { reason: e.to_string() },
            other => Error::Bootstrap(other.to_string()),
        }
    }
}
