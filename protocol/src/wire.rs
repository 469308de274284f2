//! Wire messages of a live sync session (docs/design.md §7), versioned.
//!
//! One session = both sides pull. Each side opens with [`SyncV1::Hello`]
//! naming its log epoch and the watermark it holds for the other side (the
//! other's epoch and the highest of the other's `seq` it has applied). Each
//! side answers with the facts changed since that watermark that the
//! asker's policy admits ([`SyncV1::Facts`] batches, wire-encoded signed
//! facts), then [`SyncV1::Done`] with the `seq` they cover, which the asker
//! stores as its new watermark once every batch has committed. An idle sync
//! is a `Hello`, a `Done` and a `Digest` each way: bytes independent of the
//! store's size.
//!
//! After both `Done`s of a session that moved no fact either way, each side
//! sends [`SyncV1::Digest`]: its convergence
//! digest over what the policy it gives the other admits, so the other can
//! tell whether the two hold the same facts in those scopes.
//!
//! A session whose watermarks cannot be trusted (or that a side asks to)
//! repairs instead of exporting (docs/design.md §7.9): [`SyncV1::RepairOpen`]
//! and [`SyncV1::RepairRange`] carry negentropy rounds (opaque here, bounded
//! by [`MAX_REPAIR_ROUND`]; `amos_sync::repair` decodes them),
//! [`SyncV1::RepairNeed`] asks for facts by id and [`SyncV1::RepairDone`]
//! moves the watermark.
//!
//! A `Hello` also names where its sender serves (`listen`), so a peer that
//! only ever dialled us can be dialled back; the receiver records it only
//! for a peer it already registered, authenticated by the handshake.
//!
//! **Versions** (docs/design.md §13): the transport's ALPN id names the
//! session protocol's version (`amos/1`, `amos/2`, [`alpn`]); a node offers
//! every version from [`PROTOCOL_VERSION`] down to version 1, newest first,
//! so TLS picks the newest both speak and an older node is still reached
//! (and, if older than [`MIN_PROTOCOL_VERSION`], told why it is refused in a
//! `Refused` it can decode). From version 2 on, the opening message is
//! [`SyncV1::Hello2`]: the `Hello`'s fields, the sender's version and the
//! [`Features`] it decodes. A version-1 peer (545333a, the release before
//! negotiation) gets the version-1 `Hello`, and is taken to decode
//! [`Features::implied_by`]`(1)`. A side sends only what the other decodes:
//! a fact that needs a feature the peer lacks ([`Features::required_by`]) is
//! held back for it.
//!
//! Frames carrying these are length-prefixed by the transport; this module
//! only encodes and decodes one message, with the size limit of [`codec`],
//! and refuses a message whose fields break their bounds ([`SyncV1::check`]).
//! It never decides what a receiver does with an address or an agent.

use std::net::SocketAddr;

use bincode::{Decode, Encode};

use crate::{AgentId, OrgScope, ProtocolError, Scope, codec};

/// At most this many listen addresses in a `Hello`.
pub const MAX_LISTEN: usize = 8;
/// The longest listen address accepted, as text (an IPv6 address with a
/// zone and a port fits).
pub const MAX_LISTEN_LEN: usize = 64;
/// At most this many scopes in a `Welcome`'s `member_of`.
pub const MAX_MEMBER_OF: usize = 16;
/// At most this many scopes in a `Digest`.
pub const MAX_DIGEST_SCOPES: usize = 256;
/// The largest negentropy round a `RepairOpen` or `RepairRange` carries.
pub const MAX_REPAIR_ROUND: usize = 512 * 1024;
/// At most this many ids in one `RepairNeed`.
pub const MAX_REPAIR_IDS: usize = 8192;

/// The session protocol version this code speaks (docs/design.md §13):
/// 1 is 545333a's (no negotiation); 2 adds the versioned hello
/// ([`SyncV1::Hello2`]) and the features it names.
pub const PROTOCOL_VERSION: u16 = 2;
/// The oldest version a peer may speak; an older one is refused with
/// [`VersionError`]'s line.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
/// The ALPN id of the first version: every version up to this one is still
/// offered in the handshake, so a peer too old to sync still connects and
/// reads why it is refused.
pub const FIRST_PROTOCOL_VERSION: u16 = 1;

/// The ALPN id of a protocol version: `amos/N`.
pub fn alpn(version: u16) -> Vec<u8> {
    format!("amos/{version}").into_bytes()
}

/// The version an ALPN id names (`amos/N`, N in canonical decimal, at
/// least 1), or `None`.
pub fn alpn_version(id: &[u8]) -> Option<u16> {
    let n = id.strip_prefix(b"amos/")?;
    let text = std::str::from_utf8(n).ok()?;
    let v: u16 = text.parse().ok()?;
    (v >= 1 && v.to_string() == text).then_some(v)
}

/// The ALPN ids a node speaking up to `max` offers, newest first: every
/// version from `max` down to [`FIRST_PROTOCOL_VERSION`].
pub fn alpn_offer(max: u16) -> Vec<Vec<u8>> {
    (FIRST_PROTOCOL_VERSION..=max.max(FIRST_PROTOCOL_VERSION))
        .rev()
        .map(alpn)
        .collect()
}

/// A peer speaks a version older than this node accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "amos protocol version {peer} is older than {min}, the oldest the refusing node accepts (it speaks {ours}): upgrade the node on version {peer}"
)]
pub struct VersionError {
    /// The peer's version.
    pub peer: u16,
    /// This node's version.
    pub ours: u16,
    /// The oldest this node accepts.
    pub min: u16,
}

/// The version a session runs at: the peer's, if it is at least `min`
/// (the ALPN choice already made it at most ours).
pub fn negotiate(min: u16, ours: u16, peer: u16) -> Result<u16, VersionError> {
    if peer < min {
        Err(VersionError { peer, ours, min })
    } else {
        Ok(peer.min(ours))
    }
}

/// What a node can decode beyond its protocol version's messages: one bit
/// per fact kind (or message) added after it. A peer's set may hold bits
/// this code does not know (a newer peer's): they are kept and ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Features(pub u64);

impl Features {
    /// Content facts with a valid time (fact variant 9, `CONTENT_WITH_VALIDITY`).
    pub const VALID_TIME: Features = Features(1);
    /// Origin-qualified team and project ids (`team:NAME@QUALIFIER`,
    /// docs/design.md §3): in a team or project record, a membership or a
    /// memory's grants. An older node's `Fact::validate` refuses them.
    pub const QUALIFIED_SCOPES: Features = Features(2);
    /// Every feature this code decodes.
    pub const ALL: Features = Features(1 | 2);
    /// None.
    pub const NONE: Features = Features(0);

    /// The features a peer of `version` decodes without saying so: what
    /// 545333a (version 1, no `Hello2`) decodes. From version 2 on, a peer
    /// names its own.
    pub fn implied_by(version: u16) -> Features {
        if version <= 1 {
            Features::VALID_TIME
        } else {
            Features::NONE
        }
    }

    /// Whether every feature of `other` is in this set.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    /// The features of `self` that `other` lacks.
    pub fn without(self, other: Features) -> Features {
        Features(self.0 & !other.0)
    }

    /// Both sets' features.
    pub fn union(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }

    /// The features a receiver needs to decode this fact.
    pub fn required_by(fact: &crate::Fact) -> Features {
        use crate::FactBody;
        let qualified = match &fact.body {
            FactBody::MemoryContent(m) if !m.validity.is_open() => return Features::VALID_TIME,
            FactBody::Team(t) => t.id.is_qualified(),
            FactBody::Project(p) => p.id.is_qualified() || p.team.is_qualified(),
            FactBody::Membership(m) => m.scope.is_qualified(),
            FactBody::MemoryAcl(a) => a.grants.iter().any(Scope::is_qualified),
            _ => false,
        };
        if qualified {
            Features::QUALIFIED_SCOPES
        } else {
            Features::NONE
        }
    }

    /// The features a receiver needs to decode this wire-encoded fact
    /// (`None`: it does not decode here either).
    pub fn required_by_wire(bytes: &[u8]) -> Option<Features> {
        codec::decode_signed(bytes)
            .ok()
            .map(|f| Features::required_by(&f.fact))
    }

    /// Split wire-encoded facts into those a receiver that decodes `self`
    /// can take and, for each one held back, the features it lacks. A set
    /// with every feature this code knows takes all, none decoded. Bytes
    /// that do not decode are kept (the receiver's verification refuses
    /// them, as it would have).
    pub fn split_decodable(self, facts: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, Vec<Features>) {
        if self.contains(Features::ALL) {
            return (facts, Vec::new());
        }
        let mut held = Vec::new();
        let kept = facts
            .into_iter()
            .filter(|f| {
                let needs = Features::required_by_wire(f).unwrap_or(Features::NONE);
                let ok = self.contains(needs);
                if !ok {
                    held.push(needs.without(self));
                }
                ok
            })
            .collect();
        (kept, held)
    }
}

/// A log epoch: random, changes when a store is restored or reset.
pub type Epoch = [u8; 16];

/// What a side knows of the other's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Watermark {
    /// The log epoch the position is in (a restore starts a new one).
    pub epoch: Epoch,
    /// The last `seq` of that log the side holds.
    pub seq: i64,
}

/// Version 1 of the session messages.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum SyncV1 {
    /// Opening: my epoch, what I hold of yours (`None`: nothing yet), and
    /// where I serve (empty if I do not): at most [`MAX_LISTEN`] socket
    /// addresses in their canonical text form ([`parse_listen`]). An
    /// unspecified IP (`0.0.0.0`, `::`) means "the address you see me at,
    /// this port".
    Hello {
        /// The sender's log epoch.
        epoch: Epoch,
        /// Its watermark of the receiver's log.
        have: Option<Watermark>,
        /// Where it serves.
        listen: Vec<String>,
    },
    /// A batch of wire-encoded signed facts (each verified by the receiver).
    Facts {
        /// The facts' wire bytes.
        facts: Vec<Vec<u8>>,
    },
    /// All facts up to `upto` of my log (in `epoch`) that you may receive
    /// were sent; store it as your watermark of me.
    Done {
        /// The sender's log position the receiver now holds.
        upto: Watermark,
    },
    /// The sender refuses to continue; a one-line reason.
    Refused {
        /// Why, in one line.
        reason: String,
    },
    /// Pairing (docs/design.md §7), the first message of a joiner that holds a
    /// code: which invite it answers, and a proof of the invite's secret
    /// bound to this TLS session ([`crate::pairing::join_proof`]). Never part
    /// of a sync session.
    Join {
        /// The invite's public id.
        invite: [u8; 16],
        /// The proof of the invite's secret, bound to this TLS session.
        proof: [u8; 32],
        /// The joiner's display name.
        name: String,
        /// The UDP port the joiner serves on, if it serves (the inviter
        /// records the address it saw with this port).
        listen_port: Option<u16>,
        /// The joiner's agent (`amos join --as AGENT`), for the inviter to
        /// add to the scopes the invite's policy names. A valid slug.
        agent: Option<AgentId>,
    },
    /// The inviter accepted a `Join`: both sides record each other with
    /// `policy`; the inviter hands over its mesh key, and names the scopes
    /// it made the joiner's agent a member of (at most [`MAX_MEMBER_OF`]).
    Welcome {
        /// The policy each side gives the other (`full` or `scoped:…`).
        policy: String,
        /// The inviter's display name.
        name: String,
        /// The mesh key, if the inviter has one.
        mesh_key: Option<[u8; 32]>,
        /// The teams and projects the joiner's agent was made a member of.
        member_of: Vec<OrgScope>,
    },
    /// After both `Done`s, only in a session in which no fact moved either
    /// way (both sides count the same batches): the sender's convergence digest (the one `amos
    /// digest --scope S…` prints) over the facts the policy it gives the
    /// receiver admits now, and how many facts that is. `scopes` are that
    /// policy's (`global`, `team:`, `project:` only, strictly ascending, at
    /// most [`MAX_DIGEST_SCOPES`]); empty means `full`. The receiver
    /// compares it with its own digest over the same scopes. Appended after
    /// the other variants: older encodings decode as before, but an older
    /// node cannot decode this one (docs/design.md §7).
    Digest {
        /// The scopes the digest covers; empty means `full`.
        scopes: Vec<Scope>,
        /// BLAKE3 over the facts, in the digest's order.
        digest: [u8; 32],
        /// How many facts it covers.
        facts: u64,
    },
    /// Range-based repair (docs/design.md §7.9), the initiator's first
    /// message: "reconcile the facts we may send each other", with its
    /// first negentropy round (at most [`MAX_REPAIR_ROUND`] bytes) over
    /// the facts the policy it gives the receiver admits. Sent before the
    /// sender's `Done`. Appended after `Digest`: an older node cannot
    /// decode this or the three that follow.
    RepairOpen {
        /// The negentropy round.
        round: Vec<u8>,
    },
    /// A further negentropy round, either way (at most [`MAX_REPAIR_ROUND`]).
    RepairRange {
        /// The negentropy round.
        round: Vec<u8>,
    },
    /// From the initiator once reconciled: send me the facts with these
    /// ids (BLAKE3 of their wire encoding; at most [`MAX_REPAIR_IDS`], strictly
    /// ascending). The receiver sends only those its export filter lets out.
    RepairNeed {
        /// The ids of the facts wanted.
        ids: Vec<[u8; 32]>,
    },
    /// After the sender's `Done`: every fact of its repair set up to `upto`
    /// that the reconciliation found the receiver lacks was sent; store it
    /// as your watermark of me.
    RepairDone {
        /// The sender's repair position the receiver now holds.
        upto: Watermark,
    },
    /// The opening message from protocol version 2 on (sent only in a
    /// session whose ALPN id is `amos/2` or later): a `Hello`'s fields,
    /// the sender's protocol version and the [`Features`] it decodes.
    /// Appended after `RepairDone`: a version-1 node never receives one.
    Hello2 {
        /// The sender's log epoch.
        epoch: Epoch,
        /// Its watermark of the receiver's log.
        have: Option<Watermark>,
        /// Where it serves (as in `Hello`).
        listen: Vec<String>,
        /// The sender's protocol version (at least 2).
        version: u16,
        /// What it decodes ([`Features`] bits; unknown bits are kept).
        features: u64,
    },
}

impl SyncV1 {
    /// The bounds a decoded message must keep (a peer's bytes can carry
    /// anything the encoding allows): listen addresses and `member_of` are
    /// bounded and well-formed, ids are valid slugs.
    pub fn check(&self) -> Result<(), ProtocolError> {
        match self {
            SyncV1::Hello2 { version, .. } if *version < 2 => {
                return Err(ProtocolError::malformed(format!(
                    "a versioned hello names version {version}"
                )));
            }
            SyncV1::Hello { listen, .. } | SyncV1::Hello2 { listen, .. } => {
                if listen.len() > MAX_LISTEN {
                    return Err(ProtocolError::malformed(format!(
                        "a hello names {} listen addresses (at most {MAX_LISTEN})",
                        listen.len()
                    )));
                }
                for a in listen {
                    parse_listen(a)?;
                }
            }
            SyncV1::Join {
                agent: Some(agent), ..
            } if !agent.is_valid() => {
                return Err(ProtocolError::malformed(
                    "a join names a malformed agent id",
                ));
            }
            SyncV1::Welcome { member_of, .. } => {
                if member_of.len() > MAX_MEMBER_OF {
                    return Err(ProtocolError::malformed(format!(
                        "a welcome names {} scopes (at most {MAX_MEMBER_OF})",
                        member_of.len()
                    )));
                }
                let valid = |s: &OrgScope| match s {
                    OrgScope::Team(t) => t.is_valid(),
                    OrgScope::Project(p) => p.is_valid(),
                };
                if !member_of.iter().all(valid) {
                    return Err(ProtocolError::malformed(
                        "a welcome names a malformed scope",
                    ));
                }
            }
            SyncV1::Digest { scopes, .. } => check_digest_scopes(scopes)?,
            SyncV1::RepairOpen { round } | SyncV1::RepairRange { round }
                if round.len() > MAX_REPAIR_ROUND =>
            {
                return Err(ProtocolError::malformed(format!(
                    "a repair round of {} bytes (at most {MAX_REPAIR_ROUND})",
                    round.len()
                )));
            }
            SyncV1::RepairNeed { ids } => check_repair_ids(ids)?,
            _ => {}
        }
        Ok(())
    }
}

/// A `Digest`'s scopes: at most [`MAX_DIGEST_SCOPES`], strictly ascending
/// (one spelling of a set), only what a scoped peer policy may hold
/// (`global`, `team:`, `project:` with valid slugs).
pub fn check_digest_scopes(scopes: &[Scope]) -> Result<(), ProtocolError> {
    if scopes.len() > MAX_DIGEST_SCOPES {
        return Err(ProtocolError::malformed(format!(
            "a digest names {} scopes (at most {MAX_DIGEST_SCOPES})",
            scopes.len()
        )));
    }
    let valid = |s: &Scope| match s {
        Scope::Global => true,
        Scope::Team(t) => t.is_valid(),
        Scope::Project(p) => p.is_valid(),
        Scope::Private | Scope::Agent(_) => false,
    };
    if !scopes.iter().all(valid) {
        return Err(ProtocolError::malformed(
            "a digest names a scope no peer policy holds",
        ));
    }
    if !scopes.windows(2).all(|w| w[0] < w[1]) {
        return Err(ProtocolError::malformed(
            "a digest's scopes are not in ascending order",
        ));
    }
    Ok(())
}

/// A `RepairNeed`'s ids: at most [`MAX_REPAIR_IDS`], strictly ascending
/// (one spelling of a set).
pub fn check_repair_ids(ids: &[[u8; 32]]) -> Result<(), ProtocolError> {
    if ids.len() > MAX_REPAIR_IDS {
        return Err(ProtocolError::malformed(format!(
            "a repair asks for {} facts in one message (at most {MAX_REPAIR_IDS})",
            ids.len()
        )));
    }
    if !ids.windows(2).all(|w| w[0] < w[1]) {
        return Err(ProtocolError::malformed(
            "a repair's ids are not in ascending order",
        ));
    }
    Ok(())
}

/// A listen address as a `Hello` carries it: a socket address in Rust's
/// canonical text form (`1.2.3.4:4747`, `[::1]:4747`), at most
/// [`MAX_LISTEN_LEN`] bytes, with a port other than 0. Anything else (host
/// names, junk, a second spelling of the same address) is refused.
pub fn parse_listen(text: &str) -> Result<SocketAddr, ProtocolError> {
    let bad = || ProtocolError::malformed(format!("bad listen address {:?}", truncate(text)));
    if text.len() > MAX_LISTEN_LEN {
        return Err(bad());
    }
    let addr: SocketAddr = text.parse().map_err(|_| bad())?;
    if addr.port() == 0 || addr.to_string() != text {
        return Err(bad());
    }
    Ok(addr)
}

fn truncate(s: &str) -> String {
    s.chars().take(MAX_LISTEN_LEN).collect()
}

/// The versioned envelope.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum SyncMessage {
    /// Version 1.
    V1(SyncV1),
}

impl SyncMessage {
    /// The message's canonical bytes.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decode one message (canonical, size-limited, no trailing bytes,
    /// within [`SyncV1::check`]'s bounds). Non-minimal integer encodings are
    /// refused, as for facts: one message, one encoding.
    pub fn decode(bytes: &[u8]) -> Result<SyncMessage, ProtocolError> {
        let m: SyncMessage = codec::decode_canonical("sync message", bytes)?;
        let SyncMessage::V1(v1) = &m;
        v1.check()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_round_trip() {
        let w = Watermark {
            epoch: [7; 16],
            seq: 42,
        };
        for m in [
            SyncV1::Hello {
                epoch: [1; 16],
                have: None,
                listen: vec![],
            },
            SyncV1::Hello {
                epoch: [1; 16],
                have: Some(w),
                listen: vec!["0.0.0.0:4747".into(), "[::1]:4748".into()],
            },
            SyncV1::Facts {
                facts: vec![vec![1, 2, 3], vec![]],
            },
            SyncV1::Done { upto: w },
            SyncV1::Refused {
                reason: "no".into(),
            },
            SyncV1::Join {
                invite: [5; 16],
                proof: [6; 32],
                name: "laptop".into(),
                listen_port: Some(4747),
                agent: Some(AgentId::parse("bob").unwrap()),
            },
            SyncV1::Welcome {
                policy: "team:apollo".into(),
                name: "server".into(),
                mesh_key: None,
                member_of: vec![OrgScope::Team("apollo".parse().unwrap())],
            },
            SyncV1::Digest {
                scopes: vec![],
                digest: [9; 32],
                facts: 0,
            },
            SyncV1::Digest {
                scopes: vec![Scope::Global, Scope::Team("apollo".parse().unwrap())],
                digest: [3; 32],
                facts: 1234,
            },
            SyncV1::RepairOpen {
                round: vec![0x61, 0, 0],
            },
            SyncV1::RepairRange { round: vec![] },
            SyncV1::RepairNeed {
                ids: vec![[1; 32], [2; 32]],
            },
            SyncV1::RepairNeed { ids: vec![] },
            SyncV1::RepairDone { upto: w },
        ] {
            let m = SyncMessage::V1(m);
            assert_eq!(SyncMessage::decode(&m.encode()).unwrap(), m);
        }
    }

    /// Found by the `sync_message` fuzz target: a `Facts` batch whose length
    /// is a non-minimal varint (0 written in five bytes) decoded to the same
    /// message as the minimal form.
    #[test]
    fn non_canonical_lengths_are_refused() {
        assert!(SyncMessage::decode(&[0, 1, 252, 0, 0, 0, 0]).is_err());
        assert_eq!(
            SyncMessage::decode(&[0, 1, 0]).unwrap(),
            SyncMessage::V1(SyncV1::Facts { facts: vec![] })
        );
    }

    fn hello(listen: &[&str]) -> Vec<u8> {
        SyncMessage::V1(SyncV1::Hello {
            epoch: [1; 16],
            have: None,
            listen: listen.iter().map(|s| s.to_string()).collect(),
        })
        .encode()
    }

    #[test]
    fn listen_addresses_are_bounded_and_well_formed() {
        let eight: Vec<String> = (1..=8).map(|p| format!("10.0.0.1:{p}")).collect();
        let eight: Vec<&str> = eight.iter().map(String::as_str).collect();
        assert!(SyncMessage::decode(&hello(&eight)).is_ok());
        let mut nine = eight.clone();
        nine.push("10.0.0.1:9");
        assert!(SyncMessage::decode(&hello(&nine)).is_err(), "too many");
        for junk in [
            "",
            "localhost:4747",
            "example.org:4747",
            "1.2.3.4",
            "1.2.3.4:0",
            "1.2.3.4:65536",
            "01.2.3.4:4747",
            " 1.2.3.4:4747",
            "[::0001]:4747",
            "::1:4747",
            "1.2.3.4:4747\n",
        ] {
            assert!(SyncMessage::decode(&hello(&[junk])).is_err(), "{junk:?}");
        }
        let long = format!("[::1%{}]:4747", "9".repeat(80));
        assert!(SyncMessage::decode(&hello(&[&long])).is_err(), "too long");
        assert_eq!(parse_listen("[::]:4747").unwrap().port(), 4747);
    }

    #[test]
    fn join_agents_and_welcome_scopes_are_checked() {
        let join = |agent: &str| {
            // A slug that skipped the parser (a peer's bytes can hold anything).
            let mut bytes = SyncMessage::V1(SyncV1::Join {
                invite: [0; 16],
                proof: [0; 32],
                name: String::new(),
                listen_port: None,
                agent: Some(AgentId::parse("bobx").unwrap()),
            })
            .encode();
            let at = bytes.len() - 4;
            bytes.splice(at.., agent.bytes());
            bytes
        };
        assert!(SyncMessage::decode(&join("bobx")).is_ok());
        assert!(SyncMessage::decode(&join("B O!")).is_err());
        let welcome = |n: usize| {
            SyncMessage::V1(SyncV1::Welcome {
                policy: "team:apollo".into(),
                name: String::new(),
                mesh_key: None,
                member_of: vec![OrgScope::Team("apollo".parse().unwrap()); n],
            })
            .encode()
        };
        assert!(SyncMessage::decode(&welcome(MAX_MEMBER_OF)).is_ok());
        assert!(SyncMessage::decode(&welcome(MAX_MEMBER_OF + 1)).is_err());
    }

    #[test]
    fn digest_scopes_are_bounded_sorted_and_policy_scopes() {
        let digest = |scopes: Vec<Scope>| {
            SyncMessage::V1(SyncV1::Digest {
                scopes,
                digest: [0; 32],
                facts: 1,
            })
            .encode()
        };
        let team = |t: &str| Scope::Team(t.parse().unwrap());
        assert!(SyncMessage::decode(&digest(vec![Scope::Global, team("a"), team("b")])).is_ok());
        assert!(
            SyncMessage::decode(&digest(vec![team("b"), team("a")])).is_err(),
            "order"
        );
        assert!(
            SyncMessage::decode(&digest(vec![team("a"), team("a")])).is_err(),
            "twice"
        );
        assert!(SyncMessage::decode(&digest(vec![Scope::Private])).is_err());
        let agent = Scope::Agent(AgentId::parse("bob").unwrap());
        assert!(SyncMessage::decode(&digest(vec![agent])).is_err());
        let many: Vec<Scope> = (0..=MAX_DIGEST_SCOPES)
            .map(|i| team(&format!("t{i:03}")))
            .collect();
        assert!(SyncMessage::decode(&digest(many[..MAX_DIGEST_SCOPES].to_vec())).is_ok());
        assert!(SyncMessage::decode(&digest(many)).is_err(), "too many");
    }

    /// The variants before `Digest` keep their tags: a `Hello` encodes with
    /// tag 0 as before (an older node's messages still decode).
    #[test]
    fn older_variants_keep_their_encoding() {
        let done = SyncMessage::V1(SyncV1::Done {
            upto: Watermark {
                epoch: [0; 16],
                seq: 1,
            },
        })
        .encode();
        assert_eq!(&done[..2], &[0, 2], "V1, then Done's tag");
        let digest = SyncMessage::V1(SyncV1::Digest {
            scopes: vec![],
            digest: [0; 32],
            facts: 0,
        })
        .encode();
        assert_eq!(&digest[..2], &[0, 6], "Digest comes after Welcome");
    }

    #[test]
    fn repair_messages_are_bounded_and_canonical() {
        let enc = |m: SyncV1| SyncMessage::V1(m).encode();
        let round = |n: usize| SyncV1::RepairRange { round: vec![7; n] };
        assert!(SyncMessage::decode(&enc(round(MAX_REPAIR_ROUND))).is_ok());
        assert!(SyncMessage::decode(&enc(round(MAX_REPAIR_ROUND + 1))).is_err());
        let open = SyncV1::RepairOpen {
            round: vec![7; MAX_REPAIR_ROUND + 1],
        };
        assert!(SyncMessage::decode(&enc(open)).is_err());
        let need = |ids: Vec<[u8; 32]>| enc(SyncV1::RepairNeed { ids });
        assert!(SyncMessage::decode(&need(vec![[1; 32], [2; 32]])).is_ok());
        assert!(
            SyncMessage::decode(&need(vec![[2; 32], [1; 32]])).is_err(),
            "order"
        );
        assert!(
            SyncMessage::decode(&need(vec![[1; 32], [1; 32]])).is_err(),
            "twice"
        );
        let many: Vec<[u8; 32]> = (0..=MAX_REPAIR_IDS as u32)
            .map(|i| {
                let mut id = [0u8; 32];
                id[..4].copy_from_slice(&i.to_be_bytes());
                id
            })
            .collect();
        assert!(SyncMessage::decode(&need(many[..MAX_REPAIR_IDS].to_vec())).is_ok());
        assert!(SyncMessage::decode(&need(many)).is_err(), "too many");
        // Appended after `Digest`: the older tags are unchanged.
        assert_eq!(&enc(SyncV1::RepairOpen { round: vec![] })[..2], &[0, 7]);
        assert_eq!(&enc(SyncV1::RepairRange { round: vec![] })[..2], &[0, 8]);
        assert_eq!(&enc(SyncV1::RepairNeed { ids: vec![] })[..2], &[0, 9]);
        let done = enc(SyncV1::RepairDone {
            upto: Watermark {
                epoch: [0; 16],
                seq: 1,
            },
        });
        assert_eq!(&done[..2], &[0, 10]);
    }

    #[test]
    fn alpn_ids_name_versions_and_the_offer_is_newest_first() {
        assert_eq!(alpn(1), b"amos/1");
        assert_eq!(alpn_version(b"amos/1"), Some(1));
        assert_eq!(
            alpn_version(&alpn(PROTOCOL_VERSION)),
            Some(PROTOCOL_VERSION)
        );
        for junk in [
            &b"amos/0"[..],
            b"amos/01",
            b"amos/",
            b"amos/+2",
            b"amos/65536",
            b"amos/2 ",
            b"h3",
        ] {
            assert_eq!(
                alpn_version(junk),
                None,
                "{:?}",
                String::from_utf8_lossy(junk)
            );
        }
        assert_eq!(alpn_offer(2), vec![b"amos/2".to_vec(), b"amos/1".to_vec()]);
        // A node capped at version 1 offers only what 545333a offered.
        assert_eq!(alpn_offer(1), vec![b"amos/1".to_vec()]);
    }

    #[test]
    fn a_peer_older_than_the_minimum_is_refused_naming_both_versions() {
        assert_eq!(negotiate(1, 2, 1), Ok(1));
        assert_eq!(negotiate(1, 2, 2), Ok(2));
        assert_eq!(negotiate(1, 2, 7), Ok(2));
        let e = negotiate(2, 3, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "amos protocol version 1 is older than 2, the oldest the refusing node accepts (it speaks 3): upgrade the node on version 1"
        );
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn the_versioned_hello_is_appended_and_checked() {
        let hello2 = |version: u16, listen: Vec<String>| {
            SyncMessage::V1(SyncV1::Hello2 {
                epoch: [1; 16],
                have: None,
                listen,
                version,
                features: u64::MAX,
            })
        };
        let m = hello2(2, vec!["127.0.0.1:4747".into()]);
        let bytes = m.encode();
        assert_eq!(&bytes[..2], &[0, 11], "after RepairDone");
        assert_eq!(
            SyncMessage::decode(&bytes).unwrap(),
            m,
            "unknown feature bits kept"
        );
        assert!(SyncMessage::decode(&hello2(1, vec![]).encode()).is_err());
        assert!(SyncMessage::decode(&hello2(2, vec!["nowhere".into()]).encode()).is_err());
    }

    #[test]
    fn features_say_what_a_fact_needs_and_what_version_1_decodes() {
        use crate::{
            Fact, FactBody, Hlc, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryType,
            NodeId, Validity,
        };
        let m = MemoryContent {
            id: MemoryId([1; 16]),
            fixed: MemoryFixed {
                owner: AgentId::parse("alice").unwrap(),
                created_ms: 1_000,
                origin: NodeId([1; 32]),
            },
            kind: MemoryType::default(),
            text: MemoryText::Plain("deploy port is 8080".into()),
            tags: vec![],
            importance: 0.5,
            confidence: 1.0,
            pinned: false,
            expires_ms: None,
            supersedes: None,
            validity: Validity::default(),
        };
        let plain = Fact {
            clock: Hlc {
                wall_ms: 1,
                logical: 0,
                node: NodeId([1; 32]),
            },
            body: FactBody::MemoryContent(m.clone()),
        };
        assert_eq!(Features::required_by(&plain), Features::NONE);
        let timed = Fact {
            body: FactBody::MemoryContent(MemoryContent {
                validity: Validity {
                    from_ms: Some(5),
                    to_ms: None,
                },
                ..m
            }),
            ..plain
        };
        assert_eq!(Features::required_by(&timed), Features::VALID_TIME);
        // 545333a decodes valid-time facts (variant 9); a version-2 peer says.
        assert!(Features::implied_by(1).contains(Features::VALID_TIME));
        assert_eq!(Features::implied_by(2), Features::NONE);
        assert!(Features::ALL.contains(Features::VALID_TIME));
        assert_eq!(
            Features::ALL.without(Features::VALID_TIME),
            Features::QUALIFIED_SCOPES
        );
    }

    #[test]
    fn a_qualified_scope_needs_its_feature_wherever_it_is_named() {
        use crate::{
            Fact, FactBody, Grants, Hlc, MembershipFact, MemoryAcl, MemoryFixed, MemoryId, NodeId,
            ProjectFact, ProjectId, TeamFact, TeamId,
        };
        let origin = NodeId([3; 32]);
        let fact = |body| Fact {
            clock: Hlc {
                wall_ms: 1,
                logical: 0,
                node: origin,
            },
            body,
        };
        let q = TeamId::qualified("zeus", &origin).unwrap();
        let legacy = TeamId::parse("zeus").unwrap();
        let team = |id: &TeamId| {
            fact(FactBody::Team(TeamFact {
                id: id.clone(),
                origin,
                name: "zeus".into(),
                present: true,
            }))
        };
        let member = |scope: OrgScope| {
            fact(FactBody::Membership(MembershipFact {
                scope,
                agent: AgentId::parse("alice").unwrap(),
                role: "member".into(),
                present: true,
            }))
        };
        let project = |id: ProjectId, team: &TeamId| {
            fact(FactBody::Project(ProjectFact {
                id,
                team: team.clone(),
                origin,
                name: "ui".into(),
                present: true,
            }))
        };
        let acl = |scopes: &[Scope]| {
            fact(FactBody::MemoryAcl(MemoryAcl {
                id: MemoryId([1; 16]),
                fixed: MemoryFixed {
                    owner: AgentId::parse("alice").unwrap(),
                    created_ms: 1,
                    origin,
                },
                grants: Grants::from_scopes(scopes.iter().cloned()),
            }))
        };
        let needs = Features::QUALIFIED_SCOPES;
        assert_eq!(Features::required_by(&team(&q)), needs);
        assert_eq!(Features::required_by(&team(&legacy)), Features::NONE);
        assert_eq!(
            Features::required_by(&member(OrgScope::Team(q.clone()))),
            needs
        );
        assert_eq!(
            Features::required_by(&member(OrgScope::Team(legacy.clone()))),
            Features::NONE
        );
        let ui = ProjectId::parse("ui").unwrap();
        assert_eq!(Features::required_by(&project(ui.clone(), &q)), needs);
        assert_eq!(
            Features::required_by(&project(
                ProjectId::qualified("ui", &origin).unwrap(),
                &legacy
            )),
            needs
        );
        assert_eq!(Features::required_by(&project(ui, &legacy)), Features::NONE);
        assert_eq!(
            Features::required_by(&acl(&[Scope::Global, Scope::Team(q)])),
            needs
        );
        assert_eq!(
            Features::required_by(&acl(&[Scope::Global, Scope::Team(legacy)])),
            Features::NONE
        );
        // Neither version 1 nor a version-2 peer that does not say so decodes them.
        assert!(!Features::implied_by(1).contains(needs));
        assert!(!Features::VALID_TIME.contains(needs));
        assert!(Features::ALL.contains(needs));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = SyncMessage::decode(&bytes);
        }
    }
}
