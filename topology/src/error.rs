//! The crate's one error type.

/// What went wrong reading, discovering or searching a topology.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The XML is not well formed, or not NCCL's topology format.
    #[error("topology XML{}: {reason}", origin.as_deref().map(|o| format!(" {o}")).unwrap_or_default())]
    Xml { origin: Option<String>, reason: String },
    /// An element lacks an attribute the graph needs, or has one that does not parse.
    #[error("topology XML: <{element}> {attribute}: {reason}")]
    Attribute { element: String, attribute: String, reason: String },
    /// Reading or writing a file.
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: std::io::Error },
    /// hwloc, sysfs, the CUDA driver or NVML failed in a way discovery cannot work around.
    #[error("topology discovery: {0}")]
    Discovery(String),
    /// A question about the graph that has no answer (an unknown rank, a NIC-less GPU...).
    #[error("topology: {0}")]
    Graph(String),
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn attribute(element: &str, attribute: &str, reason: impl Into<String>) -> Error {
        Error::Attribute { element: element.into(), attribute: attribute.into(), reason: reason.into() }
    }
}
