//! ed25519 identities and signed facts.
//!
//! A fact is signed over a domain-separated canonical encoding of the
//! [`Fact`]. The signature is checked with `verify_strict` (no malleable or
//! small-order keys).
//!
//! Invariant: [`Verified`] values exist only for facts whose signature
//! verified against their author's key and which passed validation, or which
//! this node just signed itself.

use bincode::{Decode, Encode};
use curve25519_dalek::{EdwardsPoint, Scalar};
use ed25519_dalek::hazmat::ExpandedSecretKey;
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha512};
use zeroize::Zeroize;

use crate::{Fact, NodeId, ProtocolError, codec};

const DOMAIN: &[u8] = b"amos-fact-v1\0";

/// A node's secret identity. Never printed, never logged.
pub struct NodeIdentity {
    key: SigningKey,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeIdentity({:?})", self.node_id())
    }
}

impl NodeIdentity {
    /// Build from 32 secret bytes (from a key file, or fresh randomness the
    /// caller supplies).
    pub fn from_secret(secret: [u8; 32]) -> Self {
        NodeIdentity {
            key: SigningKey::from_bytes(&secret),
        }
    }

    /// The secret bytes, for writing the key file.
    pub fn secret(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// The node id: this identity's ed25519 public key.
    pub fn node_id(&self) -> NodeId {
        NodeId(self.key.verifying_key().to_bytes())
    }

    /// Sign a fact this node authored. The fact's clock must name this node.
    pub fn sign(&self, fact: Fact) -> Result<Verified<SignedFact>, ProtocolError> {
        if fact.author() != self.node_id() {
            return Err(ProtocolError::InvalidFact(
                "a node can only sign facts stamped with its own clock".into(),
            ));
        }
        fact.validate()?;
        let signature = self.key.sign(&signing_bytes(&fact)).to_bytes();
        Ok(Verified(SignedFact { fact, signature }))
    }

    /// Sign facts this node authored: the same signatures, byte for byte, as
    /// [`NodeIdentity::sign`] of each (ed25519 is deterministic), and the
    /// same checks, for less work. RFC 8032 §5.1.6 as ed25519-dalek's signer
    /// does it, except that the nonce points `R = rB` of the whole batch are
    /// encoded with one field inversion (Montgomery's trick,
    /// `EdwardsPoint::compress_batch_alloc`) instead of one each — about a
    /// third of a signature's cost — and the key is expanded once.
    /// A unit test holds it to `sign` on every kind of fact.
    pub fn sign_batch(&self, facts: Vec<Fact>) -> Result<Vec<Verified<SignedFact>>, ProtocolError> {
        let me = self.node_id();
        let mut messages = Vec::with_capacity(facts.len());
        for fact in &facts {
            if fact.author() != me {
                return Err(ProtocolError::InvalidFact(
                    "a node can only sign facts stamped with its own clock".into(),
                ));
            }
            fact.validate()?;
            messages.push(signing_bytes(fact));
        }
        // Zeroed on drop, as the one `sign` makes for each signature.
        let expanded = ExpandedSecretKey::from(self.key.as_bytes());
        let public = self.key.verifying_key();
        // r = H(prefix || M) mod l, R = rB.
        let mut nonces: Vec<Scalar> = messages
            .iter()
            .map(|m| {
                Scalar::from_hash(
                    Sha512::new()
                        .chain_update(expanded.hash_prefix)
                        .chain_update(m),
                )
            })
            .collect();
        let points: Vec<EdwardsPoint> = nonces.iter().map(EdwardsPoint::mul_base).collect();
        let encoded = EdwardsPoint::compress_batch_alloc(&points);
        let mut out = Vec::with_capacity(facts.len());
        for (((fact, m), r), big_r) in facts.into_iter().zip(&messages).zip(&nonces).zip(&encoded) {
            // k = H(R || A || M) mod l, S = k·s + r; the signature is R || S.
            let k = Scalar::from_hash(
                Sha512::new()
                    .chain_update(big_r.as_bytes())
                    .chain_update(public.as_bytes())
                    .chain_update(m),
            );
            let s = k * expanded.scalar + r;
            let mut signature = [0u8; 64];
            signature[..32].copy_from_slice(big_r.as_bytes());
            signature[32..].copy_from_slice(s.as_bytes());
            out.push(Verified(SignedFact { fact, signature }));
        }
        // The nonces are as secret as the key (any one of them with its
        // signature gives the key away): not left behind in freed memory.
        nonces.zeroize();
        Ok(out)
    }

    /// Sign arbitrary bytes. Callers inside this crate own the domain
    /// separation of `msg` (e.g. the bundle trailer).
    pub(crate) fn sign_raw(&self, msg: &[u8]) -> [u8; 64] {
        self.key.sign(msg).to_bytes()
    }

    /// X25519 of this identity's secret (the ed25519 key's scalar, as
    /// RFC 8032 expands it: the X25519 secret of `to_montgomery` of the
    /// node id) with the Montgomery point `point`. Only for opening a
    /// bundle sealed to this node (`bundle::seal`), whose key derivation
    /// owns the domain separation.
    pub(crate) fn x25519(&self, point: &[u8; 32]) -> [u8; 32] {
        let mut secret = self.key.to_scalar_bytes();
        let shared = curve25519_dalek::MontgomeryPoint(*point).mul_clamped(secret);
        secret.zeroize();
        shared.to_bytes()
    }
}

/// The exact bytes a fact's signature covers: a domain tag, then the
/// canonical encoding of the fact.
pub(crate) fn signing_bytes(fact: &Fact) -> Vec<u8> {
    let mut msg = DOMAIN.to_vec();
    msg.extend_from_slice(&codec::encode(fact));
    msg
}

/// A fact with its author's signature, as stored and relayed verbatim.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct SignedFact {
    /// The fact signed.
    pub fact: Fact,
    /// The author's ed25519 signature over the fact's canonical encoding.
    pub signature: [u8; 64],
}

// `SignedFact::verify` and `decode_verified` live in `crate::verify`, the
// one verification path (this module signs; it never verifies).
impl SignedFact {
    /// The wire encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        codec::encode_signed(self)
    }
}

/// A value whose signature and validity were checked. Only this crate builds one.
#[derive(Clone, Debug, PartialEq)]
pub struct Verified<T>(T);

impl<T> Verified<T> {
    /// Wrap a value this crate has already checked by other means (batch
    /// verification, or bytes proven identical to bytes that were checked).
    pub(crate) fn assume_verified(value: T) -> Self {
        Verified(value)
    }

    /// The verified value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Verified<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;
    use proptest::prelude::*;

    fn identity(seed: u8) -> NodeIdentity {
        NodeIdentity::from_secret([seed; 32])
    }

    fn arb_slug() -> BoxedStrategy<String> {
        proptest::string::string_regex("[a-z0-9][a-z0-9._-]{0,12}")
            .unwrap()
            .boxed()
    }

    fn arb_scope() -> impl Strategy<Value = Scope> {
        prop_oneof![
            Just(Scope::Global),
            arb_slug().prop_map(|s| Scope::Agent(AgentId::parse(&s).unwrap())),
            arb_slug().prop_map(|s| Scope::Team(TeamId::parse(&s).unwrap())),
            arb_slug().prop_map(|s| Scope::Project(ProjectId::parse(&s).unwrap())),
        ]
    }

    fn arb_body(origin: NodeId) -> impl Strategy<Value = FactBody> {
        // Times within the bound (docs/design.md §4): `sign` refuses others.
        let time = || 0..=crate::MAX_TIME_MS;
        let fixed = (arb_slug(), time())
            .prop_map(move |(o, c)| MemoryFixed {
                owner: AgentId::parse(&o).unwrap(),
                created_ms: c,
                origin,
            })
            .boxed();
        let text = proptest::string::string_regex("\\PC{1,200}").unwrap();
        let id = any::<[u8; 16]>().prop_map(MemoryId);
        prop_oneof![
            (
                id.clone(),
                fixed.clone(),
                arb_slug(),
                text,
                prop::collection::vec(arb_slug(), 0..4),
                0.0f32..=1.0,
                any::<bool>(),
                prop::option::of(time()),
                (
                    prop::option::of(any::<[u8; 16]>().prop_map(MemoryId)),
                    prop::option::of(time()),
                    prop::option::of(time()),
                ),
            )
                .prop_filter("non-blank", |t| !t.3.trim().is_empty())
                .prop_map(
                    |(id, fixed, kind, text, tags, imp, pinned, exp, (sup, from, to))| {
                        // A valid end: after the start (default: the creation).
                        let start = from.unwrap_or(fixed.created_ms);
                        let to = to.filter(|t| *t > start);
                        FactBody::MemoryContent(MemoryContent {
                            id,
                            fixed,
                            kind: MemoryType::parse(&kind).unwrap(),
                            text: MemoryText::Plain(text),
                            tags,
                            importance: imp,
                            confidence: 1.0,
                            pinned,
                            expires_ms: exp,
                            supersedes: sup.filter(|s| *s != id),
                            validity: Validity {
                                from_ms: from,
                                to_ms: to,
                            },
                        })
                    }
                ),
            (
                id.clone(),
                fixed.clone(),
                prop::collection::vec(arb_scope(), 0..5)
            )
                .prop_map(|(id, fixed, g)| FactBody::MemoryAcl(MemoryAcl {
                    id,
                    fixed,
                    grants: g.into_iter().collect()
                })),
            (id.clone(), fixed)
                .prop_map(|(id, fixed)| FactBody::MemoryTombstone(MemoryTombstone { id, fixed })),
            (arb_slug(), "[ -~]{0,30}", any::<bool>()).prop_map(|(t, name, present)| {
                FactBody::Team(TeamFact {
                    id: TeamId::parse(&t).unwrap(),
                    origin: NodeId([7; 32]),
                    name,
                    present,
                })
            }),
            (arb_slug(), arb_slug(), any::<bool>()).prop_map(|(p, a, present)| {
                FactBody::Membership(MembershipFact {
                    scope: OrgScope::Project(ProjectId::parse(&p).unwrap()),
                    agent: AgentId::parse(&a).unwrap(),
                    role: "member".into(),
                    present,
                })
            }),
        ]
    }

    fn arb_signed() -> impl Strategy<Value = SignedFact> {
        (any::<u8>(), 0..=crate::MAX_TIME_MS, any::<u32>()).prop_flat_map(
            |(seed, wall, logical)| {
                let id = identity(seed);
                let node = id.node_id();
                arb_body(node).prop_map(move |body| {
                    let fact = Fact {
                        clock: Hlc {
                            wall_ms: wall,
                            logical,
                            node,
                        },
                        body,
                    };
                    identity(seed).sign(fact).unwrap().into_inner()
                })
            },
        )
    }

    /// Facts by `identity(seed)`, of every kind `arb_body` makes.
    fn arb_facts(seed: u8) -> impl Strategy<Value = Vec<Fact>> {
        let node = identity(seed).node_id();
        let wall = 0..=crate::MAX_TIME_MS;
        prop::collection::vec((arb_body(node), wall, any::<u32>()), 0..40).prop_map(move |v| {
            v.into_iter()
                .map(|(body, wall_ms, logical)| Fact {
                    clock: Hlc {
                        wall_ms,
                        logical,
                        node,
                    },
                    body,
                })
                .collect()
        })
    }

    /// A batch signed with one inversion holds exactly the signatures
    /// ed25519-dalek's signer makes one by one, and each verifies.
    #[test]
    fn a_batch_is_signed_as_each_alone() {
        let id = identity(3);
        let node = id.node_id();
        let facts: Vec<Fact> = (0..300u32)
            .map(|i| Fact {
                clock: Hlc {
                    wall_ms: 1_000 + u64::from(i),
                    logical: i,
                    node,
                },
                body: FactBody::MemoryTombstone(MemoryTombstone {
                    id: MemoryId([i as u8; 16]),
                    fixed: MemoryFixed {
                        owner: AgentId::parse("a").unwrap(),
                        created_ms: u64::from(i),
                        origin: node,
                    },
                }),
            })
            .collect();
        let batch = id.sign_batch(facts.clone()).unwrap();
        assert_eq!(batch.len(), facts.len());
        for (b, f) in batch.iter().zip(facts) {
            assert_eq!(**b, *id.sign(f).unwrap());
            SignedFact::decode_verified(&b.to_bytes()).unwrap();
        }
        assert!(id.sign_batch(Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn a_batch_with_another_nodes_fact_is_refused() {
        let (me, other) = (identity(1), identity(2));
        let fact = |node| Fact {
            clock: Hlc {
                wall_ms: 5,
                logical: 0,
                node,
            },
            body: FactBody::MemoryTombstone(MemoryTombstone {
                id: MemoryId([1; 16]),
                fixed: MemoryFixed {
                    owner: AgentId::parse("a").unwrap(),
                    created_ms: 1,
                    origin: me.node_id(),
                },
            }),
        };
        let facts = vec![fact(me.node_id()), fact(other.node_id())];
        assert!(me.sign_batch(facts).is_err());
    }

    proptest! {
        #[test]
        fn a_batch_signs_every_kind_as_sign_does(facts in arb_facts(5)) {
            let id = identity(5);
            let batch = id.sign_batch(facts.clone()).unwrap();
            prop_assert_eq!(batch.len(), facts.len());
            for (b, f) in batch.iter().zip(facts) {
                prop_assert_eq!(&**b, &*id.sign(f).unwrap());
            }
        }

        #[test]
        fn wire_round_trip(f in arb_signed()) {
            let bytes = f.to_bytes();
            let back = SignedFact::decode_verified(&bytes).unwrap();
            prop_assert_eq!(&*back, &f);
            prop_assert_eq!(back.to_bytes(), bytes);
        }

        /// Changing any single byte of a signed fact's wire form makes it fail:
        /// it no longer decodes canonically, or no longer verifies.
        #[test]
        fn any_changed_byte_fails(f in arb_signed(), pos in any::<prop::sample::Index>(), flip in 1u8..=255) {
            let mut bytes = f.to_bytes();
            let i = pos.index(bytes.len());
            bytes[i] ^= flip;
            prop_assert!(SignedFact::decode_verified(&bytes).is_err());
        }

        /// The author read from the head of the bytes is the fact's author.
        #[test]
        fn the_author_is_read_from_the_head(f in arb_signed()) {
            let bytes = f.to_bytes();
            prop_assert_eq!(crate::codec::author_of(&bytes), Some(f.fact.author()));
            prop_assert_eq!(crate::codec::author_of(&bytes[..4]), None);
        }

        #[test]
        fn truncation_fails(f in arb_signed(), cut in any::<prop::sample::Index>()) {
            let bytes = f.to_bytes();
            let n = cut.index(bytes.len());
            prop_assert!(SignedFact::decode_verified(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn relayed_fact_keeps_author_and_cannot_be_resigned_by_another() {
        let a = identity(1);
        let b = identity(2);
        let fact = Fact {
            clock: Hlc {
                wall_ms: 1,
                logical: 0,
                node: a.node_id(),
            },
            body: FactBody::Team(TeamFact {
                id: TeamId::parse("apollo").unwrap(),
                origin: NodeId([7; 32]),
                name: "Apollo".into(),
                present: true,
            }),
        };
        assert!(b.sign(fact.clone()).is_err(), "b may not sign a's clock");
        let signed = a.sign(fact).unwrap().into_inner();
        // b swaps in its own signature over the same fact: refused.
        let forged = SignedFact {
            signature: {
                let mut s = signed.signature;
                s[0] ^= 1;
                s
            },
            ..signed.clone()
        };
        assert_eq!(forged.verify(), Err(ProtocolError::BadSignature));
    }

    #[test]
    fn invalid_fact_is_refused_even_if_signed() {
        let a = identity(3);
        let fact = Fact {
            clock: Hlc {
                wall_ms: 1,
                logical: 0,
                node: a.node_id(),
            },
            body: FactBody::Link(LinkFact {
                from: MemoryId([1; 16]),
                to: MemoryId([1; 16]),
                relation: Relation::default(),
                weight: f32::NAN,
                present: true,
            }),
        };
        assert!(a.sign(fact).is_err());
    }
}
