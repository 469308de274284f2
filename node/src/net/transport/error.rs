//! Transport errors, and the mapping from quinn's and rustls's errors to them.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use quinn::{ConnectionError, ReadError, TransportErrorCode, WriteError};

/// Which side of a handshake refused the other's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedBy {
    /// This node refused the peer's key (unknown key, removed peer, or not
    /// the NodeId we dialled).
    Us,
    /// The peer refused this node's key (we are not, or no longer, in its
    /// peers table).
    Peer,
}

impl std::fmt::Display for RefusedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusedBy::Us => "this node",
            RefusedBy::Peer => "the peer",
        })
    }
}

/// What went wrong talking to a peer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No QUIC answer from the address (peer down, wrong address or port,
    /// firewall), or the address cannot be dialled from this endpoint.
    #[error("cannot reach {addr}: {reason}")]
    Unreachable {
        /// The address dialled.
        addr: SocketAddr,
        /// What QUIC said.
        reason: String,
    },
    /// The handshake completed far enough to see keys, and one side refused
    /// the other's identity key.
    #[error("connection refused by {by}: {reason}")]
    Refused {
        /// Which side refused.
        by: RefusedBy,
        /// Why, as TLS said it.
        reason: String,
    },
    /// An operation took longer than allowed (the caller's timeout, or the
    /// connection's idle timeout once established).
    #[error("timed out: {0}")]
    Timeout(String),
    /// A frame's announced length exceeds the limit; nothing was allocated.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The length the frame announced.
        len: u64,
        /// The limit it broke.
        max: usize,
    },
    /// The peer broke the protocol (bad frame, wrong ALPN, TLS or QUIC
    /// violation).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connection or stream was closed or reset (by either side).
    #[error("connection closed: {0}")]
    Closed(String),
    /// The local TLS/QUIC configuration could not be built.
    #[error("transport configuration: {0}")]
    Config(String),
    /// A local I/O failure (e.g. binding the UDP socket).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Run `fut` for at most `limit`; on expiry return [`TransportError::Timeout`]
/// naming `what`.
pub async fn with_timeout<T, F>(limit: Duration, what: &str, fut: F) -> Result<T, TransportError>
where
    F: Future<Output = Result<T, TransportError>>,
{
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result,
        Err(_) => Err(TransportError::Timeout(format!(
            "{what} did not complete within {limit:?}"
        ))),
    }
}

// TLS alert codes (RFC 8446 §6) that mean "your key/certificate was refused".
const ALERT_BAD_CERTIFICATE: u8 = 42;
const ALERT_UNSUPPORTED_CERTIFICATE: u8 = 43;
const ALERT_CERTIFICATE_REVOKED: u8 = 44;
const ALERT_CERTIFICATE_EXPIRED: u8 = 45;
const ALERT_CERTIFICATE_UNKNOWN: u8 = 46;
const ALERT_UNKNOWN_CA: u8 = 48;
const ALERT_ACCESS_DENIED: u8 = 49;
const ALERT_DECRYPT_ERROR: u8 = 51;
const ALERT_UNSUPPORTED_EXTENSION: u8 = 110;
const ALERT_CERTIFICATE_REQUIRED: u8 = 116;
const ALERT_NO_APPLICATION_PROTOCOL: u8 = 120;

/// The TLS alert carried by a QUIC CRYPTO_ERROR code (0x100..=0x1ff).
fn tls_alert(code: TransportErrorCode) -> Option<u8> {
    let raw = u64::from(code);
    if (0x100..=0x1ff).contains(&raw) {
        u8::try_from(raw - 0x100).ok()
    } else {
        None
    }
}

fn is_key_refusal(alert: u8) -> bool {
    matches!(
        alert,
        ALERT_BAD_CERTIFICATE
            | ALERT_UNSUPPORTED_CERTIFICATE
            | ALERT_CERTIFICATE_REVOKED
            | ALERT_CERTIFICATE_EXPIRED
            | ALERT_CERTIFICATE_UNKNOWN
            | ALERT_UNKNOWN_CA
            | ALERT_ACCESS_DENIED
            | ALERT_DECRYPT_ERROR
            | ALERT_CERTIFICATE_REQUIRED
    )
}

const ALPN_HINT: &str = "the two sides share no application protocol (ALPN); \
     the peer speaks no amos protocol version this node speaks (amos/1 and later), or is not an amos node";

/// rustls shows a custom certificate error as
/// `invalid peer certificate: Other(OtherError(<our message>))`; keep the message.
fn clean_rustls_reason(reason: String) -> String {
    reason
        .strip_prefix("invalid peer certificate: Other(OtherError(")
        .and_then(|rest| rest.strip_suffix("))"))
        .map(str::to_owned)
        .unwrap_or(reason)
}

/// Map an error of an established (or establishing) connection (e.g. from
/// `open_bi`/`accept_bi`: a key refusal that TLS 1.3 lets surface only after
/// the handshake is still [`TransportError::Refused`]).
pub fn from_connection_error(e: ConnectionError) -> TransportError {
    match e {
        // Our own QUIC/TLS stack aborted: the reason is the local rustls error.
        ConnectionError::TransportError(t) => match tls_alert(t.code) {
            Some(a) if is_key_refusal(a) => TransportError::Refused {
                by: RefusedBy::Us,
                reason: clean_rustls_reason(t.reason),
            },
            Some(ALERT_NO_APPLICATION_PROTOCOL) => TransportError::Protocol(ALPN_HINT.into()),
            _ => TransportError::Protocol(format!("local QUIC/TLS error: {t}")),
        },
        // The peer's stack aborted: all we have is the alert code.
        ConnectionError::ConnectionClosed(close) => match tls_alert(close.error_code) {
            Some(a) if is_key_refusal(a) => TransportError::Refused {
                by: RefusedBy::Peer,
                reason: format!(
                    "the peer rejected this node's key (TLS alert {a}): this node is not, \
                     or no longer, one of its peers (or it dialled another NodeId at this address)"
                ),
            },
            Some(ALERT_UNSUPPORTED_EXTENSION) => TransportError::Refused {
                by: RefusedBy::Peer,
                reason: "the peer did not accept a raw-public-key identity (TLS alert 110): \
                         not an amos node?"
                    .into(),
            },
            Some(ALERT_NO_APPLICATION_PROTOCOL) => TransportError::Protocol(ALPN_HINT.into()),
            _ => TransportError::Protocol(format!("the peer aborted the connection: {close}")),
        },
        ConnectionError::ApplicationClosed(close) => TransportError::Closed(format!(
            "the peer closed the connection (code {}: {})",
            close.error_code,
            String::from_utf8_lossy(&close.reason)
        )),
        ConnectionError::Reset => {
            TransportError::Closed("reset by the peer (it probably restarted)".into())
        }
        ConnectionError::TimedOut => {
            TransportError::Timeout("the peer stopped answering (QUIC idle timeout)".into())
        }
        ConnectionError::LocallyClosed => {
            TransportError::Closed("the connection was closed by this node".into())
        }
        ConnectionError::VersionMismatch => {
            TransportError::Protocol("the peer supports no common QUIC version".into())
        }
        other => TransportError::Protocol(other.to_string()),
    }
}

/// Map an error of the handshake started by [`crate::transport::connect`]: as
/// for an established connection, except that silence means "unreachable".
pub(crate) fn from_connect_error(addr: SocketAddr, e: ConnectionError) -> TransportError {
    match e {
        ConnectionError::TimedOut => TransportError::Unreachable {
            addr,
            reason: "no QUIC answer (is the peer running, is the address and port right, \
                     is UDP blocked?)"
                .into(),
        },
        ConnectionError::Reset => TransportError::Unreachable {
            addr,
            reason: "the endpoint at this address reset the handshake".into(),
        },
        other => from_connection_error(other),
    }
}

pub(crate) fn from_read_error(e: ReadError) -> TransportError {
    match e {
        ReadError::Reset(code) => {
            TransportError::Closed(format!("the peer reset the stream (code {code})"))
        }
        ReadError::ConnectionLost(c) => from_connection_error(c),
        ReadError::ClosedStream => TransportError::Closed("the stream was already closed".into()),
        other => TransportError::Protocol(other.to_string()),
    }
}

pub(crate) fn from_write_error(e: WriteError) -> TransportError {
    match e {
        WriteError::Stopped(code) => {
            TransportError::Closed(format!("the peer stopped reading the stream (code {code})"))
        }
        WriteError::ConnectionLost(c) => from_connection_error(c),
        WriteError::ClosedStream => {
            TransportError::Closed("the stream was already finished".into())
        }
        other => TransportError::Protocol(other.to_string()),
    }
}

/// Map an I/O error from a stream, recovering quinn's stream errors (which
/// its `AsyncRead`/`AsyncWrite` impls wrap in `io::Error`).
pub(crate) fn from_stream_io(e: std::io::Error) -> TransportError {
    if e.get_ref()
        .is_some_and(|inner| inner.is::<ReadError>() || inner.is::<WriteError>())
    {
        let kind = e.kind();
        if let Some(inner) = e.into_inner() {
            let inner = match inner.downcast::<ReadError>() {
                Ok(r) => return from_read_error(*r),
                Err(other) => other,
            };
            return match inner.downcast::<WriteError>() {
                Ok(w) => from_write_error(*w),
                Err(other) => TransportError::Io(std::io::Error::new(kind, other)),
            };
        }
        return TransportError::Io(std::io::Error::from(kind));
    }
    TransportError::Io(e)
}
