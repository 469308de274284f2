//! The convergence digest: one hash over a set of signed facts, independent
//! of the order they are fed in. Two nodes holding the same replicated facts
//! print the same digest.
//!
//! [`SetDigest`] is the same set's digest as a sum (docs/design.md §7.3):
//! a fact goes in or out in O(1), so a store can keep one running per
//! policy as it writes, and a session digest costs no scan.
//!
//! Also the rule for what a peer's session digest is compared over here
//! ([`compared_over`], docs/design.md §7.3): never over a fact the policy we
//! give that peer keeps from it, whatever scopes the peer names.

use amos_acl::PeerPolicy;
use amos_protocol::Scope;

/// The protocol version from which a session's digests are the
/// [`SetDigest`] (a store keeps it running on write), not the sorted-hash
/// [`Digest`] a scan computes: both sides of a session run at one version,
/// so both use the same kind.
pub const SET_DIGEST_SINCE: u16 = 2;

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

/// A set of facts as the sum, modulo 2^256, of each fact's BLAKE3 hash,
/// with their number: adding and removing a fact is O(1) and the order
/// never matters, so the digest of a set can be kept up to date as facts
/// come and go (a store's running digest per policy) and equals the one
/// computed from scratch over the same set. A fact must go in at most once
/// (a set, not a multiset: the caller knows what it holds).
///
/// Its value differs from [`Digest`]'s over the same set: the two are
/// never compared with each other.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SetDigest {
    sum: [u64; 4],
    facts: u64,
}

/// One fact's term in a [`SetDigest`]: its BLAKE3 hash as a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term([u64; 4]);

impl Term {
    /// The term of one fact's wire encoding.
    pub fn of(fact_bytes: &[u8]) -> Term {
        Term::from_hash(blake3::hash(fact_bytes).as_bytes())
    }

    /// The term of a fact whose BLAKE3 hash is `b`.
    pub fn from_hash(b: &[u8; 32]) -> Term {
        let mut w = [0u64; 4];
        for (i, x) in w.iter_mut().enumerate() {
            let mut limb = [0u8; 8];
            limb.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *x = u64::from_le_bytes(limb);
        }
        Term(w)
    }
}

impl SetDigest {
    /// The digest of no facts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one fact (its [`Term`]).
    pub fn insert(&mut self, t: Term) {
        let mut carry = false;
        for (s, x) in self.sum.iter_mut().zip(t.0) {
            let (a, c1) = s.overflowing_add(x);
            let (b, c2) = a.overflowing_add(carry as u64);
            *s = b;
            carry = c1 || c2;
        }
        self.facts = self.facts.wrapping_add(1);
    }

    /// Take one fact (its [`Term`]) out again.
    pub fn remove(&mut self, t: Term) {
        let mut borrow = false;
        for (s, x) in self.sum.iter_mut().zip(t.0) {
            let (a, b1) = s.overflowing_sub(x);
            let (b, b2) = a.overflowing_sub(borrow as u64);
            *s = b;
            borrow = b1 || b2;
        }
        self.facts = self.facts.wrapping_sub(1);
    }

    /// Add the facts of `other` (a set disjoint from this one).
    pub fn add(&mut self, other: &SetDigest) {
        self.insert(Term(other.sum));
        self.facts = self.facts.wrapping_add(other.facts).wrapping_sub(1);
    }

    /// Take out the facts of `other` (a subset of this one).
    pub fn sub(&mut self, other: &SetDigest) {
        self.remove(Term(other.sum));
        self.facts = self.facts.wrapping_sub(other.facts).wrapping_add(1);
    }

    /// `(digest, number of facts)`: what a session's `Digest` carries.
    pub fn finish_bytes(&self) -> ([u8; 32], usize) {
        let mut h = blake3::Hasher::new();
        h.update(b"amos-set-digest-v2\0");
        h.update(&self.sum_bytes());
        (*h.finalize().as_bytes(), self.facts as usize)
    }

    /// The sum as 32 bytes (little-endian), for storing.
    pub fn sum_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, x) in self.sum.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// A stored digest back: its 32 sum bytes ([`SetDigest::sum_bytes`]) and count.
    pub fn from_parts(sum: &[u8], facts: u64) -> Option<SetDigest> {
        let sum: &[u8; 32] = sum.try_into().ok()?;
        let mut w = [0u64; 4];
        for (i, x) in w.iter_mut().enumerate() {
            let mut limb = [0u8; 8];
            limb.copy_from_slice(&sum[i * 8..i * 8 + 8]);
            *x = u64::from_le_bytes(limb);
        }
        Some(SetDigest { sum: w, facts })
    }

    /// The number of facts.
    pub fn facts(&self) -> u64 {
        self.facts
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

    /// Any order of inserts and removes leaves the digest of the set that
    /// remains, as if it had been built from scratch.
    #[test]
    fn a_set_digest_is_the_digest_of_what_remains() {
        let t = |i: u32| Term::of(&i.to_le_bytes());
        let mut running = SetDigest::new();
        for i in 0..200 {
            running.insert(t(i));
        }
        for i in (0..200).filter(|i| i % 3 == 0) {
            running.remove(t(i));
        }
        let mut part = SetDigest::new();
        for i in (0..200).filter(|i| i % 7 == 1 && i % 3 != 0) {
            part.insert(t(i));
        }
        running.sub(&part);
        let mut scratch = SetDigest::new();
        for i in (0..200).rev().filter(|i| i % 3 != 0 && i % 7 != 1) {
            scratch.insert(t(i));
        }
        assert_eq!(running, scratch);
        assert_eq!(running.finish_bytes(), scratch.finish_bytes());
        running.add(&part);
        scratch.add(&part);
        assert_eq!(running.finish_bytes(), scratch.finish_bytes());
        assert_ne!(running.finish_bytes().0, SetDigest::new().finish_bytes().0);
        let back = SetDigest::from_parts(&running.sum_bytes(), running.facts()).unwrap();
        assert_eq!(back, running);
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
