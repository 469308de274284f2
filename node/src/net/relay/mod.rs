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
//! * A relay also **holds mailboxes** (relay protocol 2, ALPN
//!   `amos-relay/2`, docs/design.md §8.2): a client posts a sealed bundle
//!   for another of its relay peers (`Hold(to)`), the relay keeps it as
//!   opaque bytes in its home ([`held::Held`]) within a quota and until an
//!   expiry, and the recipient lists (`List(from)`), fetches (`Fetch(id)`)
//!   and, once every fact of it committed, acknowledges it (`Drop(id)`):
//!   the relay deletes it. The client's side ([`mailbox`]) runs the
//!   mailbox logic of `api::mailbox` over a spool directory in its own
//!   home that mirrors what the relay holds for the pair.
//!
//! The relay serves only peers registered here with a relay link, within
//! per-peer [`Limits`]. `AMOS_RELAY_FAULT` ([`Fault`]) makes a relay
//! misbehave on purpose, for the tests that show the ends are unharmed.
//!
//! This module owns the relay protocol's bytes: the request headers, the
//! answers and a listing of held bundles, each decoded without trusting
//! the other side (a fuzz target, `relay_frames`, feeds them anything).
//!
//! Must never: decrypt, keep or interpret what it forwards (beyond the
//! pipe's frame lengths, which only [`Fault`] reads); open, import or read
//! the facts of a bundle it holds; forward or hold for a node not
//! registered here as a relay peer.

pub(crate) mod client;
pub(crate) mod held;
pub(crate) mod hub;
pub mod mailbox;
pub(crate) mod socket;

pub use held::HeldLimits;
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

/// A held bundle's id on a relay: the BLAKE3 hash of its bytes (the
/// relay's name for it; the recipient trusts the bundle's own signature,
/// never this).
pub type HeldId = [u8; 32];

/// The first bytes of a stream a client opens on its relay connection.
///
/// Protocol 1 (`amos-relay/1`): `Listen`, `Connect`. Protocol 2
/// (`amos-relay/2`) adds the mailbox requests; a relay answers them only on
/// a connection whose handshake chose protocol 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Make this connection the one the relay offers pipes to us on.
    Listen,
    /// Open a pipe to this node.
    Connect(NodeId),
    /// Hold a sealed bundle for this node (2): a `u64` length (big-endian)
    /// and the bundle's bytes follow; the answer, then on `Ok` its
    /// [`HeldId`].
    Hold(NodeId),
    /// List what the relay holds between the asker and this node (2): the
    /// answer, then on `Ok` a listing ([`encode_listing`]).
    List(NodeId),
    /// The bytes of a bundle held for the asker (2): the answer, then on
    /// `Ok` a `u64` length and the bytes.
    Fetch(HeldId),
    /// Delete a bundle held for the asker, every fact of it committed (2):
    /// the answer (`Ok` also when it was gone already).
    Drop(HeldId),
}

/// The relay's one-byte answer to a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Done: a `Listen` is in force, a `Connect`'s pipe is open.
    Ok,
    /// The asker or the target is not a relay peer of the relay.
    NotRelayPeer,
    /// The target has no standing connection to the relay.
    NotConnected,
    /// The asker or the target is over its limits.
    OverLimit,
    /// Holding it would put the recipient over its mailbox quota here.
    RecipientFull,
    /// Holding it would put the sender over its mailbox quota here.
    SenderFull,
    /// No such bundle is held for the asker.
    NotHeld,
}

/// One bundle a relay holds between two of its peers, as a listing names
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldEntry {
    /// Its id.
    pub id: HeldId,
    /// Held for the asker (from the other node), else from the asker for
    /// the other node (waiting to be taken).
    pub inbound: bool,
    /// Its size in bytes.
    pub len: u64,
}

/// The most entries a listing may name: a decoder refuses more (no
/// allocation sized by the other side's word beyond this).
pub const MAX_LISTING: usize = 100_000;
/// A listing entry's size on the wire.
const ENTRY: usize = 32 + 1 + 8;

/// A listing: a `u32` count (big-endian), then per entry its id, 1 for
/// inbound or 0, and its length as a `u64`.
pub fn encode_listing(entries: &[HeldEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + entries.len() * ENTRY);
    b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        b.extend_from_slice(&e.id);
        b.push(u8::from(e.inbound));
        b.extend_from_slice(&e.len.to_be_bytes());
    }
    b
}

/// The count a listing's first four bytes announce, if within
/// [`MAX_LISTING`]: how many entry bytes to read next.
pub fn listing_len(count: [u8; 4]) -> Option<usize> {
    let n = usize::try_from(u32::from_be_bytes(count)).ok()?;
    (n <= MAX_LISTING).then_some(n * ENTRY)
}

/// Decode a whole listing (count and entries); `None` if it is malformed:
/// a count over [`MAX_LISTING`], a length that does not match it, a flag
/// other than 0 or 1.
pub fn decode_listing(b: &[u8]) -> Option<Vec<HeldEntry>> {
    let count: [u8; 4] = b.get(..4)?.try_into().ok()?;
    let body = &b[4..];
    if listing_len(count)? != body.len() {
        return None;
    }
    body.chunks_exact(ENTRY)
        .map(|e| {
            let id: HeldId = e[..32].try_into().ok()?;
            let inbound = match e[32] {
                0 => false,
                1 => true,
                _ => return None,
            };
            let len = u64::from_be_bytes(e[33..].try_into().ok()?);
            Some(HeldEntry { id, inbound, len })
        })
        .collect()
}

/// A header's length: a tag and a NodeId (or a [`HeldId`]).
pub const HEADER: usize = 33;
const LISTEN: u8 = 1;
const CONNECT: u8 = 2;
/// The tag of the header a relay opens a pipe to a listener with, naming
/// who asked for it (a claim only: the connection inside authenticates).
const FROM: u8 = 3;
const HOLD: u8 = 4;
const LIST: u8 = 5;
const FETCH: u8 = 6;
const DROP: u8 = 7;

impl Request {
    /// Its header.
    pub fn encode(self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        let (tag, body) = match self {
            Request::Listen => (LISTEN, [0; 32]),
            Request::Connect(id) => (CONNECT, id.0),
            Request::Hold(id) => (HOLD, id.0),
            Request::List(id) => (LIST, id.0),
            Request::Fetch(h) => (FETCH, h),
            Request::Drop(h) => (DROP, h),
        };
        b[0] = tag;
        b[1..].copy_from_slice(&body);
        b
    }

    /// A header read from a client; `None` if it names no request.
    pub fn decode(b: &[u8; HEADER]) -> Option<Request> {
        let id: [u8; 32] = b[1..].try_into().ok()?;
        match b[0] {
            LISTEN if id == [0; 32] => Some(Request::Listen),
            CONNECT => Some(Request::Connect(NodeId(id))),
            HOLD => Some(Request::Hold(NodeId(id))),
            LIST => Some(Request::List(NodeId(id))),
            FETCH => Some(Request::Fetch(id)),
            DROP => Some(Request::Drop(id)),
            _ => None,
        }
    }

    /// Whether it belongs to relay protocol 2 (the mailbox requests).
    pub fn needs_v2(self) -> bool {
        matches!(
            self,
            Request::Hold(_) | Request::List(_) | Request::Fetch(_) | Request::Drop(_)
        )
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
    /// Its byte.
    pub fn encode(self) -> u8 {
        match self {
            Answer::Ok => 0,
            Answer::NotRelayPeer => 1,
            Answer::NotConnected => 2,
            Answer::OverLimit => 3,
            Answer::RecipientFull => 4,
            Answer::SenderFull => 5,
            Answer::NotHeld => 6,
        }
    }

    /// A byte read from a relay; `None` if it names no answer.
    pub fn decode(b: u8) -> Option<Answer> {
        Some(match b {
            0 => Answer::Ok,
            1 => Answer::NotRelayPeer,
            2 => Answer::NotConnected,
            3 => Answer::OverLimit,
            4 => Answer::RecipientFull,
            5 => Answer::SenderFull,
            6 => Answer::NotHeld,
            _ => return None,
        })
    }

    /// What the asker is told.
    pub fn describe(self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::NotRelayPeer => {
                "the relay does not serve this pair (both must be its peers with `--relay`)"
            }
            Answer::NotConnected => "the peer is not connected to the relay",
            Answer::OverLimit => "over the relay's limits for now",
            Answer::RecipientFull => {
                "refused: the relay holds as much as its mailbox quota allows for the recipient \
                 (`amos serve --mailbox-quota` on the relay); it is posted again once the \
                 recipient took what waits"
            }
            Answer::SenderFull => {
                "refused: the relay holds as much as its mailbox quota allows from this node \
                 (`amos serve --mailbox-sender-quota` on the relay)"
            }
            Answer::NotHeld => "the relay holds no such bundle for this node",
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
        for r in [
            Request::Listen,
            Request::Connect(id),
            Request::Hold(id),
            Request::List(id),
            Request::Fetch([3; 32]),
            Request::Drop([4; 32]),
        ] {
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
            Answer::RecipientFull,
            Answer::SenderFull,
            Answer::NotHeld,
        ] {
            assert_eq!(Answer::decode(a.encode()), Some(a));
        }
        assert_eq!(Answer::decode(9), None);
        assert!(!Request::Connect(id).needs_v2() && Request::Hold(id).needs_v2());
    }

    #[test]
    fn listings_round_trip_and_refuse_anything_else() {
        let entries = [
            HeldEntry {
                id: [1; 32],
                inbound: true,
                len: 5,
            },
            HeldEntry {
                id: [2; 32],
                inbound: false,
                len: u64::MAX,
            },
        ];
        let b = encode_listing(&entries);
        assert_eq!(decode_listing(&b).as_deref(), Some(&entries[..]));
        assert_eq!(decode_listing(&encode_listing(&[])), Some(vec![]));
        assert_eq!(decode_listing(&b[..b.len() - 1]), None, "short");
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(decode_listing(&longer), None, "trailing bytes");
        let mut flag = b.clone();
        flag[4 + 32] = 2;
        assert_eq!(decode_listing(&flag), None, "a flag is 0 or 1");
        assert_eq!(listing_len(u32::MAX.to_be_bytes()), None, "too many");
        assert_eq!(decode_listing(&[0, 0]), None);
    }
}
