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
    /// A protocol value did not decode, validate or verify: a bad signature,
    /// a non-canonical encoding, a fact that breaks the data model, a time
    /// past the bound. Kept whole, so a caller can tell a verification
    /// failure from plain bad input (a malformed id or scope a user typed
    /// is [`NodeError::BadInput`]); its exit code is bad input's.
    #[error(transparent)]
    Protocol(amos_protocol::ProtocolError),
    /// A SQLite statement or connection failed.
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    /// The full-text or vector index failed (tantivy's message).
    #[error("index error: {0}")]
    Index(String),
    /// A file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. `cannot read <path>`.
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl NodeError {
    /// The CLI exit code (docs/cli.md): 1 failed, 2 bad input, 3 refused.
    pub fn exit_code(&self) -> u8 {
        match self {
            NodeError::BadInput(_)
            | NodeError::Protocol(_)
            | NodeError::NoSuchMemory(_)
            | NodeError::NotAHome(_) => 2,
            NodeError::Refused(_) => 3,
            _ => 1,
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
        let context = context.into();
        move |source| NodeError::Io { context, source }
    }
}

/// A textual value that did not parse (an id, a scope, a slug: what a user
/// types) is bad input; every other protocol error stays itself.
impl From<amos_protocol::ProtocolError> for NodeError {
    fn from(e: amos_protocol::ProtocolError) -> Self {
        match e {
            amos_protocol::ProtocolError::Malformed(m) => NodeError::BadInput(m),
            e => NodeError::Protocol(e),
        }
    }
}

impl From<tantivy::TantivyError> for NodeError {
    fn from(e: tantivy::TantivyError) -> Self {
        NodeError::Index(e.to_string())
    }
}

/// The result of every fallible call of this crate.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use amos_protocol::{AgentId, ProtocolError};

    /// What a user typed wrong is bad input; a signature that does not
    /// verify stays a protocol error a caller can match, with the same
    /// exit code and message.
    #[test]
    fn a_verification_failure_is_not_bad_input() {
        let typed: NodeError = AgentId::parse("").unwrap_err().into();
        assert!(matches!(typed, NodeError::BadInput(_)), "{typed:?}");
        let forged: NodeError = ProtocolError::BadSignature.into();
        assert!(
            matches!(forged, NodeError::Protocol(ProtocolError::BadSignature)),
            "{forged:?}"
        );
        assert_eq!(forged.exit_code(), 2);
        assert_eq!(forged.to_string(), ProtocolError::BadSignature.to_string());
    }
}
