//! Pairing codes (docs/design.md §7): what `amos team invite` prints and
//! `amos join` reads — the inviter's NodeId, address hints, a one-time
//! 128-bit secret, the policy scope, an expiry, and a checksum, in
//! copy-paste-safe lowercase base32 prefixed `amos1-`.
//!
//! ```text
//! amos1-<base32( canonical bincode of WireCode || blake3(body)[..4] )>
//! ```
//!
//! `WireCode` is versioned: `V1` (the fields above) is what every release
//! reads and what a code without a relay is still written as; `V2` adds a
//! relay the joiner reaches the inviter through (`amos team invite --via`,
//! docs/design.md §7.11). A release that knows only `V1` refuses a `V2`
//! code in one line ("unknown version").
//!
//! The checksum catches typos (a mistyped code is refused before anything is
//! dialled); it is not a signature — the inviter's identity is proved by its
//! QUIC key, and the joiner's right to pair by proving knowledge of the secret.

use bincode::{Decode, Encode};

use crate::id::{base32_decode, base32_encode};
use crate::{NodeId, ProtocolError, codec};

const PREFIX: &str = "amos1-";
const CHECKSUM_LEN: usize = 4;
/// Longest code accepted (address hints are bounded too).
pub const MAX_CODE_CHARS: usize = 2048;
/// Most address hints in one code.
pub const MAX_ADDRS: usize = 8;

/// Where a joiner reaches the inviter through: a relay (docs/design.md
/// §7.11) and where the relay may be reached.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct RelayHint {
    /// The relay's NodeId: the joiner accepts only this key when it dials it.
    pub relay: NodeId,
    /// Where the relay may be reached (`host:port`), most likely first.
    pub addrs: Vec<String>,
}

/// What a pairing code carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairingCode {
    /// The inviting node: the joiner accepts only this key when it dials.
    pub inviter: NodeId,
    /// Where the inviter may be reached (`host:port`), most likely first.
    pub addrs: Vec<String>,
    /// One-time secret the joiner proves it knows (never sent in the clear).
    pub secret: [u8; 16],
    /// The policy both sides record for each other (`full` or scopes).
    pub policy: String,
    /// Unix milliseconds after which the inviter refuses the code.
    pub expires_ms: u64,
    /// The relay to reach the inviter through, if any (a `V2` code).
    pub via: Option<RelayHint>,
}

/// The fields of every version, as `V1` encodes them.
#[derive(Encode, Decode)]
struct CodeV1 {
    inviter: NodeId,
    addrs: Vec<String>,
    secret: [u8; 16],
    policy: String,
    expires_ms: u64,
}

#[derive(Encode, Decode)]
enum WireCode {
    V1(CodeV1),
    /// `V1` and a relay.
    V2(CodeV1, RelayHint),
}

impl PairingCode {
    fn split(&self) -> (CodeV1, Option<RelayHint>) {
        (
            CodeV1 {
                inviter: self.inviter,
                addrs: self.addrs.clone(),
                secret: self.secret,
                policy: self.policy.clone(),
                expires_ms: self.expires_ms,
            },
            self.via.clone(),
        )
    }

    fn join(v1: CodeV1, via: Option<RelayHint>) -> PairingCode {
        PairingCode {
            inviter: v1.inviter,
            addrs: v1.addrs,
            secret: v1.secret,
            policy: v1.policy,
            expires_ms: v1.expires_ms,
            via,
        }
    }
}

impl PairingCode {
    /// The `amos1-…` text.
    pub fn encode(&self) -> String {
        let wire = match self.split() {
            (v1, None) => WireCode::V1(v1),
            (v1, Some(via)) => WireCode::V2(v1, via),
        };
        let mut body = codec::encode(&wire);
        let sum = blake3::hash(&body);
        body.extend_from_slice(&sum.as_bytes()[..CHECKSUM_LEN]);
        format!("{PREFIX}{}", base32_encode(&body))
    }

    /// Parse and check a code: prefix, alphabet, checksum, canonical encoding,
    /// and bounds. Whitespace and dashes a user's terminal may insert after
    /// the prefix are ignored; case is too.
    pub fn decode(text: &str) -> Result<PairingCode, ProtocolError> {
        let bad = |why: &str| ProtocolError::Malformed(format!("bad pairing code: {why}"));
        let text = text.trim();
        if text.len() > MAX_CODE_CHARS {
            return Err(bad("too long"));
        }
        let rest = text
            .get(..PREFIX.len())
            .filter(|p| p.eq_ignore_ascii_case(PREFIX))
            .map(|_| &text[PREFIX.len()..])
            .ok_or_else(|| bad("it must start with amos1-"))?;
        let cleaned: String = rest
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '-')
            .collect();
        let bytes = base32_decode(&cleaned).map_err(|_| bad("not base32 (mistyped?)"))?;
        if bytes.len() <= CHECKSUM_LEN {
            return Err(bad("too short"));
        }
        let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        if blake3::hash(body).as_bytes()[..CHECKSUM_LEN] != *sum {
            return Err(bad("checksum mismatch (mistyped or truncated?)"));
        }
        let code = match codec::decode_canonical::<WireCode>("pairing code", body)
            .map_err(|_| bad("unknown version or non-canonical encoding"))?
        {
            WireCode::V1(v1) => PairingCode::join(v1, None),
            WireCode::V2(v1, via) => PairingCode::join(v1, Some(via)),
        };
        let hints_ok = |addrs: &[String]| {
            addrs.len() <= MAX_ADDRS && addrs.iter().all(|a| !a.is_empty() && a.len() <= 255)
        };
        if !hints_ok(&code.addrs)
            || code
                .via
                .as_ref()
                .is_some_and(|v| v.addrs.is_empty() || !hints_ok(&v.addrs))
            || code.policy.is_empty()
            || code.policy.len() > 1024
        {
            return Err(bad("fields out of bounds"));
        }
        Ok(code)
    }

    /// Whether the code has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_ms
    }
}

/// The public name of an invite: what a joiner sends to say which invite it
/// answers, and the inviter's lookup key. Derived one-way from the secret,
/// so it reveals nothing about it.
pub fn invite_id(secret: &[u8; 16]) -> [u8; 16] {
    let k = blake3::derive_key("amos pairing invite id v1", secret);
    let mut id = [0u8; 16];
    id.copy_from_slice(&k[..16]);
    id
}

/// The key proofs of the secret are made with. The inviter keeps this (not
/// the secret itself) until the invite is used or expires.
pub fn proof_key(secret: &[u8; 16]) -> [u8; 32] {
    blake3::derive_key("amos pairing proof key v1", secret)
}

/// How a joiner proves it knows an invite's secret without sending it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProofBinding<'a> {
    /// Online: bound to one TLS session (its exported keying material), so
    /// a proof cannot be replayed on another connection.
    Session(&'a [u8]),
    /// Offline (`amos join --offline`): bound to the joiner and inviter only;
    /// it travels inside the joiner's first signed bundle.
    Offline,
}

/// `keyed_blake3(proof_key, domain || binding || joiner || inviter ||
/// policy)`. The policy is the one the code names: a code whose policy was
/// edited proves nothing.
pub fn join_proof(
    proof_key: &[u8; 32],
    binding: ProofBinding<'_>,
    joiner: &NodeId,
    inviter: &NodeId,
    policy: &str,
) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(proof_key);
    match binding {
        ProofBinding::Session(exported) => {
            h.update(b"amos join session v1\0");
            h.update(&(exported.len() as u64).to_le_bytes());
            h.update(exported);
        }
        ProofBinding::Offline => {
            h.update(b"amos join offline v1\0");
        }
    }
    h.update(&joiner.0);
    h.update(&inviter.0);
    h.update(&(policy.len() as u64).to_le_bytes());
    h.update(policy.as_bytes());
    *h.finalize().as_bytes()
}

/// Check a joiner's proof in constant time.
pub fn proof_matches(
    proof_key: &[u8; 32],
    binding: ProofBinding<'_>,
    joiner: &NodeId,
    inviter: &NodeId,
    policy: &str,
    proof: &[u8; 32],
) -> bool {
    blake3::Hash::from(join_proof(proof_key, binding, joiner, inviter, policy))
        == blake3::Hash::from(*proof)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> PairingCode {
        PairingCode {
            inviter: NodeId([9; 32]),
            addrs: vec!["192.0.2.1:4747".into(), "laptop.local:4747".into()],
            secret: [7; 16],
            policy: "team:apollo".into(),
            expires_ms: 1_800_000_000_000,
            via: None,
        }
    }

    /// `sample()` as the release before this one encoded it (printed by
    /// 8328c30's `PairingCode::encode`): this one writes the same text and
    /// reads it back.
    const OLD_CODE: &str = "amos1-aaeqscijbeeqscijbeeqscijbeeqscijbeeqscijbeeqscijbeeqsaqoge4telrqfyzc4mj2gq3tinyrnrqxa5dpoaxgy33dmfwdunbxgq3qobyha4dqobyha4dqobyha4dqoc3umvqw2otbobxwy3dp7uafaxayumaqaaemq3k2q";

    #[test]
    fn a_code_without_a_relay_is_still_v1_and_an_old_code_still_parses() {
        let c = sample();
        // The V1 encoding, byte for byte what the release before wrote.
        assert_eq!(c.encode(), OLD_CODE);
        assert_eq!(PairingCode::decode(OLD_CODE).unwrap(), c);
    }

    #[test]
    fn a_code_through_a_relay_round_trips_as_v2() {
        let mut c = sample();
        c.via = Some(RelayHint {
            relay: NodeId([4; 32]),
            addrs: vec!["198.51.100.7:4747".into()],
        });
        let text = c.encode();
        assert_ne!(text, sample().encode());
        assert_eq!(PairingCode::decode(&text).unwrap(), c);
        // A relay with no address reaches nothing: refused.
        c.via = Some(RelayHint {
            relay: NodeId([4; 32]),
            addrs: vec![],
        });
        let e = PairingCode::decode(&c.encode()).unwrap_err().to_string();
        assert!(e.contains("out of bounds"), "{e}");
    }

    #[test]
    fn round_trip_and_shape() {
        let c = sample();
        let text = c.encode();
        assert!(text.starts_with("amos1-"));
        assert!(
            text[6..]
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ('2'..='7').contains(&ch))
        );
        assert_eq!(PairingCode::decode(&text).unwrap(), c);
        // Upper case, surrounding space and line-wrapping dashes are forgiven.
        let wrapped = format!("  {}  ", text.to_uppercase());
        assert_eq!(PairingCode::decode(&wrapped).unwrap(), c);
        let split = format!("{}-{}\n{}", &text[..20], &text[20..40], &text[40..]);
        assert_eq!(PairingCode::decode(&split).unwrap(), c);
        assert!(!c.is_expired(1_799_999_999_999));
        assert!(c.is_expired(1_800_000_000_000));
    }

    #[test]
    fn mistakes_are_refused_with_a_reason() {
        let text = sample().encode();
        for (bad, why) in [
            ("", "amos1-"),
            ("amos2-abc", "amos1-"),
            ("amos1-", "short"),
            ("amos1-!!!!", "base32"),
            (&text[..text.len() - 8], "checksum"),
        ] {
            let e = PairingCode::decode(bad).unwrap_err().to_string();
            assert!(
                e.contains("bad pairing code") && e.contains(why),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn proofs_bind_secret_session_and_both_nodes() {
        let secret = [3u8; 16];
        let key = proof_key(&secret);
        let (a, b) = (NodeId([1; 32]), NodeId([2; 32]));
        let s1 = ProofBinding::Session(b"session one");
        let t = "team:apollo";
        let p = join_proof(&key, s1, &a, &b, t);
        assert!(proof_matches(&key, s1, &a, &b, t, &p));
        // Another session, swapped roles, another secret, offline, another
        // policy: all differ.
        let s2 = ProofBinding::Session(b"session two");
        assert!(!proof_matches(&key, s2, &a, &b, t, &p));
        assert!(!proof_matches(&key, s1, &b, &a, t, &p));
        assert!(!proof_matches(&proof_key(&[4; 16]), s1, &a, &b, t, &p));
        assert!(!proof_matches(&key, ProofBinding::Offline, &a, &b, t, &p));
        assert!(!proof_matches(&key, s1, &a, &b, "full", &p));
        // The invite id and the proof key are unrelated to each other and to the secret.
        assert_ne!(invite_id(&secret)[..], key[..16]);
        assert_ne!(invite_id(&secret)[..], secret[..]);
    }

    proptest! {
        /// Changing any one character of a code is caught (checksum, alphabet
        /// or encoding), never mistaken for another valid code.
        #[test]
        fn any_changed_character_is_refused(pos in 6usize..120, to in proptest::sample::select(
            "abcdefghijklmnopqrstuvwxyz234567".chars().collect::<Vec<_>>()))
        {
            let text = sample().encode();
            let pos = 6 + (pos - 6) % (text.len() - 6);
            let mut chars: Vec<char> = text.chars().collect();
            prop_assume!(chars[pos] != to);
            chars[pos] = to;
            let changed: String = chars.into_iter().collect();
            prop_assert!(PairingCode::decode(&changed).is_err());
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,300}") {
            let _ = PairingCode::decode(&s);
            let _ = PairingCode::decode(&format!("amos1-{s}"));
        }
    }
}
