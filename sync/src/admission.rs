//! What the import gate decides with: why a fact is refused ([`Refusal`],
//! with a stable code) or set aside ([`DeferReason`]), how a memory stands
//! on this node ([`Standing`]: its owner rule and the policy its grants
//! meet), and what an admitted fact may do here ([`Effect`]), carried with
//! the fact in an [`Admission`].
//!
//! Invariant: outside this crate an `Admission` is made only by
//! [`crate::gate::check`] (a peer's fact) or [`Admission::local`] (a fact
//! signed by this node's own key); its constructor is crate-private and
//! only the gate calls it.

use std::fmt;

use amos_acl::PeerPolicy;
use amos_protocol::{FactBody, Grants, NodeId, NodeIdentity, SignedFact, Verified};

/// Why a fact was refused. Written to the audit log, where its
/// [`Refusal::code`] is the stable part (the message is for people).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A memory fact from a non-`full` peer not authored by the memory's origin.
    NotOrigin,
    /// An org, agent, profile or link fact outside the sender's policy.
    OutsidePolicy(String),
    /// A fixed field (owner, origin, creation time, a project's team) differs.
    FixedFieldMismatch(String),
    /// A team or project record whose origin differs from the one held
    /// here: two nodes created the same id independently.
    OrgOriginConflict(String),
    /// A team/project record or membership from a non-`full` peer not
    /// authored by the scope's origin.
    OrgNotOrigin(String),
    /// A link from a non-`full` peer not authored by its source memory's origin.
    LinkNotOrigin,
    /// The sender is not a registered peer (or was removed).
    UnknownPeer,
    /// A text change or snapshot that does not decode.
    MalformedText(String),
    /// A membership of a legacy team or project id that two origins created
    /// (a clash recorded here, docs/design.md §6.2), authored neither by
    /// the origin of the one held here nor by this node: it may mean the
    /// other scope's roster.
    LegacyScopeClash(String),
    /// A fact signed by its author and valid but for a time past
    /// `amos_protocol::MAX_TIME_MS` (docs/design.md §4): the error says which.
    /// `amos_protocol::verify_batch` sets such a fact aside; the node refuses
    /// it here, alone, and applies the rest of its batch.
    TimeOutOfBounds(String),
}

impl Refusal {
    /// The stable code of this refusal: what the audit log's `code` column,
    /// `amos audit --json` and the metrics' labels carry. Never changes
    /// meaning; new refusals get new codes.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotOrigin => "not_origin",
            Refusal::OutsidePolicy(_) => "outside_policy",
            Refusal::FixedFieldMismatch(_) => "fixed_field_mismatch",
            Refusal::OrgOriginConflict(_) => "org_origin_conflict",
            Refusal::OrgNotOrigin(_) => "org_not_origin",
            Refusal::LinkNotOrigin => "link_not_origin",
            Refusal::UnknownPeer => "unknown_peer",
            Refusal::MalformedText(_) => "malformed_text",
            Refusal::TimeOutOfBounds(_) => "time_out_of_bounds",
            Refusal::LegacyScopeClash(_) => "legacy_scope_clash",
        }
    }

    /// Every code [`Refusal::code`] can return.
    pub const CODES: [&'static str; 10] = [
        "not_origin",
        "outside_policy",
        "fixed_field_mismatch",
        "org_origin_conflict",
        "org_not_origin",
        "link_not_origin",
        "unknown_peer",
        "malformed_text",
        "time_out_of_bounds",
        "legacy_scope_clash",
    ];
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotOrigin => f.write_str("memory fact not authored by the memory's origin"),
            Refusal::OutsidePolicy(what) => write!(f, "outside the peer's policy: {what}"),
            Refusal::FixedFieldMismatch(what) => write!(f, "fixed field mismatch: {what}"),
            Refusal::OrgOriginConflict(what) => write!(f, "org origin conflict: {what}"),
            Refusal::OrgNotOrigin(what) => {
                write!(f, "org fact not authored by the scope's origin: {what}")
            }
            Refusal::LinkNotOrigin => {
                f.write_str("link not authored by the origin of the memory it starts from")
            }
            Refusal::UnknownPeer => f.write_str("sender is not a registered peer"),
            Refusal::MalformedText(e) => write!(f, "malformed text: {e}"),
            Refusal::TimeOutOfBounds(e) => f.write_str(e),
            Refusal::LegacyScopeClash(what) => {
                write!(f, "membership of a legacy id two nodes created: {what}")
            }
        }
    }
}

/// Why a fact was set aside, to be retried later rather than applied now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeferReason {
    /// The fact's clock is this far ahead of our physical clock (beyond `max_skew`).
    ClockSkew {
        /// How far ahead, in milliseconds.
        ahead_ms: u64,
    },
    /// A link whose endpoint memories have not arrived yet.
    MissingEndpoint,
    /// A membership (or a project policy's team record) whose team or
    /// project record has not arrived yet: its origin is not known.
    MissingScope,
}

impl DeferReason {
    /// The stable code of this deferral (see [`Refusal::code`]).
    pub fn code(&self) -> &'static str {
        match self {
            DeferReason::ClockSkew { .. } => "clock_skew",
            DeferReason::MissingEndpoint => "missing_endpoint",
            DeferReason::MissingScope => "missing_scope",
        }
    }

    /// Every code [`DeferReason::code`] can return.
    pub const CODES: [&'static str; 3] = ["clock_skew", "missing_endpoint", "missing_scope"];
}

impl fmt::Display for DeferReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeferReason::ClockSkew { ahead_ms } => {
                write!(f, "clock {} s ahead of ours", ahead_ms / 1000)
            }
            DeferReason::MissingEndpoint => f.write_str("link endpoint not yet received"),
            DeferReason::MissingScope => f.write_str("team or project record not yet received"),
        }
    }
}

/// How an admitted fact is stored here. Built only by the gate; the store
/// reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    effective: Option<Grants>,
    owner_trusted: bool,
    purge_content: bool,
}

impl Effect {
    /// For acl facts: the grants in force on this node (`grants ∩ restriction`).
    pub fn effective(&self) -> Option<&Grants> {
        self.effective.as_ref()
    }
    /// For memory facts: whether the owner rule holds (origin is us or a full peer).
    pub fn owner_trusted(&self) -> bool {
        self.owner_trusted
    }
    /// For acl facts: no local agent can see the memory any longer and it
    /// is not ours or a full peer's: its content may be erased.
    pub fn purge_content(&self) -> bool {
        self.purge_content
    }

    pub(crate) fn from_standing(body: &FactBody, standing: &Standing) -> Effect {
        Effect::judged(body, standing, &Grants::private())
    }

    /// The effect of `body` under `standing`, the grants in `cut` not
    /// counting here (grants to a clashed legacy scope that may mean the
    /// other one: [`crate::gate::clash_cut`]).
    pub(crate) fn judged(body: &FactBody, standing: &Standing, cut: &Grants) -> Effect {
        let effective = match body {
            FactBody::MemoryAcl(a) => {
                let mut e = standing.effective(&a.grants);
                for g in cut.iter() {
                    e.remove(g);
                }
                Some(e)
            }
            _ => None,
        };
        let purge_content =
            !standing.owner_trusted && effective.as_ref().is_some_and(Grants::is_empty);
        Effect {
            effective,
            owner_trusted: standing.owner_trusted,
            purge_content,
        }
    }
}

/// A fact the gate let through, with how to store it. The only thing
/// [`crate::ReplicaStore::put`] accepts.
///
/// What a caller can do (this compiles): ask the gate, or admit its own
/// signed fact.
///
/// ```no_run
/// use amos_sync::{Admission, ReplicaStore, Sender, gate};
/// fn store<S: ReplicaStore>(s: &mut S, from: &Sender,
///     f: amos_protocol::Verified<amos_protocol::SignedFact>,
///     me: &amos_protocol::NodeIdentity,
///     mine: amos_protocol::Verified<amos_protocol::SignedFact>) {
///     if let Ok(gate::Gate::Admit(a)) = gate::check(s, from, f) {
///         let _ = s.put(a);
///     }
///     if let Ok(a) = Admission::local(me, mine) {
///         let _ = s.put(a);
///     }
/// }
/// ```
///
/// A bare fact cannot be put:
///
/// ```compile_fail
/// fn store<S: amos_sync::ReplicaStore>(s: &mut S,
///     f: amos_protocol::Verified<amos_protocol::SignedFact>) {
///     let _ = s.put(f);
/// }
/// ```
///
/// ```compile_fail
/// // Nothing outside amos-sync can make one from a bare fact:
/// fn forge(f: amos_protocol::Verified<amos_protocol::SignedFact>) -> amos_sync::Admission {
///     amos_sync::Admission { fact: f, effect: todo!() }
/// }
/// ```
///
/// ```compile_fail
/// // nor an Effect to go with it:
/// let e = amos_sync::Effect { effective: None, owner_trusted: true, purge_content: false };
/// ```
#[derive(Debug, Clone)]
pub struct Admission {
    fact: Verified<SignedFact>,
    effect: Effect,
}

impl Admission {
    /// Admit a fact this node authored itself: `identity` must be the key
    /// that signed it (a local write proves its author is this node).
    /// Returns the fact back if it is someone else's.
    pub fn local(
        identity: &NodeIdentity,
        fact: Verified<SignedFact>,
    ) -> Result<Admission, Box<Verified<SignedFact>>> {
        if fact.fact.author() != identity.node_id() {
            return Err(Box::new(fact));
        }
        let effect = Effect::from_standing(&fact.fact.body, &Standing::TRUSTED);
        Ok(Admission { fact, effect })
    }

    /// The gate's admission of a peer's fact (crate-private: only
    /// [`crate::gate::check`] calls it).
    pub(crate) fn admit(fact: Verified<SignedFact>, effect: Effect) -> Admission {
        Admission { fact, effect }
    }

    /// The fact admitted.
    pub fn fact(&self) -> &Verified<SignedFact> {
        &self.fact
    }
    /// What it may do here: the grants in force, whether its owner rule holds.
    pub fn effect(&self) -> &Effect {
        &self.effect
    }
    /// The fact, for a caller that has stored the effect.
    pub fn into_fact(self) -> Verified<SignedFact> {
        self.fact
    }
}

/// How a memory stands on this node: whether its owner rule holds, and the
/// policy its grants meet here (`None`: unrestricted). A function of who the
/// memory's origin is to us, so it can be recomputed for stored memories
/// when a peer's policy changes ([`standing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// Whether the owner rule holds: the memory's origin is us or a `full` peer.
    pub owner_trusted: bool,
    /// The policy its grants must meet here (`None`: unrestricted).
    pub restriction: Option<PeerPolicy>,
}

impl Standing {
    pub(crate) const TRUSTED: Standing = Standing {
        owner_trusted: true,
        restriction: None,
    };

    /// The grants in force here for a memory signed with `grants`.
    pub fn effective(&self, grants: &Grants) -> Grants {
        match &self.restriction {
            Some(p) => p.effective(grants),
            None => grants.clone(),
        }
    }

    /// Whether content held under this standing with these effective
    /// grants is still needed here (else the gate purges it).
    pub fn keeps_content(&self, effective: &Grants) -> bool {
        self.owner_trusted || !effective.is_empty()
    }
}

/// The standing of a memory from `origin`, received from `sender`, given
/// the policy we gave its origin (`origin_policy`, `None` if the origin is
/// not a registered peer).
///
/// * Ours, or a `full` peer's: unrestricted, owner rule holds.
/// * Relayed by a `full` peer (our own operator's node): restricted by what
///   we would give its origin directly (nothing, for a stranger).
/// * From a scoped peer: restricted by that peer's policy.
pub fn standing(
    me: NodeId,
    origin: NodeId,
    origin_policy: Option<&PeerPolicy>,
    sender: &PeerPolicy,
) -> Standing {
    let owner_trusted = origin == me || origin_policy.is_some_and(PeerPolicy::is_full);
    let restriction = if owner_trusted {
        None
    } else if sender.is_full() {
        Some(
            origin_policy
                .cloned()
                .unwrap_or_else(|| PeerPolicy::Scoped(Default::default())),
        )
    } else {
        Some(sender.clone())
    };
    Standing {
        owner_trusted,
        restriction,
    }
}

/// The standing of a memory whose origin is a registered peer we give
/// `policy`, as if it had come from that peer directly: what every memory it
/// originated is re-judged by when the operator changes that policy.
pub fn peer_standing(policy: &PeerPolicy) -> Standing {
    if policy.is_full() {
        Standing::TRUSTED
    } else {
        Standing {
            owner_trusted: false,
            restriction: Some(policy.clone()),
        }
    }
}
