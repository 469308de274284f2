//! The convergence digest: one hash over a set of signed facts, independent
//! of the order they are fed in. Two nodes holding the same replicated facts
//! print the same digest.
//!
//! Also the rule for what a peer's session digest is compared over here
//! ([`compared_over`], docs/design.md §7.3): never over a fact the policy we
//! give that peer keeps from it, whatever scopes the peer names.

use amos_acl::PeerPolicy;
use amos_protocol::Scope;

/// Accumulates fact encodings; order does not matter, duplicates count once.
#[derive(Debug, Default, Clone)]
pub struct Digest {
    hashes: Vec<[u8; 32]>,
}

impl Digest {
    /// A digest over no facts yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one fact's wire encoding.
    pub fn add(&mut self, fact_bytes: &[u8]) {
        self.hashes.push(*blake3::hash(fact_bytes).as_bytes());
    }

    /// `(hex digest, number of distinct facts)`.
    pub fn finish(self) -> (String, usize) {
        let (d, n) = self.finish_bytes();
        (to_hex(&d), n)
    }

    /// `(digest, number of distinct facts)`: the bytes a sync session's
    /// `Digest` message carries.
    pub fn finish_bytes(mut self) -> ([u8; 32], usize) {
        self.hashes.sort_unstable();
        self.hashes.dedup();
        let mut h = blake3::Hasher::new();
        h.update(b"amos-digest-v1\0");
        for x in &self.hashes {
            h.update(x);
        }
        (*h.finalize().as_bytes(), self.hashes.len())
    }
}

/// A digest as `amos digest` prints it (lowercase hex).
pub fn to_hex(d: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*d).to_hex().to_string()
}

/// What a peer's session digest over `claimed` (the scopes of the policy it
/// gives us; empty: `full`) is compared over on our side, given `ours`, the
/// policy we give it (docs/design.md §7.3): `claimed ∩ ours`, and only when
/// that is all of `claimed` — then both digests cover the same scopes.
/// `None`: the peer's digest covers a scope we do not give it, so the two
/// would cover different facts and the comparison could only tell the peer
/// (through the repair a disagreement asks for) whether we hold anything
/// there: not compared.
///
/// Invariant: a `Some` policy admits only facts `ours` admits (the export
/// filter is monotone in the scopes), so our digest over it, and whether it
/// equals the peer's, never depends on a fact the peer may not receive.
pub fn compared_over(ours: &PeerPolicy, claimed: &[Scope]) -> Option<PeerPolicy> {
    let claimed = if claimed.is_empty() {
        PeerPolicy::Full
    } else {
        PeerPolicy::scoped(claimed.iter().cloned()).ok()?
    };
    match (ours, &claimed) {
        (PeerPolicy::Full, _) => Some(claimed),
        (PeerPolicy::Scoped(_), PeerPolicy::Full) => None,
        (PeerPolicy::Scoped(o), PeerPolicy::Scoped(c)) => c.is_subset(o).then_some(claimed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ours, claimed, compared over): a peer's scopes are compared only
    /// within the policy we give it.
    #[test]
    fn a_peer_digest_is_compared_only_within_the_policy_we_give_it() {
        let sc = |s: &str| -> Vec<Scope> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(|x| x.parse().unwrap())
                .collect()
        };
        for (ours, claimed, over) in [
            ("full", "", Some("full")),
            ("full", "team:a,team:secret", Some("team:a,team:secret")),
            ("team:a", "team:a", Some("team:a")),
            ("team:a,global", "team:a", Some("team:a")),
            ("team:a", "team:a,team:secret", None),
            ("team:a", "team:secret", None),
            ("team:a", "", None),
            ("project:p", "team:a", None),
            ("team:a", "private", None),
        ] {
            let ours: PeerPolicy = ours.parse().unwrap();
            let got = compared_over(&ours, &sc(claimed));
            assert_eq!(
                got.as_ref().map(ToString::to_string).as_deref(),
                over,
                "ours {ours}, claimed {claimed:?}"
            );
            if let (Some(got), PeerPolicy::Scoped(o)) = (&got, &ours) {
                assert!(got.scopes().all(|s| o.contains(s)), "{got} within {ours}");
            }
        }
    }

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let mut a = Digest::new();
        let mut b = Digest::new();
        for x in [b"one".as_slice(), b"two", b"three"] {
            a.add(x);
        }
        for x in [b"three".as_slice(), b"one", b"two", b"one"] {
            b.add(x);
        }
        assert_eq!(a.finish(), b.clone().finish());
        let mut c = Digest::new();
        c.add(b"one");
        assert_ne!(c.finish().0, b.finish().0);
    }
}
