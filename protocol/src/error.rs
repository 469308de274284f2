//! Errors of the protocol crate: malformed input, bad encodings, bad signatures.

/// Everything that can go wrong decoding, validating or verifying protocol values.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A textual value (id, scope, slug, …) did not parse; the message names it.
    #[error("{0}")]
    Malformed(String),
    /// Bytes did not decode as the expected canonical encoding.
    #[error("undecodable {what}: {reason}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// Why it did not decode.
        reason: String,
    },
    /// A value exceeded a size limit.
    #[error("{what} is too large: {size} bytes (limit {limit})")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit it exceeded.
        limit: usize,
    },
    /// A decoded fact broke a rule of the data model.
    #[error("invalid fact: {0}")]
    InvalidFact(String),
    /// The signature does not verify for the fact's author.
    #[error("bad signature")]
    BadSignature,
    /// A fact carries a time past [`crate::MAX_TIME_MS`] (docs/design.md
    /// §4): `what` names the field, `ms` is its value.
    #[error(
        "invalid fact: {what} ({ms} ms) is past 9999-12-31T23:59:59.999Z, the latest time amos keeps"
    )]
    TimeOutOfBounds {
        /// The field holding the time.
        what: &'static str,
        /// Its value in Unix milliseconds.
        ms: u64,
    },
}

impl ProtocolError {
    pub(crate) fn malformed(msg: impl Into<String>) -> Self {
        ProtocolError::Malformed(msg.into())
    }
}
