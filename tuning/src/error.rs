//! The crate's one error type.

/// What went wrong choosing how a collective runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// NCCL_ALGO or NCCL_PROTO does not parse.
    #[error("{variable}={value:?}: {reason}")]
    Selection { variable: String, value: String, reason: String },
    /// Nothing runnable is left for a collective (the settings, a plugin, or the hardware).
    #[error("{0}")]
    NoChoice(String),
    /// A tuner plugin failed to load, or an entry point returned an error.
    #[error("tuner plugin {plugin}: {reason}")]
    Plugin { plugin: String, reason: String },
    #[error(transparent)]
    Topology(#[from] oxccl_topology::Error),
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
