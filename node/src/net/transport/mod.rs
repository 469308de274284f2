//! QUIC transport between nodes: mutual raw-public-key TLS 1.3 over quinn,
//! and length-prefixed frames on its streams.
//!
//! Each node presents its ed25519 identity key as an RFC 7250 raw public key
//! (no certificates, no CA); the key *is* the [`NodeId`](amos_protocol::NodeId).
//! Both sides present one, and each side accepts the other only if its
//! [`PeerAcceptor`] says yes — consulted on every handshake, so a peer removed
//! from the peers table is refused on its next connection. A dialling client
//! additionally requires the key to be the NodeId it dialled.
//!
//! * [`tls`]: the rustls configurations (ring provider, TLS 1.3 only, the
//!   ALPN ids `amos/N` of every version spoken, newest first, no session
//!   resumption so every connection runs the verifiers).
//! * [`endpoint`]: quinn endpoints, [`connect`], [`accept_incoming`],
//!   [`peer_node_id`].
//! * [`version`]: what this node speaks (protocol version, features) and
//!   what a connection negotiated.
//! * [`frame`]: `u32` big-endian length-prefixed frames, at most
//!   [`MAX_FRAME`] bytes, the limit checked before any allocation.
//!
//! Timeouts are the caller's ([`with_timeout`] helps); nothing here sleeps.
//!
//! Note: in TLS 1.3 the client finishes its side of the handshake before the
//! server has checked the client's key, so a client whose key the server
//! refuses may see [`TransportError::Refused`] only at its first stream
//! operation, after [`connect`] returned.

pub(crate) mod endpoint;
pub(crate) mod error;
pub(crate) mod frame;
pub(crate) mod tls;
pub(crate) mod version;

pub use endpoint::{accept_incoming, client_endpoint, connect, peer_node_id, server_endpoint};
pub use error::{RefusedBy, TransportError, from_connection_error, with_timeout};
pub use frame::{MAX_FRAME, read_frame, read_frame_with_limit, write_frame};
pub use tls::{PeerAcceptor, client_config, server_config};
pub use version::{Speaks, negotiated, speaks};
