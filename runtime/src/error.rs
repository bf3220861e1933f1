//! The runtime's one error type. Failures of the crates below (a transport, the bootstrap,
//! the kernels' toolchain) keep their own error as the source, behind an `Arc` so that
//! the runtime's error stays cheap to clone (a communicator hands its failure to every
//! later call): `source()` gives that `Arc` (downcast to `Arc<oxccl_transports::Error>`,
//! say).

use std::sync::Arc;
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

    /// A transport failed: what the runtime was doing, and the transport's error if it
    /// raised one.
    #[error("transport: {what}{}", cause(source))]
    Transport { what: String, source: Option<Arc<oxccl_transports::Error>> },

    /// The bootstrap failed (in a way the variants above do not name).
    #[error("bootstrap: {source}")]
    Bootstrap { source: Arc<oxccl_bootstrap::Error> },

    /// The CUDA driver, NVRTC or a kernel failed, or is missing: what the runtime was
    /// doing, and the kernels' toolchain error if it raised one.
    #[error("CUDA: {what}{}", cause(source))]
    Cuda { what: String, source: Option<Arc<oxccl_kernels::Error>> },

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

    /// A transport failure the runtime found itself (a malformed handle, say).
    pub(crate) fn transport(what: impl Into<String>) -> Self {
        Error::Transport { what: what.into(), source: None }
    }

    /// A transport's error, met while doing `what`.
    pub(crate) fn from_transport(what: impl Into<String>, source: oxccl_transports::Error) -> Self {
        Error::Transport { what: what.into(), source: Some(Arc::new(source)) }
    }

    /// A CUDA failure the runtime found itself (the driver's status, a missing driver).
    pub(crate) fn cuda(what: impl Into<String>) -> Self {
        Error::Cuda { what: what.into(), source: None }
    }

    /// The kernels' toolchain's error, met while doing `what`.
    pub(crate) fn from_kernels(what: impl Into<String>, source: oxccl_kernels::Error) -> Self {
        Error::Cuda { what: what.into(), source: Some(Arc::new(source)) }
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
            other => Error::Bootstrap { source: Arc::new(other) },
        }
    }
}

/// ": <source>" for a message that names its cause, or nothing.
fn cause<E: std::fmt::Display>(source: &Option<Arc<E>>) -> String {
    source.as_ref().map_or(String::new(), |e| format!(": {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// A lower crate's error stays the source: the message says both, and `source()`
    /// gives the transport's own error back, typed.
    #[test]
    fn causes_are_kept_typed() {
        let e = Error::from_transport("listening on device 0", oxccl_transports::Error::Unsupported("no sockets".into()));
        assert_eq!(e.to_string(), "transport: listening on device 0: not supported: no sockets");
        let source = e.source().expect("the transport's error");
        let typed = source.downcast_ref::<Arc<oxccl_transports::Error>>().map(|e| &**e);
        assert!(matches!(typed, Some(oxccl_transports::Error::Unsupported(_))), "{source:?}");
        let cloned = e.clone();
        assert_eq!(cloned.to_string(), e.to_string());
        assert!(Error::transport("malformed handle").source().is_none());
    }
}
