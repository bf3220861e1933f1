//! The bootstrap's one error type.

use std::net::SocketAddr;
use std::time::Duration;

/// Everything that can go wrong while ranks find each other and exchange control data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting (environment variable or API value) is malformed.
    #[error("invalid setting {name}={value:?}: {reason}")]
    Config { name: String, value: String, reason: String },

    /// The caller passed a value the bootstrap cannot use.
    #[error("invalid argument: {what}")]
    InvalidArgument { what: String },

    /// Bytes on the wire or in a unique id do not decode.
    #[error("malformed {what}: {reason}")]
    Wire { what: &'static str, reason: String },

    /// A peer presented credentials that do not belong to this job.
    #[error("peer {peer} refused: {reason}")]
    Refused { peer: String, reason: String },

    /// The root turned this rank away.
    #[error("bootstrap root {root} refused rank {rank}: {reason}")]
    RefusedByRoot { root: SocketAddr, rank: u32, reason: String },

    /// Connecting to an address failed after every retry.
    #[error("could not connect to {addr} ({what}) within {waited:?}: {source}")]
    Connect { addr: SocketAddr, what: &'static str, waited: Duration, source: std::io::Error },

    /// A wait ran past its deadline.
    #[error("timed out after {waited:?} during {phase}")]
    Timeout { phase: String, waited: Duration },

    /// A peer closed its connection or died.
    #[error("rank {rank} failed during {phase}: {reason}")]
    PeerFailed { rank: u32, phase: String, reason: String },

    /// The job was aborted (locally, or by a notice from the root or a peer).
    #[error("bootstrap aborted: {reason}")]
    Aborted { reason: String },

    /// The other ranks count this rank as failed (it was stopped or cut off while they
    /// agreed on the failed ranks): it is not among the survivors.
    #[error("rank {rank} is counted as failed by {by}: it is not among the survivors")]
    Excluded { rank: u32, by: String },

    /// No way to find the other ranks was configured.
    #[error("cannot bootstrap: {0}")]
    NoLauncher(String),

    /// MPI failed or is unavailable.
    #[error("MPI bootstrap: {0}")]
    Mpi(String),

    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// The bootstrap's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument { what: what.into() }
    }

    pub(crate) fn wire(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Wire { what, reason: reason.into() }
    }
}
