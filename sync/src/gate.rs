//! The import gate: what a fact from a peer may do on our node.
//!
//! * Only the origin speaks for a memory: from a non-`full` peer, a memory
//!   fact not authored by the memory's origin is refused.
//! * Effective visibility on our node is `grants ∩ restriction`, where the
//!   restriction is the sending peer's policy — or, for a fact relayed by a
//!   `full` peer, the policy we gave the memory's origin (nothing, if the
//!   origin is a stranger to us). A peer therefore cannot make a memory
//!   `global` here, or visible to one of our agents by naming it (the owner
//!   rule only holds for memories whose origin is us or a `full` peer).
//! * Org records follow the origin rule too: a team's record and its
//!   memberships (likewise a project's) come, from a non-`full` peer, only
//!   when authored by the node that created the team (its `origin`, a fixed
//!   field), and only for scopes the policy admits (a `project:P` policy
//!   admits P, its team's record and that team's memberships — the origin
//!   rule keeps a peer from rewriting a team it did not create). Agents and
//!   profiles only from `full` peers.
//! * Links from a scoped peer only from a memory that peer originated, and
//!   only between memories that peer may share.
//!
//! What the gate lets through is an [`Admission`]: the fact with the
//! [`Effect`] it may have here. Only this module builds one (from a peer's
//! fact, [`check`]; from this node's own, [`Admission::local`]), and
//! [`crate::ReplicaStore::put`] takes nothing else.
//!
//! Invariant: nothing here widens access beyond the policy the local
//! operator gave the peer.

use std::fmt;

use amos_acl::PeerPolicy;
use amos_protocol::{
    Fact, FactBody, Grants, NodeId, NodeIdentity, OrgScope, SignedFact, TeamId, Verified,
};

use crate::apply::{ReplicaStore, Sender};

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
        }
    }

    /// Every code [`Refusal::code`] can return.
    pub const CODES: [&'static str; 8] = [
        "not_origin",
        "outside_policy",
        "fixed_field_mismatch",
        "org_origin_conflict",
        "org_not_origin",
        "link_not_origin",
        "unknown_peer",
        "malformed_text",
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

    fn from_standing(body: &FactBody, standing: &Standing) -> Effect {
        let effective = match body {
            FactBody::MemoryAcl(a) => Some(standing.effective(&a.grants)),
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

    pub fn fact(&self) -> &Verified<SignedFact> {
        &self.fact
    }
    pub fn effect(&self) -> &Effect {
        &self.effect
    }
    pub fn into_fact(self) -> Verified<SignedFact> {
        self.fact
    }
}

/// What the gate decided about one fact.
#[derive(Debug)]
pub enum Gate {
    Admit(Admission),
    Refuse(Verified<SignedFact>, Refusal),
    Defer(Verified<SignedFact>, DeferReason),
}

/// How a memory stands on this node: whether its owner rule holds, and the
/// policy its grants meet here (`None`: unrestricted). A function of who the
/// memory's origin is to us, so it can be recomputed for stored memories
/// when a peer's policy changes ([`standing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub owner_trusted: bool,
    pub restriction: Option<PeerPolicy>,
}

impl Standing {
    const TRUSTED: Standing = Standing {
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

/// Run the import gate for one verified fact from `sender`.
pub fn check<S: ReplicaStore>(
    store: &mut S,
    sender: &Sender,
    fact: Verified<SignedFact>,
) -> Result<Gate, S::Error> {
    Ok(match judge(store, sender, &fact.fact)? {
        Judgement::Admit(standing) => {
            let effect = Effect::from_standing(&fact.fact.body, &standing);
            Gate::Admit(Admission { fact, effect })
        }
        Judgement::Refuse(r) => Gate::Refuse(fact, r),
        Judgement::Defer(d) => Gate::Defer(fact, d),
    })
}

enum Judgement {
    Admit(Standing),
    Refuse(Refusal),
    Defer(DeferReason),
}

fn admit() -> Judgement {
    Judgement::Admit(Standing::TRUSTED)
}

fn judge<S: ReplicaStore>(
    store: &mut S,
    sender: &Sender,
    fact: &Fact,
) -> Result<Judgement, S::Error> {
    let full = sender.policy.is_full();
    let me = store.local_node();
    match &fact.body {
        FactBody::MemoryContent(_) | FactBody::MemoryAcl(_) | FactBody::MemoryTombstone(_) => {
            let Some((_, fixed)) = fact.body.memory() else {
                return Ok(Judgement::Refuse(Refusal::NotOrigin));
            };
            if !full && fact.author() != fixed.origin {
                return Ok(Judgement::Refuse(Refusal::NotOrigin));
            }
            if let FactBody::MemoryContent(c) = &fact.body
                && let Err(e) = crate::text::check(&c.text)
            {
                return Ok(Judgement::Refuse(Refusal::MalformedText(e.to_string())));
            }
            let origin_policy = if fixed.origin == me {
                None
            } else {
                store.peer_policy(&fixed.origin)?
            };
            Ok(Judgement::Admit(standing(
                me,
                fixed.origin,
                origin_policy.as_ref(),
                &sender.policy,
            )))
        }
        FactBody::Team(t) => {
            let scope = OrgScope::Team(t.id.clone());
            if !full {
                match team_in_policy(store, &sender.policy, &t.id)? {
                    Some(true) => {}
                    Some(false) => return Ok(Judgement::Refuse(outside(&scope))),
                    None => return Ok(Judgement::Defer(DeferReason::MissingScope)),
                }
            }
            if let Some(held) = store.org_origin(&scope)?
                && held != t.origin
            {
                return Ok(Judgement::Refuse(conflict(&scope, &held, &t.origin)));
            }
            Ok(if full {
                admit()
            } else {
                by_origin(fact, &scope, t.origin)
            })
        }
        FactBody::Project(p) => {
            let scope = OrgScope::Project(p.id.clone());
            if let Some(team) = store.project_team(&p.id)?
                && team != p.team
            {
                return Ok(Judgement::Refuse(Refusal::FixedFieldMismatch(format!(
                    "project {} belongs to team {team} here, not {}",
                    p.id, p.team
                ))));
            }
            if !full && !sender.policy.admits_org(&scope) {
                return Ok(Judgement::Refuse(outside(&scope)));
            }
            if let Some(held) = store.org_origin(&scope)?
                && held != p.origin
            {
                return Ok(Judgement::Refuse(conflict(&scope, &held, &p.origin)));
            }
            Ok(if full {
                admit()
            } else {
                by_origin(fact, &scope, p.origin)
            })
        }
        FactBody::Membership(m) => {
            if full {
                return Ok(admit());
            }
            let in_policy = match &m.scope {
                OrgScope::Team(t) => team_in_policy(store, &sender.policy, t)?,
                OrgScope::Project(_) => Some(sender.policy.admits_org(&m.scope)),
            };
            match in_policy {
                Some(true) => {}
                Some(false) => return Ok(Judgement::Refuse(outside(&m.scope))),
                None => return Ok(Judgement::Defer(DeferReason::MissingScope)),
            }
            match store.org_origin(&m.scope)? {
                Some(origin) => Ok(by_origin(fact, &m.scope, origin)),
                None => Ok(Judgement::Defer(DeferReason::MissingScope)),
            }
        }
        FactBody::Agent(_) | FactBody::Profile(_) => Ok(if full {
            admit()
        } else {
            Judgement::Refuse(Refusal::OutsidePolicy(
                "agent records and profiles only come from full peers".into(),
            ))
        }),
        FactBody::Link(l) => {
            if full {
                return Ok(admit());
            }
            let (Some(a), Some(b)) = (store.memory(&l.from)?, store.memory(&l.to)?) else {
                return Ok(Judgement::Defer(DeferReason::MissingEndpoint));
            };
            if fact.author() != a.fixed.origin {
                return Ok(Judgement::Refuse(Refusal::LinkNotOrigin));
            }
            let shared = |g: &Grants| sender.policy.admits_grants(g);
            Ok(if shared(&a.effective) && shared(&b.effective) {
                admit()
            } else {
                Judgement::Refuse(Refusal::OutsidePolicy(
                    "link between memories the peer may not share".into(),
                ))
            })
        }
    }
}

/// Whether a team's record and memberships are inside a scoped policy: the
/// policy names the team, or names a project of that team (as our org
/// graph has it). `None`: not known yet — a project the policy names has
/// not arrived, and may belong to this team.
fn team_in_policy<S: ReplicaStore>(
    store: &mut S,
    policy: &PeerPolicy,
    team: &TeamId,
) -> Result<Option<bool>, S::Error> {
    if policy.admits_org(&OrgScope::Team(team.clone())) {
        return Ok(Some(true));
    }
    let mut unknown = false;
    for project in policy.projects() {
        match store.project_team(project)? {
            Some(t) if &t == team => return Ok(Some(true)),
            Some(_) => {}
            None => unknown = true,
        }
    }
    Ok(if unknown { None } else { Some(false) })
}

fn by_origin(fact: &Fact, scope: &OrgScope, origin: NodeId) -> Judgement {
    if fact.author() == origin {
        admit()
    } else {
        Judgement::Refuse(Refusal::OrgNotOrigin(format!(
            "{scope} was created by node {}",
            origin.short()
        )))
    }
}

fn conflict(scope: &OrgScope, held: &NodeId, theirs: &NodeId) -> Refusal {
    Refusal::OrgOriginConflict(format!(
        "{scope} was created here by node {}, the peer's by node {}",
        held.short(),
        theirs.short()
    ))
}

fn outside(scope: &OrgScope) -> Refusal {
    Refusal::OutsidePolicy(format!("org records of {scope}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memstore::MemStore;
    use amos_protocol::{
        AgentId, HlcState, LinkFact, MembershipFact, MemoryAcl, MemoryContent, MemoryFixed,
        MemoryId, MemoryText, MemoryType, ProjectFact, ProjectId, Relation, TeamFact,
    };

    const NOW: u64 = 1_750_000_000_000;

    struct World {
        us: NodeIdentity,
        peer: NodeIdentity,
        store: MemStore,
        hlc: HlcState,
    }

    impl World {
        /// Us, with team `t` (and its project `p`) created here, and a peer
        /// we give `policy`.
        fn new(policy: &str) -> World {
            let us = NodeIdentity::from_secret([1; 32]);
            let peer = NodeIdentity::from_secret([2; 32]);
            let mut store = MemStore::new(us.node_id());
            store.set_peer_policy(peer.node_id(), policy.parse().unwrap());
            let mut w = World {
                us,
                peer,
                store,
                hlc: HlcState::default(),
            };
            let me = w.us.node_id();
            w.local(FactBody::Team(TeamFact {
                id: team("t"),
                origin: me,
                name: "t".into(),
                present: true,
            }));
            w.local(FactBody::Project(ProjectFact {
                id: ProjectId::parse("p").unwrap(),
                team: team("t"),
                origin: me,
                name: "p".into(),
                present: true,
            }));
            w
        }

        fn local(&mut self, body: FactBody) -> Verified<SignedFact> {
            self.store.write(&self.us, body, NOW)
        }

        fn signed_by_peer(&mut self, body: FactBody) -> Verified<SignedFact> {
            let clock = self.hlc.tick(NOW, self.peer.node_id());
            self.peer.sign(Fact { clock, body }).unwrap()
        }

        fn judge(&mut self, body: FactBody) -> Result<Effect, String> {
            let fact = self.signed_by_peer(body);
            let sender = Sender {
                node: self.peer.node_id(),
                policy: self.store.peers[&self.peer.node_id()].clone(),
            };
            match check(&mut self.store, &sender, fact).unwrap() {
                Gate::Admit(a) => Ok(a.effect().clone()),
                Gate::Refuse(_, r) => Err(r.code().to_owned()),
                Gate::Defer(_, d) => Err(d.code().to_owned()),
            }
        }
    }

    fn team(s: &str) -> TeamId {
        TeamId::parse(s).unwrap()
    }

    fn member(scope: OrgScope, agent: &str, present: bool) -> FactBody {
        FactBody::Membership(MembershipFact {
            scope,
            agent: AgentId::parse(agent).unwrap(),
            role: "member".into(),
            present,
        })
    }

    #[test]
    fn a_scoped_peer_cannot_change_a_team_it_did_not_create() {
        let mut w = World::new("team:t");
        let t = OrgScope::Team(team("t"));
        assert_eq!(
            w.judge(member(t.clone(), "bob", false)),
            Err("org_not_origin".into())
        );
        assert_eq!(
            w.judge(member(t, "eve", true)),
            Err("org_not_origin".into())
        );
        let peer = w.peer.node_id();
        let renamed = FactBody::Team(TeamFact {
            id: team("t"),
            origin: peer,
            name: "mine now".into(),
            present: true,
        });
        assert_eq!(w.judge(renamed), Err("org_origin_conflict".into()));
        let me = w.us.node_id();
        let renamed_as_ours = FactBody::Team(TeamFact {
            id: team("t"),
            origin: me,
            name: "mine now".into(),
            present: true,
        });
        assert_eq!(w.judge(renamed_as_ours), Err("org_not_origin".into()));
        // A team outside the policy is refused before anything else.
        let other = FactBody::Team(TeamFact {
            id: team("u"),
            origin: peer,
            name: "u".into(),
            present: true,
        });
        assert_eq!(w.judge(other), Err("outside_policy".into()));
    }

    #[test]
    fn a_scoped_peer_runs_its_own_team() {
        let mut w = World::new("team:u");
        let peer = w.peer.node_id();
        // Its membership before its team: deferred, not refused.
        assert_eq!(
            w.judge(member(OrgScope::Team(team("u")), "bob", true)),
            Err("missing_scope".into())
        );
        let record = FactBody::Team(TeamFact {
            id: team("u"),
            origin: peer,
            name: "u".into(),
            present: true,
        });
        assert!(w.judge(record.clone()).is_ok());
        let fact = w.signed_by_peer(record);
        let sender = Sender {
            node: peer,
            policy: "team:u".parse().unwrap(),
        };
        crate::apply_batch(&mut w.store, &sender, vec![fact], NOW, 1).unwrap();
        assert!(
            w.judge(member(OrgScope::Team(team("u")), "bob", true))
                .is_ok()
        );
    }

    #[test]
    fn a_project_policy_reaches_its_team_record_and_members_only() {
        let mut w = World::new("project:p");
        let me = w.us.node_id();
        // Our team t holds project p: the peer may not author t's records…
        assert_eq!(
            w.judge(member(OrgScope::Team(team("t")), "bob", true)),
            Err("org_not_origin".into())
        );
        // …and a team unrelated to p is outside the policy.
        assert_eq!(
            w.judge(member(OrgScope::Team(team("u")), "bob", true)),
            Err("outside_policy".into())
        );
        // A peer's project q of its own team: with policy project:q, its
        // team record (authored by its origin) is admitted.
        let mut w = World::new("project:q");
        let peer = w.peer.node_id();
        let team_record = FactBody::Team(TeamFact {
            id: team("v"),
            origin: peer,
            name: "v".into(),
            present: true,
        });
        // q not known yet: the team record waits for it.
        assert_eq!(w.judge(team_record.clone()), Err("missing_scope".into()));
        let project = FactBody::Project(ProjectFact {
            id: ProjectId::parse("q").unwrap(),
            team: team("v"),
            origin: peer,
            name: "q".into(),
            present: true,
        });
        let facts = vec![
            w.signed_by_peer(team_record.clone()),
            w.signed_by_peer(project),
        ];
        let sender = Sender {
            node: peer,
            policy: "project:q".parse().unwrap(),
        };
        // One batch, team first on the wire: projects apply first.
        let r = crate::apply_batch(&mut w.store, &sender, facts, NOW, 1).unwrap();
        assert_eq!((r.applied, r.refused, r.deferred), (2, 0, 0));
        assert!(
            w.judge(member(OrgScope::Team(team("v")), "bob", true))
                .is_ok()
        );
        let _ = me;
    }

    #[test]
    fn a_scoped_peer_cannot_link_from_a_memory_it_did_not_originate() {
        let mut w = World::new("team:t");
        let me = w.us.node_id();
        let fixed = MemoryFixed {
            owner: AgentId::parse("alice").unwrap(),
            created_ms: NOW,
            origin: me,
        };
        let (x, y) = (MemoryId::new(NOW, [1; 10]), MemoryId::new(NOW, [2; 10]));
        for id in [x, y] {
            w.local(FactBody::MemoryContent(MemoryContent {
                id,
                fixed: fixed.clone(),
                kind: MemoryType::default(),
                text: MemoryText::Plain("text".into()),
                tags: vec![],
                importance: 0.5,
                confidence: 1.0,
                pinned: false,
                expires_ms: None,
                supersedes: None,
            }));
            w.local(FactBody::MemoryAcl(MemoryAcl {
                id,
                fixed: fixed.clone(),
                grants: "team:t"
                    .parse::<amos_protocol::Scope>()
                    .into_iter()
                    .collect(),
            }));
        }
        let link = FactBody::Link(LinkFact {
            from: x,
            to: y,
            relation: Relation::default(),
            weight: 1.0,
            present: true,
        });
        assert_eq!(w.judge(link), Err("link_not_origin".into()));
    }

    #[test]
    fn a_local_admission_needs_this_nodes_key() {
        let us = NodeIdentity::from_secret([1; 32]);
        let them = NodeIdentity::from_secret([2; 32]);
        let mut hlc = HlcState::default();
        let body = member(OrgScope::Team(team("t")), "bob", true);
        let theirs = them
            .sign(Fact {
                clock: hlc.tick(NOW, them.node_id()),
                body: body.clone(),
            })
            .unwrap();
        assert!(Admission::local(&us, theirs).is_err());
        let ours = us
            .sign(Fact {
                clock: hlc.tick(NOW, us.node_id()),
                body,
            })
            .unwrap();
        let a = Admission::local(&us, ours).unwrap();
        assert!(a.effect().owner_trusted() && !a.effect().purge_content());
    }

    #[test]
    fn codes_are_distinct_and_listed() {
        let all = [
            Refusal::NotOrigin,
            Refusal::OutsidePolicy(String::new()),
            Refusal::FixedFieldMismatch(String::new()),
            Refusal::OrgOriginConflict(String::new()),
            Refusal::OrgNotOrigin(String::new()),
            Refusal::LinkNotOrigin,
            Refusal::UnknownPeer,
            Refusal::MalformedText(String::new()),
        ];
        let codes: std::collections::BTreeSet<_> = all.iter().map(Refusal::code).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(codes, Refusal::CODES.into_iter().collect());
    }
}
