//! Errors of graph building, compiling and running.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum NnError {
    /// An op was given inputs whose shapes it cannot take.
    #[error("{op}: {msg}")]
    Shape { op: &'static str, msg: String },
    /// A graph that cannot be compiled or differentiated as asked.
    #[error("graph: {0}")]
    Graph(String),
    /// A run's inputs do not match the compiled graph.
    #[error("feed: {0}")]
    Feed(String),
    /// The GPU could not be opened or reported an error.
    #[error("GPU: {0}")]
    Gpu(String),
    /// A checkpoint or data file that cannot be read as expected.
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<smelt::backend::BackendError> for NnError {
    fn from(e: smelt::backend::BackendError) -> Self {
        NnError::Gpu(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, NnError>;

/// A shape error of `op`.
pub(crate) fn shape_err<T>(op: &'static str, msg: impl Into<String>) -> Result<T> {
    Err(NnError::Shape {
        op,
        msg: msg.into(),
    })
}
