//! The import gate: what a fact from a peer may do on our node (DESIGN.md §6).
//!
//! * Only the origin speaks for a memory: from a non-`full` peer, a memory
//!   fact not authored by the memory's origin is refused.
//! * Effective visibility on our node is `grants ∩ restriction`, where the
//!   restriction is the sending peer's policy — or, for a fact relayed by a
//!   `full` peer, the policy we gave the memory's origin (nothing, if the
//!   origin is a stranger to us). A peer therefore cannot make a memory
//!   `global` here, or visible to one of our agents by naming it (the owner
//!   rule only holds for memories whose origin is us or a `full` peer).
//! * Org records only for scopes the policy names (a project's team is
//!   checked against *our* org graph, and a `project:` policy never admits
//!   the team itself); agents and profiles only from `full` peers.
//! * Links from a scoped peer only between memories that peer may share.
//!
//! Invariant: nothing here widens access beyond the policy the local
//! operator gave the peer.

use std::fmt;

use amos_acl::PeerPolicy;
use amos_protocol::{Fact, FactBody, Grants, OrgScope};

use crate::apply::{ReplicaStore, Sender};

/// Why a fact was refused. Written to the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A memory fact from a non-`full` peer not authored by the memory's origin.
    NotOrigin,
    /// An org, agent, profile or link fact outside the sender's policy.
    OutsidePolicy(String),
    /// A fixed field (owner, origin, creation time, a project's team) differs.
    FixedFieldMismatch(String),
    /// The sender is not a registered peer (or was removed).
    UnknownPeer,
    /// A text change or snapshot that does not decode.
    MalformedText(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotOrigin => f.write_str("memory fact not authored by the memory's origin"),
            Refusal::OutsidePolicy(what) => write!(f, "outside the peer's policy: {what}"),
            Refusal::FixedFieldMismatch(what) => write!(f, "fixed field mismatch: {what}"),
            Refusal::UnknownPeer => f.write_str("sender is not a registered peer"),
            Refusal::MalformedText(e) => write!(f, "malformed text: {e}"),
        }
    }
}

/// Why a fact was set aside, to be retried later rather than applied now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeferReason {
    /// The fact's clock is this far ahead of our physical clock (beyond `max_skew`).
    ClockSkew { ahead_ms: u64 },
    /// A link whose endpoint memories have not arrived yet.
    MissingEndpoint,
}

impl fmt::Display for DeferReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeferReason::ClockSkew { ahead_ms } => {
                write!(f, "clock {} s ahead of ours", ahead_ms / 1000)
            }
            DeferReason::MissingEndpoint => f.write_str("link endpoint not yet received"),
        }
    }
}

/// What the gate lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Admitted; for memory facts, the restriction its grants meet here
    /// (`None` = unrestricted) and whether its owner rule holds.
    Admit {
        restriction: Option<PeerPolicy>,
        owner_trusted: bool,
    },
    Refuse(Refusal),
    Defer(DeferReason),
}

fn admit() -> Gate {
    Gate::Admit {
        restriction: None,
        owner_trusted: true,
    }
}

/// Run the import gate for one (already verified) fact from `sender`.
pub fn check<S: ReplicaStore>(
    store: &mut S,
    sender: &Sender,
    fact: &Fact,
) -> Result<Gate, S::Error> {
    let full = sender.policy.is_full();
    let me = store.local_node();
    match &fact.body {
        FactBody::MemoryContent(_) | FactBody::MemoryAcl(_) | FactBody::MemoryTombstone(_) => {
            let Some((_, fixed)) = fact.body.memory() else {
                return Ok(Gate::Refuse(Refusal::NotOrigin));
            };
            if !full && fact.author() != fixed.origin {
                return Ok(Gate::Refuse(Refusal::NotOrigin));
            }
            if let FactBody::MemoryContent(c) = &fact.body
                && let Err(e) = crate::text::check(&c.text)
            {
                return Ok(Gate::Refuse(Refusal::MalformedText(e.to_string())));
            }
            let origin_policy = if fixed.origin == me {
                Some(PeerPolicy::Full)
            } else {
                store.peer_policy(&fixed.origin)?
            };
            let owner_trusted =
                fixed.origin == me || origin_policy.as_ref().is_some_and(PeerPolicy::is_full);
            let restriction = if owner_trusted {
                None
            } else if full {
                // Relayed by our own operator's node: the memory's visibility
                // here is what we would give its origin directly.
                Some(origin_policy.unwrap_or_else(|| PeerPolicy::Scoped(Default::default())))
            } else {
                Some(sender.policy.clone())
            };
            Ok(Gate::Admit {
                restriction,
                owner_trusted,
            })
        }
        FactBody::Team(t) => Ok(org(&sender.policy, &OrgScope::Team(t.id.clone()))),
        FactBody::Project(p) => {
            if let Some(team) = store.project_team(&p.id)?
                && team != p.team
            {
                return Ok(Gate::Refuse(Refusal::FixedFieldMismatch(format!(
                    "project {} belongs to team {team} here, not {}",
                    p.id, p.team
                ))));
            }
            Ok(org(&sender.policy, &OrgScope::Project(p.id.clone())))
        }
        FactBody::Membership(m) => Ok(org(&sender.policy, &m.scope)),
        FactBody::Agent(_) | FactBody::Profile(_) => Ok(if full {
            admit()
        } else {
            Gate::Refuse(Refusal::OutsidePolicy(
                "agent records and profiles only come from full peers".into(),
            ))
        }),
        FactBody::Link(l) => {
            if full {
                return Ok(admit());
            }
            let (Some(a), Some(b)) = (store.memory(&l.from)?, store.memory(&l.to)?) else {
                return Ok(Gate::Defer(DeferReason::MissingEndpoint));
            };
            let shared = |g: &Grants| sender.policy.admits_grants(g);
            Ok(if shared(&a.effective) && shared(&b.effective) {
                admit()
            } else {
                Gate::Refuse(Refusal::OutsidePolicy(
                    "link between memories the peer may not share".into(),
                ))
            })
        }
    }
}

fn org(policy: &PeerPolicy, scope: &OrgScope) -> Gate {
    if policy.admits_org(scope) {
        admit()
    } else {
        Gate::Refuse(Refusal::OutsidePolicy(format!("org records of {scope}")))
    }
}
