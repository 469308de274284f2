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
//! * A legacy team or project id two nodes created before ids were
//!   qualified (docs/design.md §6.2) is a *clash* once a record of it with
//!   another origin arrives: the record is refused, the clash recorded here
//!   ([`ReplicaStore::record_clash`]), and from then on, failing closed, a
//!   grant to it does not count on memories that may mean the other scope
//!   ([`clash_cut`], [`crate::Clash::may_mean_other`]) and a membership of
//!   it written by such a node is refused (`legacy_scope_clash`). A scoped
//!   peer's claim makes only its own origin suspect: it cannot make us
//!   distrust third nodes.
//!
//! What the gate lets through is an [`Admission`]: the fact with the
//! [`Effect`] it may have here. Only this module builds one (from a peer's
//! fact, [`check`]; from this node's own, [`Admission::local`]), and
//! [`crate::ReplicaStore::put`] takes nothing else.
//!
//! Invariant: nothing here widens access beyond the policy the local
//! operator gave the peer.

use amos_acl::PeerPolicy;
use amos_protocol::{
    Fact, FactBody, Grants, NodeId, OrgScope, Scope, SignedFact, TeamId, Verified,
};

pub use crate::admission::{
    Admission, DeferReason, Effect, Refusal, Standing, peer_standing, standing,
};
use crate::replica::{ReplicaStore, Sender};

/// What the gate decided about one fact.
#[derive(Debug)]
pub enum Gate {
    /// Store it, with the effect the gate computed.
    Admit(Admission),
    /// Never store it: the fact broke a rule (audited with the refusal's code).
    Refuse(Verified<SignedFact>, Refusal),
    /// Keep it aside and retry later.
    Defer(Verified<SignedFact>, DeferReason),
}

/// Run the import gate for one verified fact from `sender`.
pub fn check<S: ReplicaStore>(
    store: &mut S,
    sender: &Sender,
    fact: Verified<SignedFact>,
) -> Result<Gate, S::Error> {
    Ok(match judge(store, sender, &fact.fact)? {
        Judgement::Admit(standing) => {
            let cut = match &fact.fact.body {
                FactBody::MemoryAcl(a) => clash_cut(store, a.fixed.origin, &a.grants)?,
                _ => Grants::private(),
            };
            let effect = Effect::judged(&fact.fact.body, &standing, &cut);
            Gate::Admit(Admission::admit(fact, effect))
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
    // A `none` link (a pure relay, docs/design.md §7.11) carries no facts
    // either way: not even a memory stored invisibly.
    if sender.policy.is_none() {
        return Ok(Judgement::Refuse(Refusal::OutsidePolicy(
            "the peer's policy is none: no facts either way".into(),
        )));
    }
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
                return Ok(Judgement::Refuse(conflict(
                    store, full, &scope, &held, &t.origin,
                )?));
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
                return Ok(Judgement::Refuse(conflict(
                    store, full, &scope, &held, &p.origin,
                )?));
            }
            Ok(if full {
                admit()
            } else {
                by_origin(fact, &scope, p.origin)
            })
        }
        FactBody::Membership(m) => {
            if full {
                // A scoped peer's membership must be by the scope's origin
                // (below); a full peer's may be by anyone — but not of a
                // clashed legacy id, by another than its held origin.
                if let Some(clash) = store.clash(&m.scope)?
                    && clash.may_mean_other(fact.author(), me)
                {
                    return Ok(Judgement::Refuse(Refusal::LegacyScopeClash(format!(
                        "{} here is node {}'s, another node created one too; node {} wrote this",
                        m.scope,
                        clash.held.short(),
                        fact.author().short()
                    ))));
                }
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

/// A record of `scope` whose origin is not the one held: refused; a legacy
/// id is recorded as a clash first (qualified ids cannot clash: their
/// qualifier names their origin, `Fact::validate`).
fn conflict<S: ReplicaStore>(
    store: &mut S,
    full: bool,
    scope: &OrgScope,
    held: &NodeId,
    theirs: &NodeId,
) -> Result<Refusal, S::Error> {
    if !scope.is_qualified() {
        store.record_clash(scope, held, theirs, full)?;
    }
    Ok(Refusal::OrgOriginConflict(format!(
        "{scope} was created here by node {}, the peer's by node {}",
        held.short(),
        theirs.short()
    )))
}

/// The grants of a memory from `origin` that must not count on this node
/// because they may mean another scope than the one held here under that
/// id (docs/design.md §6.2, fail closed). For a legacy id with a recorded
/// clash whose held scope was created by node H, a node X "may mean the
/// other" ([`crate::Clash::may_mean_other`]) unless X is H or this node —
/// any other node if a `full` peer brought the clash, else the clashing
/// origins a scoped peer brought:
///
/// * `team:T` (T clashed) does not count on memories from such an origin;
/// * `project:P` (P clashed) likewise;
/// * `project:P` whose team T is clashed does not count if P's own origin
///   may mean the other T: P's team check would read our T's roster for a
///   project of the other T.
///
/// A grant cut here is still signed and stored (digests agree); it only
/// gates nobody. Called by the gate on every acl fact and by the store
/// whenever it re-judges a memory's standing.
pub fn clash_cut<S: ReplicaStore>(
    store: &mut S,
    origin: NodeId,
    grants: &Grants,
) -> Result<Grants, S::Error> {
    let me = store.local_node();
    let mut cut = Grants::private();
    for g in grants.iter() {
        let out = match g {
            Scope::Team(t) if !t.is_qualified() => store
                .clash(&OrgScope::Team(t.clone()))?
                .is_some_and(|c| c.may_mean_other(origin, me)),
            Scope::Project(p) => {
                let own = if p.is_qualified() {
                    None
                } else {
                    store.clash(&OrgScope::Project(p.clone()))?
                };
                match own {
                    Some(c) => c.may_mean_other(origin, me),
                    None => match store.project_team(p)? {
                        Some(t) if !t.is_qualified() => match store.clash(&OrgScope::Team(t))? {
                            Some(c) => match store.org_origin(&OrgScope::Project(p.clone()))? {
                                Some(po) => c.may_mean_other(po, me),
                                None => c.closed,
                            },
                            None => false,
                        },
                        _ => false,
                    },
                }
            }
            _ => false,
        };
        if out {
            cut.insert(g.clone());
        }
    }
    Ok(cut)
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
        MemoryId, MemoryText, MemoryType, NodeIdentity, ProjectFact, ProjectId, Relation, TeamFact,
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
                validity: Default::default(),
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
    fn a_legacy_id_made_twice_fails_closed_once_the_clash_is_seen() {
        // Both we and the peer (full: the same operator) made a legacy
        // zeus; ours has alice, and a memory of the peer's reached us first.
        let mut w = World::new("full");
        let (me, peer) = (w.us.node_id(), w.peer.node_id());
        let zeus = OrgScope::Team(team("zeus"));
        w.local(FactBody::Team(TeamFact {
            id: team("zeus"),
            origin: me,
            name: "zeus".into(),
            present: true,
        }));
        w.local(member(zeus.clone(), "alice", true));
        let theirs = |id: MemoryId, origin: NodeId| {
            FactBody::MemoryAcl(MemoryAcl {
                id,
                fixed: MemoryFixed {
                    owner: AgentId::parse("eve").unwrap(),
                    created_ms: NOW,
                    origin,
                },
                grants: "team:zeus"
                    .parse::<amos_protocol::Scope>()
                    .into_iter()
                    .collect(),
            })
        };
        let early = MemoryId::new(NOW, [3; 10]);
        let fact = w.signed_by_peer(theirs(early, peer));
        let sender = Sender {
            node: peer,
            policy: PeerPolicy::Full,
        };
        crate::apply_batch(&mut w.store, &sender, vec![fact], NOW, 1).unwrap();
        let zeus_grant: Grants = "team:zeus"
            .parse::<amos_protocol::Scope>()
            .into_iter()
            .collect();
        assert_eq!(w.store.memories[&early].effective, zeus_grant);

        // The peer's own zeus arrives: refused, the clash recorded, and the
        // memory already held re-judged.
        let record = FactBody::Team(TeamFact {
            id: team("zeus"),
            origin: peer,
            name: "zeus".into(),
            present: true,
        });
        assert_eq!(w.judge(record), Err("org_origin_conflict".into()));
        assert_eq!(w.store.clash(&zeus).unwrap().map(|c| c.held), Some(me));
        assert!(w.store.memories[&early].effective.is_empty());
        // From now on: its roster changes are refused, even from a full peer…
        assert_eq!(
            w.judge(member(zeus.clone(), "eve", true)),
            Err("legacy_scope_clash".into())
        );
        // …a team:zeus grant on its memories counts for nobody here…
        let late = MemoryId::new(NOW, [4; 10]);
        assert_eq!(
            w.judge(theirs(late, peer)).map(|e| e.effective().cloned()),
            Ok(Some(Grants::private()))
        );
        // …and on ours (relayed back) it still does.
        assert_eq!(
            w.judge(theirs(late, me)).map(|e| e.effective().cloned()),
            Ok(Some(zeus_grant))
        );
        // A qualified id never clashes: its qualifier names its origin.
        let mine = OrgScope::Team(TeamId::qualified("zeus", &me).unwrap());
        assert!(w.store.clash(&mine).unwrap().is_none());
    }

    #[test]
    fn a_scoped_peers_clash_counts_against_its_own_memories_only() {
        let mut w = World::new("team:zeus");
        let (me, peer) = (w.us.node_id(), w.peer.node_id());
        let zeus = OrgScope::Team(team("zeus"));
        w.local(FactBody::Team(TeamFact {
            id: team("zeus"),
            origin: me,
            name: "zeus".into(),
            present: true,
        }));
        let record = FactBody::Team(TeamFact {
            id: team("zeus"),
            origin: peer,
            name: "zeus".into(),
            present: true,
        });
        assert_eq!(w.judge(record), Err("org_origin_conflict".into()));
        let clash = w.store.clash(&zeus).unwrap().expect("recorded");
        assert!(!clash.closed && clash.theirs == vec![peer]);
        // Its own team:zeus memories count for nobody here…
        let acl = FactBody::MemoryAcl(MemoryAcl {
            id: MemoryId::new(NOW, [5; 10]),
            fixed: MemoryFixed {
                owner: AgentId::parse("eve").unwrap(),
                created_ms: NOW,
                origin: peer,
            },
            grants: "team:zeus"
                .parse::<amos_protocol::Scope>()
                .into_iter()
                .collect(),
        });
        assert_eq!(
            w.judge(acl).map(|e| e.effective().cloned()),
            Ok(Some(Grants::private()))
        );
        // …but a third node is not taken to mean the other zeus on a
        // scoped peer's word (it cannot make us distrust others' grants).
        let third = NodeIdentity::from_secret([3; 32]).node_id();
        assert!(!clash.may_mean_other(third, me));
        assert!(!clash.may_mean_other(me, me));
    }

    #[test]
    fn a_none_peer_has_nothing_admitted_not_even_its_own_memory() {
        let mut w = World::new("none");
        let origin = w.peer.node_id();
        let fixed = MemoryFixed {
            owner: AgentId::parse("carol").unwrap(),
            created_ms: NOW,
            origin,
        };
        let id = MemoryId::new(NOW, [3; 10]);
        let content = FactBody::MemoryContent(MemoryContent {
            id,
            fixed: fixed.clone(),
            kind: MemoryType::default(),
            text: MemoryText::Plain("its own".into()),
            tags: vec![],
            importance: 0.5,
            confidence: 1.0,
            pinned: false,
            expires_ms: None,
            supersedes: None,
            validity: Default::default(),
        });
        assert_eq!(w.judge(content), Err("outside_policy".into()));
        let acl = FactBody::MemoryAcl(MemoryAcl {
            id,
            fixed,
            grants: "global"
                .parse::<amos_protocol::Scope>()
                .into_iter()
                .collect(),
        });
        assert_eq!(w.judge(acl), Err("outside_policy".into()));
        let team = FactBody::Team(TeamFact {
            id: team("u"),
            origin,
            name: "u".into(),
            present: true,
        });
        assert_eq!(w.judge(team), Err("outside_policy".into()));
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
            Refusal::TimeOutOfBounds(String::new()),
            Refusal::LegacyScopeClash(String::new()),
        ];
        let codes: std::collections::BTreeSet<_> = all.iter().map(Refusal::code).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(codes, Refusal::CODES.into_iter().collect());
        let deferred = [
            DeferReason::ClockSkew { ahead_ms: 1 },
            DeferReason::MissingEndpoint,
            DeferReason::MissingScope,
        ];
        let codes: std::collections::BTreeSet<_> = deferred.iter().map(DeferReason::code).collect();
        assert_eq!(codes.len(), deferred.len());
        assert_eq!(codes, DeferReason::CODES.into_iter().collect());
    }
}
