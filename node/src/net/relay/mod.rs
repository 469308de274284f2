//! Relays (docs/design.md §7.11): a node reaches a peer it cannot dial —
//! behind NAT, no inbound traffic — through a third amos node both have a
//! relay link with, and the relay learns NodeIds, timing and byte counts
//! only.
//!
//! * A relay client keeps a **standing connection** (ALPN `amos-relay/1`,
//!   [`crate::net::transport::tls::RELAY_ALPN`]) to each relay peer it knows
//!   an address for, and says `Listen` on it ([`client::keep_standing`]).
//! * A dialler opens a relay connection and asks `Connect(target)` on a new
//!   stream ([`client::dial_via`]); the relay ([`hub::Hub`]) opens a stream
//!   on the target's standing connection, says `From(dialler)`, and from
//!   then copies the bytes of the two streams into each other: a **pipe**.
//! * Each end runs the *normal* amos connection over the pipe: a quinn
//!   endpoint whose socket is the pipe ([`socket::PipeSocket`]), with the
//!   same TLS, pinned keys, ALPN ids and session code as a direct one. The
//!   relay sees only encrypted QUIC packets; what it alters does not
//!   decrypt, what it drops or reorders QUIC recovers or the session fails.
//!
//! The relay serves only peers registered here with a relay link, within
//! per-peer [`Limits`]. `AMOS_RELAY_FAULT` ([`Fault`]) makes a relay
//! misbehave on purpose, for the tests that show the ends are unharmed.
//!
//! Must never: decrypt, keep or interpret what it forwards (beyond the
//! pipe's frame lengths, which only [`Fault`] reads); forward for a node
//! not registered here as a relay peer.

pub(crate) mod client;
pub(crate) mod hub;
pub(crate) mod socket;

pub(crate) use hub::Hub;
pub use hub::{Fault, Limits};

use amos_protocol::NodeId;

/// A byte size as the relay's flags take it: digits, then optionally `K`,
/// `M` or `G` (binary multiples).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The first bytes of a stream a client opens on its relay connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// Make this connection the one the relay offers pipes to us on.
    Listen,
    /// Open a pipe to this node.
    Connect(NodeId),
}

/// The relay's one-byte answer to a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Done: a `Listen` is in force, a `Connect`'s pipe is open.
    Ok,
    /// The asker or the target is not a relay peer of the relay.
    NotRelayPeer,
    /// The target has no standing connection to the relay.
    NotConnected,
    /// The asker or the target is over its limits.
    OverLimit,
}

/// A header's length: a tag and a NodeId.
pub(crate) const HEADER: usize = 33;
const LISTEN: u8 = 1;
const CONNECT: u8 = 2;
/// The tag of the header a relay opens a pipe to a listener with, naming
/// who asked for it (a claim only: the connection inside authenticates).
const FROM: u8 = 3;

impl Request {
    pub(crate) fn encode(self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        match self {
            Request::Listen => b[0] = LISTEN,
            Request::Connect(id) => {
                b[0] = CONNECT;
                b[1..].copy_from_slice(&id.0);
            }
        }
        b
    }

    pub(crate) fn decode(b: &[u8; HEADER]) -> Option<Request> {
        let id: [u8; 32] = b[1..].try_into().ok()?;
        match b[0] {
            LISTEN if id == [0; 32] => Some(Request::Listen),
            CONNECT => Some(Request::Connect(NodeId(id))),
            _ => None,
        }
    }
}

/// The header of a pipe the relay offers a listener.
pub(crate) fn encode_from(from: &NodeId) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[0] = FROM;
    b[1..].copy_from_slice(&from.0);
    b
}

/// Who a pipe's header says asked for it.
pub(crate) fn decode_from(b: &[u8; HEADER]) -> Option<NodeId> {
    (b[0] == FROM).then(|| b[1..].try_into().ok().map(NodeId))?
}

impl Answer {
    pub(crate) fn encode(self) -> u8 {
        match self {
            Answer::Ok => 0,
            Answer::NotRelayPeer => 1,
            Answer::NotConnected => 2,
            Answer::OverLimit => 3,
        }
    }

    pub(crate) fn decode(b: u8) -> Option<Answer> {
        Some(match b {
            0 => Answer::Ok,
            1 => Answer::NotRelayPeer,
            2 => Answer::NotConnected,
            3 => Answer::OverLimit,
            _ => return None,
        })
    }

    /// What the asker is told.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::NotRelayPeer => {
                "the relay does not serve this pair (both must be its peers with `--relay`)"
            }
            Answer::NotConnected => "the peer is not connected to the relay",
            Answer::OverLimit => "over the relay's limits for now",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("8K"), Some(8192));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("4g"), Some(4 << 30));
        for bad in ["", "M", "-1", "1.5M", "1T", "99999999999G"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn headers_round_trip_and_refuse_anything_else() {
        let id = NodeId([7; 32]);
        for r in [Request::Listen, Request::Connect(id)] {
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        assert_eq!(decode_from(&encode_from(&id)), Some(id));
        assert_eq!(Request::decode(&encode_from(&id)), None);
        assert_eq!(decode_from(&Request::Connect(id).encode()), None);
        let mut listen = Request::Listen.encode();
        listen[5] = 1;
        assert_eq!(Request::decode(&listen), None, "Listen names no node");
        assert_eq!(Request::decode(&[0; HEADER]), None);
        for a in [
            Answer::Ok,
            Answer::NotRelayPeer,
            Answer::NotConnected,
            Answer::OverLimit,
        ] {
            assert_eq!(Answer::decode(a.encode()), Some(a));
        }
        assert_eq!(Answer::decode(9), None);
    }
}
