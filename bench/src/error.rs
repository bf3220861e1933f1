//! The bench crate's one error type: what went wrong reading a benchmark table or drawing
//! a picture of it, always naming the file (and line) at fault.

/// A table that cannot be read, or a picture that cannot be drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One line of a table is wrong: the file (or other origin) and the line, 1-based.
    #[error("{origin}:{line}: {what}")]
    Line { origin: String, line: usize, what: String },

    /// The file as a whole is not a table (no column header, no rows).
    #[error("{origin}: {what}")]
    File { origin: String, what: String },

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// The picture cannot be drawn from what it was given (no series, nothing to draw).
    #[error("{what}")]
    Chart { what: String },
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
