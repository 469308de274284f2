//! The node's error type: every variant maps to one CLI exit code.

use std::path::PathBuf;

/// What can go wrong in a node operation, grouped by what the caller can do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Bad usage or input: malformed scope, unknown agent/team, empty content…
    #[error("{0}")]
    BadInput(String),
    /// The memory does not exist *or the requester cannot see it* (the two are
    /// indistinguishable by design).
    #[error("no such memory: {0}")]
    NoSuchMemory(String),
    /// The requester may not do this (e.g. a non-owner sharing a memory).
    #[error("refused: {0}")]
    Refused(String),
    /// An operation failed (a bundle that does not verify, a peer that
    /// cannot be reached); the message says why.
    #[error("{0}")]
    Failed(String),
    /// The directory is not an amos home.
    #[error("{} is not an amos home (run `amos init` first)", .0.display())]
    NotAHome(PathBuf),
    /// Stored data is damaged or of an unknown format.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("index error: {0}")]
    Index(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl NodeError {
    /// The CLI exit code (docs/cli.md): 1 failed, 2 bad input, 3 refused.
    pub fn exit_code(&self) -> u8 {
        match self {
            NodeError::BadInput(_) | NodeError::NoSuchMemory(_) | NodeError::NotAHome(_) => 2,
            NodeError::Refused(_) => 3,
            _ => 1,
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
        let context = context.into();
        move |source| NodeError::Io { context, source }
    }
}

impl From<amos_protocol::ProtocolError> for NodeError {
    fn from(e: amos_protocol::ProtocolError) -> Self {
        NodeError::BadInput(e.to_string())
    }
}

impl From<tantivy::TantivyError> for NodeError {
    fn from(e: tantivy::TantivyError) -> Self {
        NodeError::Index(e.to_string())
    }
}

pub type Result<T, E = NodeError> = std::result::Result<T, E>;
