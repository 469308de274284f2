//! The escalation matrix at the sync level (docs/design.md §4–§6): everything a
//! scoped peer can try against our node, each case refused (and recorded in
//! the audit log with the right reason) or neutralised (applied without
//! widening anyone's access).
//!
//! The cast: our node `ours` with a local org — team `apollo` (alice, bob;
//! project `ui` with alice), team `zeus` (carol) — and local memories of
//! every visibility; a scoped peer `mallory` with policy `team:apollo`; an
//! honest third node `origin` whose apollo memory mallory received and relays
//! to us. Cases that touch origin's memories run once for each way we may
//! know origin: not at all, as a `team:apollo` peer, or as a `full` peer.
//!
//! Every case runs twice, through the one replica contract of
//! `amos_tests::replica`: on the in-memory twin (`mem::…`) and on the real
//! store (`sql::…`: a SQLite file written through `SqlReplica`, the audit
//! log and deferred facts read from their tables).

use std::collections::{BTreeMap, BTreeSet};

use amos_acl::PeerPolicy;
use amos_protocol::{
    AgentFact, AgentId, Fact, FactBody, Grants, Hlc, LinkFact, MembershipFact, MemoryAcl,
    MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryTombstone, MemoryType, NodeId,
    NodeIdentity, OrgScope, ProfileFact, ProjectFact, ProjectId, ProtocolError, Register, Relation,
    Scope, SignedFact, TeamFact, TeamId, Verified,
};
use amos_sync::MemStore;
use amos_sync::{ApplyReport, Refusal, Sender, apply_batch};
use amos_tests::replica::{Mem, Sql, TestReplica};

const T0: u64 = 1_750_000_000_000;
const MINUTE: u64 = 60_000;
const MAX_SKEW_MS: u64 = 10 * MINUTE;
/// A year ahead: a clock that would win every conflict if it were believed.
const FAR_MS: u64 = 365 * 24 * 60 * MINUTE;

/// The agents whose view of our node the cases watch.
const WATCHED: [&str; 5] = ["alice", "bob", "carol", "eve", "olga"];

fn agent(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

fn team(s: &str) -> TeamId {
    TeamId::parse(s).unwrap()
}

fn project(s: &str) -> ProjectId {
    ProjectId::parse(s).unwrap()
}

fn grants(s: &[&str]) -> Grants {
    s.iter().map(|x| x.parse::<Scope>().unwrap()).collect()
}

fn policy(s: &str) -> PeerPolicy {
    s.parse().unwrap()
}

/// How our node knows `origin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OriginTrust {
    Stranger,
    Scoped,
    Full,
}

const ALL_TRUST: [OriginTrust; 3] = [
    OriginTrust::Stranger,
    OriginTrust::Scoped,
    OriginTrust::Full,
];

/// Our node's own memories, by what they are shared with.
#[derive(Clone, Copy)]
struct Ours {
    private: MemoryId,
    agent_bob: MemoryId,
    zeus: MemoryId,
    global: MemoryId,
    apollo: MemoryId,
    apollo_global: MemoryId,
    project_ui: MemoryId,
    /// Shared with team:apollo, then moved to team:zeus only.
    unshared: MemoryId,
    /// Shared with team:apollo, then forgotten.
    forgotten: MemoryId,
}

struct Net<R: TestReplica> {
    ours_id: NodeIdentity,
    ours: R,
    mallory_id: NodeIdentity,
    mallory_policy: PeerPolicy,
    origin_id: NodeIdentity,
    origin: R,
    now: u64,
    mine: Ours,
    /// origin's memory shared with team:apollo, relayed to us by mallory.
    theirs: (MemoryId, MemoryFixed),
    /// Every fact origin wrote, in order (what mallory could replay).
    origin_log: Vec<Verified<SignedFact>>,
    /// Every fact our node wrote, in order.
    ours_log: Vec<Verified<SignedFact>>,
}

/// What an attack must not change when nothing legitimate arrives.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    digest: String,
    visible: BTreeMap<&'static str, BTreeSet<MemoryId>>,
    texts: BTreeMap<MemoryId, Option<String>>,
}

fn content_body(id: MemoryId, fixed: &MemoryFixed, text: &str) -> FactBody {
    FactBody::MemoryContent(MemoryContent {
        id,
        fixed: fixed.clone(),
        kind: MemoryType::default(),
        text: MemoryText::Plain(text.into()),
        tags: vec![],
        importance: 0.5,
        confidence: 1.0,
        pinned: false,
        expires_ms: None,
        supersedes: None,
        validity: Default::default(),
    })
}

fn acl_body(id: MemoryId, fixed: &MemoryFixed, g: Grants) -> FactBody {
    FactBody::MemoryAcl(MemoryAcl {
        id,
        fixed: fixed.clone(),
        grants: g,
    })
}

fn tombstone_body(id: MemoryId, fixed: &MemoryFixed) -> FactBody {
    FactBody::MemoryTombstone(MemoryTombstone {
        id,
        fixed: fixed.clone(),
    })
}

fn membership(scope: OrgScope, a: &str, present: bool) -> FactBody {
    FactBody::Membership(MembershipFact {
        scope,
        agent: agent(a),
        role: "member".into(),
        present,
    })
}

impl<R: TestReplica> Net<R> {
    fn new(trust: OriginTrust) -> Net<R> {
        let ours_id = NodeIdentity::from_secret([1; 32]);
        let mallory_id = NodeIdentity::from_secret([66; 32]);
        let origin_id = NodeIdentity::from_secret([7; 32]);
        let mallory_policy = policy("team:apollo");
        let mut ours = R::create(&ours_id);
        ours.set_peer_policy(&mallory_id.node_id(), &mallory_policy);
        match trust {
            OriginTrust::Stranger => {}
            OriginTrust::Scoped => {
                ours.set_peer_policy(&origin_id.node_id(), &policy("team:apollo"));
            }
            OriginTrust::Full => {
                ours.set_peer_policy(&origin_id.node_id(), &PeerPolicy::Full);
            }
        }
        let origin = R::create(&origin_id);
        let mut net = Net {
            ours_id,
            ours,
            mallory_id,
            mallory_policy,
            origin_id,
            origin,
            now: T0,
            mine: Ours {
                private: MemoryId([0; 16]),
                agent_bob: MemoryId([0; 16]),
                zeus: MemoryId([0; 16]),
                global: MemoryId([0; 16]),
                apollo: MemoryId([0; 16]),
                apollo_global: MemoryId([0; 16]),
                project_ui: MemoryId([0; 16]),
                unshared: MemoryId([0; 16]),
                forgotten: MemoryId([0; 16]),
            },
            theirs: (
                MemoryId([0; 16]),
                MemoryFixed {
                    owner: agent("olga"),
                    created_ms: 0,
                    origin: NodeId([0; 32]),
                },
            ),
            origin_log: Vec::new(),
            ours_log: Vec::new(),
        };

        // Our org.
        let us = net.ours_id.node_id();
        for t in ["apollo", "zeus"] {
            net.local(FactBody::Team(TeamFact {
                id: team(t),
                origin: us,
                name: t.into(),
                present: true,
            }));
        }
        net.local(FactBody::Project(ProjectFact {
            id: project("ui"),
            team: team("apollo"),
            origin: us,
            name: "Apollo UI".into(),
            present: true,
        }));
        for (scope, a) in [
            (OrgScope::Team(team("apollo")), "alice"),
            (OrgScope::Team(team("apollo")), "bob"),
            (OrgScope::Team(team("zeus")), "carol"),
            (OrgScope::Project(project("ui")), "alice"),
        ] {
            net.local(membership(scope, a, true));
        }
        for a in ["alice", "bob", "carol"] {
            net.local(FactBody::Agent(AgentFact {
                id: agent(a),
                kind: "claude-code".into(),
                display_name: a.into(),
                present: true,
            }));
            net.local(FactBody::Profile(ProfileFact {
                agent: agent(a),
                weights: vec![(MemoryType::default(), 1.0)],
            }));
        }

        // Our memories.
        net.mine = Ours {
            private: net.local_memory(1, "alice", &[], "alice's private diary"),
            agent_bob: net.local_memory(2, "alice", &["agent:bob"], "for bob's eyes"),
            zeus: net.local_memory(3, "carol", &["team:zeus"], "zeus plans"),
            global: net.local_memory(4, "bob", &["global"], "hello world"),
            apollo: net.local_memory(5, "alice", &["team:apollo"], "apollo standup"),
            apollo_global: net.local_memory(6, "bob", &["team:apollo", "global"], "apollo blog"),
            project_ui: net.local_memory(7, "bob", &["project:ui"], "ui mockups"),
            unshared: net.local_memory(8, "alice", &["team:apollo"], "was apollo's"),
            forgotten: net.local_memory(9, "bob", &["team:apollo"], "short-lived"),
        };
        let (u, uf) = net.fixed_of(net.mine.unshared);
        net.local(acl_body(u, &uf, grants(&["team:zeus"])));
        let (f, ff) = net.fixed_of(net.mine.forgotten);
        net.local(tombstone_body(f, &ff));
        let (a, b) = (net.mine.apollo, net.mine.apollo_global);
        net.local(FactBody::Link(LinkFact {
            from: a,
            to: b,
            relation: Relation::default(),
            weight: 0.5,
            present: true,
        }));
        for other in [net.mine.private, net.mine.zeus, net.mine.unshared] {
            net.local(FactBody::Link(LinkFact {
                from: a,
                to: other,
                relation: Relation::default(),
                weight: 0.5,
                present: true,
            }));
        }

        // origin's apollo memory, which mallory received and relays to us.
        net.tick();
        let id = MemoryId::new(net.now, [0xee; 10]);
        let fixed = MemoryFixed {
            owner: agent("olga"),
            created_ms: net.now,
            origin: net.origin_id.node_id(),
        };
        net.origin_write(content_body(id, &fixed, "origin's apollo note"));
        net.origin_write(acl_body(id, &fixed, grants(&["team:apollo"])));
        net.theirs = (id, fixed);
        let relay = net.origin.export(&net.mallory_policy);
        let r = net.mallory_sends(relay);
        assert_eq!(
            (r.applied, r.refused, r.deferred),
            (2, 0, 0),
            "setup relay: {r:?}"
        );

        // The baseline every case starts from.
        let v = |n: &mut Net<R>, a: &str| n.ours.visible_to(&agent(a));
        let m = net.mine;
        assert_eq!(
            v(&mut net, "alice"),
            BTreeSet::from([
                m.private,
                m.agent_bob,
                m.global,
                m.apollo,
                m.apollo_global,
                m.project_ui,
                m.unshared,
                id
            ])
        );
        assert_eq!(
            v(&mut net, "bob"),
            BTreeSet::from([
                m.agent_bob,
                m.global,
                m.apollo,
                m.apollo_global,
                m.project_ui,
                id
            ])
        );
        assert_eq!(
            v(&mut net, "carol"),
            BTreeSet::from([m.zeus, m.global, m.apollo_global, m.unshared])
        );
        assert_eq!(
            v(&mut net, "eve"),
            BTreeSet::from([m.global, m.apollo_global])
        );
        assert!(net.ours.refused().is_empty() && net.ours.deferred().is_empty());
        net
    }

    fn tick(&mut self) {
        self.now += 1_000;
    }

    /// A local write on our node.
    fn local(&mut self, body: FactBody) -> Verified<SignedFact> {
        self.tick();
        let f = self.ours.write(&self.ours_id, body, self.now);
        self.ours_log.push(f.clone());
        f
    }

    fn local_memory(&mut self, n: u8, owner: &str, g: &[&str], text: &str) -> MemoryId {
        self.tick();
        let id = MemoryId::new(self.now, [n; 10]);
        let fixed = MemoryFixed {
            owner: agent(owner),
            created_ms: self.now,
            origin: self.ours_id.node_id(),
        };
        self.local(content_body(id, &fixed, text));
        if !g.is_empty() {
            self.local(acl_body(id, &fixed, grants(g)));
        }
        id
    }

    fn fixed_of(&mut self, id: MemoryId) -> (MemoryId, MemoryFixed) {
        (id, self.ours.memory(&id).expect("held").fixed)
    }

    /// A write on origin's own replica.
    fn origin_write(&mut self, body: FactBody) -> Verified<SignedFact> {
        self.tick();
        let f = self.origin.write(&self.origin_id, body, self.now);
        self.origin_log.push(f.clone());
        f
    }

    /// A fact mallory authors and signs itself, claiming physical time `wall_ms`.
    fn forge(&self, wall_ms: u64, body: FactBody) -> Verified<SignedFact> {
        let clock = Hlc {
            wall_ms,
            logical: 0,
            node: self.mallory_id.node_id(),
        };
        self.mallory_id.sign(Fact { clock, body }).unwrap()
    }

    /// The same body forged now and a year ahead.
    fn forge_now_and_far(&mut self, body: FactBody) -> [Verified<SignedFact>; 2] {
        self.tick();
        [
            self.forge(self.now, body.clone()),
            self.forge(self.now + FAR_MS, body),
        ]
    }

    fn sender(&mut self, node: NodeId) -> Sender {
        Sender {
            node,
            policy: self.ours.peer_policy(&node).expect("a peer"),
        }
    }

    /// Mallory sends a batch; we apply it at our physical time.
    fn mallory_sends(&mut self, facts: Vec<Verified<SignedFact>>) -> ApplyReport {
        self.mallory_sends_at(facts, self.now)
    }

    fn mallory_sends_at(&mut self, facts: Vec<Verified<SignedFact>>, now: u64) -> ApplyReport {
        let sender = self.sender(self.mallory_id.node_id());
        self.ours.apply(&sender, facts, now, MAX_SKEW_MS)
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot {
            digest: self.ours.digest(),
            visible: WATCHED
                .iter()
                .map(|a| (*a, self.ours.visible_to(&agent(a))))
                .collect(),
            texts: self
                .ours
                .memory_ids()
                .into_iter()
                .map(|id| (id, self.ours.text(&id)))
                .collect(),
        }
    }

    fn mallory(&self) -> NodeId {
        self.mallory_id.node_id()
    }

    /// `fact` (from mallory) is in the audit log with a matching reason, and
    /// not what we hold for its register.
    fn assert_refused(&mut self, fact: &SignedFact, want: Want) {
        let mallory = self.mallory();
        let refused = self.ours.refused();
        let hit = refused
            .iter()
            .find(|(f, from, _)| f == fact && *from == mallory);
        match hit {
            Some((_, _, why)) => {
                assert!(want(why), "refused for the wrong reason: {why}\n{fact:?}")
            }
            None => panic!(
                "not refused: {:?}\nrefused: {:?}",
                fact.fact,
                refused.iter().map(|r| r.2.clone()).collect::<Vec<_>>()
            ),
        }
        self.assert_not_held(fact);
    }

    fn assert_not_held(&mut self, fact: &SignedFact) {
        let reg = fact.fact.body.register();
        assert_ne!(
            self.ours.fact(&reg).map(|f| f.into_inner()).as_ref(),
            Some(fact),
            "an attack fact was applied: {:?}",
            fact.fact
        );
    }

    /// A far-future attack fact: refused with a matching reason, or deferred
    /// for skew — and if deferred, refused (never applied) when retried once
    /// our clock reaches its claimed time.
    fn assert_never_applied(&mut self, fact: &SignedFact, want: Want) {
        self.assert_not_held(fact);
        let refused = self.ours.refused().iter().any(|(f, _, _)| f == fact);
        if refused {
            return self.assert_refused(fact, want);
        }
        let deferred = self.ours.deferred();
        let deferred = deferred.iter().find(|(f, _, _)| f == fact);
        let Some((_, from, why)) = deferred.cloned() else {
            panic!(
                "far-future fact neither refused nor deferred: {:?}",
                fact.fact
            );
        };
        assert_eq!(from, self.mallory());
        assert!(why.is_some_and(|a| a > MAX_SKEW_MS), "deferred for {why:?}");
        let before = self.snapshot();
        let r = self.mallory_sends_at(
            vec![fact.clone().verify().unwrap()],
            fact.fact.clock.wall_ms,
        );
        assert_eq!(
            (r.applied, r.refused),
            (0, 1),
            "retry of a deferred attack: {r:?}"
        );
        self.assert_refused(fact, want);
        assert_eq!(self.snapshot(), before);
    }
}

/// What a refusal's reason must be, as the audit log words it (the
/// `Display` of `amos_sync::Refusal`).
type Want = fn(&str) -> bool;

/// Forged facts, each with the refusal it must meet.
type Attack = Vec<(Verified<SignedFact>, Want)>;

/// The shape of `apply_batch` on a [`MemStore`].
type ApplyFn = fn(
    &mut MemStore,
    &Sender,
    Vec<Verified<SignedFact>>,
    u64,
    u64,
) -> Result<ApplyReport, std::convert::Infallible>;

fn not_origin(r: &str) -> bool {
    r == Refusal::NotOrigin.code()
}

fn fixed_mismatch(r: &str) -> bool {
    r == "fixed_field_mismatch"
}

fn outside_policy(r: &str) -> bool {
    r == "outside_policy"
}

fn link_not_origin(r: &str) -> bool {
    r == "link_not_origin"
}

fn org_not_origin(r: &str) -> bool {
    r == "org_not_origin"
}

/// Run an attack made of forged facts: all refused, nothing changes.
fn expect_all_refused<R: TestReplica>(net: &mut Net<R>, attack: Attack) {
    let before = net.snapshot();
    let clock_before = net.ours.clock();
    let facts: Vec<_> = attack.iter().map(|(f, _)| f.clone()).collect();
    let r = net.mallory_sends(facts);
    assert_eq!(r.applied, 0, "{r:?}");
    // A refused or deferred fact does not even move our clock.
    assert_eq!(net.ours.clock(), clock_before, "an attack moved our clock");
    for (f, want) in &attack {
        if f.fact.clock.wall_ms > net.now + MAX_SKEW_MS {
            net.assert_never_applied(f, *want);
        } else {
            net.assert_refused(f, *want);
        }
    }
    assert_eq!(net.snapshot(), before, "an attack changed our state");
}

// ---------------------------------------------------------------------------
// (a)–(d): memory facts about a memory whose origin is another node.

/// (a) An acl fact making origin's memory (or ours) `global`.
fn a_scoped_peer_cannot_widen_anothers_memory<R: TestReplica>() {
    for trust in ALL_TRUST {
        let mut net = Net::<R>::new(trust);
        let (id, fixed) = net.theirs.clone();
        let (mine, mine_fixed) = net.fixed_of(net.mine.apollo);
        let mut attack = Vec::new();
        for f in net.forge_now_and_far(acl_body(id, &fixed, grants(&["global"]))) {
            attack.push((f, not_origin as Want));
        }
        for f in net.forge_now_and_far(acl_body(
            mine,
            &mine_fixed,
            grants(&["global", "team:apollo"]),
        )) {
            attack.push((f, not_origin));
        }
        // Claiming to be the origin itself: the fixed fields give it away.
        let claimed = MemoryFixed {
            origin: net.mallory(),
            ..fixed.clone()
        };
        for f in net.forge_now_and_far(acl_body(id, &claimed, grants(&["global"]))) {
            attack.push((f, fixed_mismatch));
        }
        expect_all_refused(&mut net, attack);
        assert!(
            !net.ours.visible_to(&agent("carol")).contains(&id),
            "{trust:?}"
        );
    }
}

/// (b) A content fact rewriting origin's memory (or ours).
fn a_scoped_peer_cannot_edit_anothers_memory<R: TestReplica>() {
    for trust in ALL_TRUST {
        let mut net = Net::<R>::new(trust);
        let (id, fixed) = net.theirs.clone();
        let (mine, mine_fixed) = net.fixed_of(net.mine.apollo);
        let mut attack = Vec::new();
        for f in net.forge_now_and_far(content_body(id, &fixed, "mallory was here")) {
            attack.push((f, not_origin as Want));
        }
        for f in net.forge_now_and_far(content_body(mine, &mine_fixed, "mallory was here")) {
            attack.push((f, not_origin));
        }
        let claimed = MemoryFixed {
            origin: net.mallory(),
            ..fixed.clone()
        };
        for f in net.forge_now_and_far(content_body(id, &claimed, "mallory was here")) {
            attack.push((f, fixed_mismatch));
        }
        expect_all_refused(&mut net, attack);
        assert_eq!(
            net.ours.text(&id).as_deref(),
            Some("origin's apollo note"),
            "{trust:?}"
        );
    }
}

/// (c) Re-owning: the same memory with a different owner in its fixed fields.
fn a_scoped_peer_cannot_reown_a_memory<R: TestReplica>() {
    for trust in ALL_TRUST {
        let mut net = Net::<R>::new(trust);
        let (id, fixed) = net.theirs.clone();
        let (mine, mine_fixed) = net.fixed_of(net.mine.apollo);
        let mut attack = Vec::new();
        for owner in ["carol", "eve"] {
            // Keeping the true origin: not the origin speaking.
            let reowned = MemoryFixed {
                owner: agent(owner),
                ..fixed.clone()
            };
            for f in net.forge_now_and_far(content_body(id, &reowned, "mine now")) {
                attack.push((f, not_origin as Want));
            }
            // Claiming to be the origin too: a fixed-field mismatch.
            let claimed = MemoryFixed {
                owner: agent(owner),
                origin: net.mallory(),
                ..fixed.clone()
            };
            for f in net.forge_now_and_far(content_body(id, &claimed, "mine now")) {
                attack.push((f, fixed_mismatch));
            }
            for f in net.forge_now_and_far(acl_body(id, &claimed, grants(&["team:apollo"]))) {
                attack.push((f, fixed_mismatch));
            }
            let ours_claimed = MemoryFixed {
                owner: agent(owner),
                origin: net.mallory(),
                ..mine_fixed.clone()
            };
            for f in net.forge_now_and_far(content_body(mine, &ours_claimed, "mine now")) {
                attack.push((f, fixed_mismatch));
            }
        }
        expect_all_refused(&mut net, attack);
        assert_eq!(net.ours.memory(&id).unwrap().fixed, fixed, "{trust:?}");
        assert_eq!(
            net.ours.memory(&mine).unwrap().fixed,
            mine_fixed,
            "{trust:?}"
        );
    }
}

/// (d) A tombstone for origin's memory (or ours).
fn a_scoped_peer_cannot_forget_anothers_memory<R: TestReplica>() {
    for trust in ALL_TRUST {
        let mut net = Net::<R>::new(trust);
        let (id, fixed) = net.theirs.clone();
        let (mine, mine_fixed) = net.fixed_of(net.mine.apollo);
        let mut attack = Vec::new();
        for f in net.forge_now_and_far(tombstone_body(id, &fixed)) {
            attack.push((f, not_origin as Want));
        }
        for f in net.forge_now_and_far(tombstone_body(mine, &mine_fixed)) {
            attack.push((f, not_origin));
        }
        let claimed = MemoryFixed {
            origin: net.mallory(),
            ..fixed.clone()
        };
        for f in net.forge_now_and_far(tombstone_body(id, &claimed)) {
            attack.push((f, fixed_mismatch));
        }
        expect_all_refused(&mut net, attack);
        assert!(!net.ours.memory(&id).unwrap().tombstoned, "{trust:?}");
        assert!(net.ours.visible_to(&agent("alice")).contains(&id));
        assert!(net.ours.visible_to(&agent("alice")).contains(&mine));
    }
}

// ---------------------------------------------------------------------------
// (e)–(g): org records.

/// (e) Memberships outside `team:apollo`: joining zeus, evicting carol from
/// it, joining project ui (named by no policy scope).
fn a_membership_outside_the_scope_is_refused<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let mut attack = Vec::new();
    for body in [
        membership(OrgScope::Team(team("zeus")), "eve", true),
        membership(OrgScope::Team(team("zeus")), "alice", true),
        membership(OrgScope::Team(team("zeus")), "carol", false),
        membership(OrgScope::Project(project("ui")), "bob", true),
    ] {
        for f in net.forge_now_and_far(body) {
            attack.push((f, outside_policy as Want));
        }
    }
    expect_all_refused(&mut net, attack);
    assert!(
        net.ours
            .visible_to(&agent("carol"))
            .contains(&net.mine.zeus)
    );
    assert!(!net.ours.visible_to(&agent("eve")).contains(&net.mine.zeus));
}

/// (f) Creating (or deleting) teams and projects outside the scope.
fn a_team_or_project_outside_the_scope_is_refused<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let mut attack = Vec::new();
    let (us, them) = (net.ours_id.node_id(), net.mallory());
    let bodies = [
        FactBody::Team(TeamFact {
            id: team("hermes"),
            origin: them,
            name: "hermes".into(),
            present: true,
        }),
        FactBody::Team(TeamFact {
            id: team("zeus"),
            origin: us,
            name: "zeus".into(),
            present: false,
        }),
        FactBody::Project(ProjectFact {
            id: project("zeus-ops"),
            team: team("zeus"),
            origin: them,
            name: "x".into(),
            present: true,
        }),
        // Even inside apollo: the policy names the team, not its projects.
        FactBody::Project(ProjectFact {
            id: project("apollo-x"),
            team: team("apollo"),
            origin: them,
            name: "x".into(),
            present: true,
        }),
    ];
    for body in bodies {
        for f in net.forge_now_and_far(body) {
            attack.push((f, outside_policy as Want));
        }
    }
    expect_all_refused(&mut net, attack);
    assert!(net.ours.fact(&Register::Team(team("hermes"))).is_none());
    assert!(
        net.ours
            .fact(&Register::Project(project("zeus-ops")))
            .is_none()
    );
}

/// (g) Moving project ui (ours, in apollo) to zeus: a fixed-field mismatch,
/// from mallory and from a peer whose policy names `project:ui` itself.
fn a_project_cannot_move_to_another_team<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let moved = FactBody::Project(ProjectFact {
        id: project("ui"),
        team: team("zeus"),
        origin: net.ours_id.node_id(),
        name: "now zeus's".into(),
        present: true,
    });
    let mut attack = Vec::new();
    for f in net.forge_now_and_far(moved.clone()) {
        attack.push((f, fixed_mismatch as Want));
    }
    expect_all_refused(&mut net, attack);

    // A peer scoped to the project itself may speak for it, but not move it.
    let uiguy = NodeIdentity::from_secret([90; 32]);
    net.ours
        .set_peer_policy(&uiguy.node_id(), &policy("project:ui"));
    let before = net.snapshot();
    net.tick();
    let f = uiguy
        .sign(Fact {
            clock: Hlc {
                wall_ms: net.now,
                logical: 0,
                node: uiguy.node_id(),
            },
            body: moved,
        })
        .unwrap();
    let sender = net.sender(uiguy.node_id());
    let r = net
        .ours
        .apply(&sender, vec![f.clone()], net.now, MAX_SKEW_MS);
    assert_eq!((r.applied, r.refused), (0, 1), "{r:?}");
    let (_, from, why) = net.ours.refused().last().cloned().unwrap();
    assert_eq!(
        (from, fixed_mismatch(&why)),
        (uiguy.node_id(), true),
        "{why}"
    );
    assert_eq!(net.snapshot(), before);
    assert!(
        net.ours
            .visible_to(&agent("alice"))
            .contains(&net.mine.project_ui)
    );
}

// ---------------------------------------------------------------------------
// (h): signatures.

/// (h) A fact signed by another node and then altered — signature bytes,
/// body, or claimed author — never verifies, so it never becomes `Verified`
/// and can never reach `apply_batch`, which accepts nothing else.
fn an_altered_signed_fact_never_verifies<R: TestReplica>() {
    // apply_batch takes only `Verified` facts, and only amos-protocol can
    // build one (by signing, or by `verify`): checked by the compiler here.
    let _only_verified: ApplyFn = apply_batch::<MemStore>;

    let mut net = Net::<R>::new(OriginTrust::Scoped);
    let (id, fixed) = net.theirs.clone();
    let genuine = net
        .origin_write(acl_body(id, &fixed, grants(&["team:apollo"])))
        .into_inner();
    assert!(genuine.clone().verify().is_ok());

    // A flipped signature byte.
    for i in [0, 31, 32, 63] {
        let mut bad = genuine.clone();
        bad.signature[i] ^= 0x01;
        assert_eq!(bad.verify(), Err(ProtocolError::BadSignature));
    }
    // A widened body under the original signature.
    let mut bad = genuine.clone();
    bad.fact.body = acl_body(id, &fixed, grants(&["global", "team:apollo"]));
    assert_eq!(bad.verify(), Err(ProtocolError::BadSignature));
    // A later clock under the original signature (to win LWW).
    let mut bad = genuine.clone();
    bad.fact.clock.wall_ms += 1;
    assert_eq!(bad.verify(), Err(ProtocolError::BadSignature));
    // Mallory's own signature over origin's fact: it cannot sign a fact
    // stamped with another node's clock, and splicing its signature over
    // the same body onto origin's clock fails.
    assert!(net.mallory_id.sign(genuine.fact.clone()).is_err());
    let mut own = genuine.fact.clone();
    own.clock.node = net.mallory();
    let mallorys = net.mallory_id.sign(own).unwrap().into_inner();
    let spliced = SignedFact {
        fact: genuine.fact.clone(),
        signature: mallorys.signature,
    };
    assert_eq!(spliced.verify(), Err(ProtocolError::BadSignature));
    // Origin's signature relabelled as mallory's fact.
    let relabelled = SignedFact {
        fact: Fact {
            clock: Hlc {
                node: net.mallory(),
                ..genuine.fact.clock
            },
            body: genuine.fact.body.clone(),
        },
        signature: genuine.signature,
    };
    assert_eq!(relabelled.verify(), Err(ProtocolError::BadSignature));

    // On the wire: no single flipped bit anywhere in the encoding yields a
    // *different* fact that verifies.
    let bytes = genuine.to_bytes();
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            if let Ok(v) = SignedFact::decode_verified(&b) {
                assert_eq!(
                    v.into_inner(),
                    genuine,
                    "flipping byte {i} gave another valid fact"
                );
            }
        }
    }
    // Nothing of the above reached our node.
    assert!(net.ours.refused().is_empty());
}

// ---------------------------------------------------------------------------
// (i)–(j): replays.

/// Origin's facts about `id` of one register kind, oldest first.
fn history(log: &[Verified<SignedFact>], id: MemoryId, acl: bool) -> Vec<Verified<SignedFact>> {
    log.iter()
        .filter(|f| match &f.fact.body {
            FactBody::MemoryAcl(a) => acl && a.id == id,
            FactBody::MemoryContent(c) => !acl && c.id == id,
            _ => false,
        })
        .cloned()
        .collect()
}

/// (i) Replaying origin's older content and acl facts over newer ones we
/// hold: stale, and nothing changes; a replayed share after a revocation
/// does not undo the revocation.
fn a_replayed_old_fact_is_stale<R: TestReplica>() {
    for trust in ALL_TRUST {
        let mut net = Net::<R>::new(trust);
        let (id, fixed) = net.theirs.clone();
        // Origin edits, then shares with zeus as well; mallory relays both.
        let c2 = net.origin_write(content_body(id, &fixed, "origin's apollo note, v2"));
        let a2 = net.origin_write(acl_body(id, &fixed, grants(&["team:apollo", "team:zeus"])));
        let r = net.mallory_sends(vec![c2, a2]);
        assert_eq!(r.applied, 2, "{r:?}");
        let before = net.snapshot();
        // Carol sees it only if origin is our own operator's node: zeus is
        // in neither mallory's policy nor origin's scoped one.
        assert_eq!(
            before.visible["carol"].contains(&id),
            trust == OriginTrust::Full,
            "{trust:?}"
        );

        let mut replay = history(&net.origin_log, id, false)[..1].to_vec();
        replay.extend(history(&net.origin_log, id, true)[..1].to_vec());
        replay.extend(replay.clone());
        let r = net.mallory_sends(replay);
        assert_eq!(
            (r.applied, r.stale, r.refused),
            (0, 4, 0),
            "{trust:?}: {r:?}"
        );
        assert_eq!(net.snapshot(), before, "{trust:?}");
        assert_eq!(
            net.ours.text(&id).as_deref(),
            Some("origin's apollo note, v2")
        );

        // A revocation from apollo; then every older share replayed: stale.
        let a3 = net.origin_write(acl_body(id, &fixed, grants(&["team:zeus"])));
        let r = net.mallory_sends(vec![a3]);
        assert_eq!(r.applied, 1);
        for a in ["alice", "bob"] {
            assert!(
                !net.ours.visible_to(&agent(a)).contains(&id),
                "{trust:?} {a}"
            );
        }
        let before = net.snapshot();
        let acls = history(&net.origin_log, id, true);
        let r = net.mallory_sends(acls[..acls.len() - 1].to_vec());
        assert_eq!(
            (r.applied, r.stale, r.refused),
            (0, 2, 0),
            "{trust:?}: {r:?}"
        );
        assert_eq!(net.snapshot(), before, "{trust:?}");

        // Replaying the old contents after the revocation widens nothing.
        let r = net.mallory_sends(history(&net.origin_log, id, false));
        assert_eq!(r.refused, 0);
        if trust == OriginTrust::Full {
            assert_eq!((r.applied, r.stale), (0, 2), "{r:?}");
            assert_eq!(net.snapshot(), before);
        } else {
            // The revocation purged the content (no local agent may see it
            // and origin does not speak for us), and with it the content
            // clock: the replayed content is stored again. It stays
            // invisible — the acl in force is still the revocation.
            for a in WATCHED {
                assert_eq!(
                    net.ours.visible_to(&agent(a)),
                    before.visible[a],
                    "{trust:?}: {a}"
                );
            }
            assert!(net.ours.memory(&id).unwrap().effective.is_empty());
        }
    }
}

/// (j) After a tombstone, content and acl facts with later clocks — origin's
/// own (a concurrent edit, relayed late), replays of its old ones, mallory's,
/// or our own old facts of a memory we forgot — bring nothing back.
fn a_tombstoned_memory_cannot_be_resurrected<R: TestReplica>() {
    for trust in ALL_TRUST {
        let mut net = Net::<R>::new(trust);
        let (id, fixed) = net.theirs.clone();
        let old = net.origin_log.clone();
        let t = net.origin_write(tombstone_body(id, &fixed));
        let t_clock = t.fact.clock;
        let r = net.mallory_sends(vec![t]);
        assert_eq!(r.applied, 1, "{r:?}");
        assert!(net.ours.memory(&id).unwrap().tombstoned);
        assert_eq!(net.ours.text(&id), None);
        let before = net.snapshot();

        // Later clocks than the tombstone, genuinely signed by origin.
        let late = vec![
            net.origin_write(content_body(id, &fixed, "back from the dead")),
            net.origin_write(acl_body(id, &fixed, grants(&["team:apollo", "global"]))),
        ];
        assert!(late.iter().all(|f| f.fact.clock > t_clock));
        let mut replay = late.clone();
        replay.extend(old);
        let n = replay.len() as u64;
        let r = net.mallory_sends(replay);
        assert_eq!(
            (r.applied, r.stale, r.refused),
            (0, n, 0),
            "{trust:?}: {r:?}"
        );

        // Our own memory, forgotten: our old facts of it, relayed back.
        let forgotten = net.mine.forgotten;
        let ours_old: Vec<_> = net
            .ours_log
            .iter()
            .filter(|f| {
                f.fact.body.memory().is_some_and(|(m, _)| m == forgotten)
                    && !matches!(f.fact.body, FactBody::MemoryTombstone(_))
            })
            .cloned()
            .collect();
        assert_eq!(ours_old.len(), 2);
        let r = net.mallory_sends(ours_old);
        assert_eq!(
            (r.applied, r.stale, r.refused),
            (0, 2, 0),
            "{trust:?}: {r:?}"
        );
        assert_eq!(net.snapshot(), before, "{trust:?}");

        // Mallory's own resurrection attempts: not the origin.
        let mut attack = Vec::new();
        for f in net.forge_now_and_far(content_body(id, &fixed, "back from the dead")) {
            attack.push((f, not_origin as Want));
        }
        for f in net.forge_now_and_far(acl_body(id, &fixed, grants(&["global"]))) {
            attack.push((f, not_origin));
        }
        expect_all_refused(&mut net, attack);
        assert_eq!(net.ours.text(&id), None);
        assert_eq!(net.ours.text(&forgotten), None);
        for a in WATCHED {
            let v = net.ours.visible_to(&agent(a));
            assert!(
                !v.contains(&id) && !v.contains(&forgotten),
                "{trust:?}: {a}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// (k): mallory's own memories.

/// (k) Mallory injects memories of its own (it *is* their origin): their
/// grants are stored verbatim, but in force here only `grants ∩ team:apollo`;
/// naming one of our agents as grantee or as owner shows it to no one.
fn an_injected_memory_is_confined_to_the_policy<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let before = net.snapshot();
    let cases: [(&str, &[&str], u8); 6] = [
        ("eve", &["global"], 1),
        ("eve", &["global", "team:apollo"], 2),
        ("eve", &["agent:carol", "agent:alice"], 3),
        ("carol", &["team:apollo"], 4),
        ("carol", &[], 5),
        ("alice", &["agent:alice", "team:zeus", "project:ui"], 6),
    ];
    let mut facts = Vec::new();
    let mut ids = Vec::new();
    for (owner, g, n) in cases {
        net.tick();
        let id = MemoryId::new(net.now, [0x40 + n; 10]);
        let fixed = MemoryFixed {
            owner: agent(owner),
            created_ms: net.now,
            origin: net.mallory(),
        };
        facts.push(net.forge(net.now, content_body(id, &fixed, "from mallory")));
        if !g.is_empty() {
            facts.push(net.forge(net.now + 1, acl_body(id, &fixed, grants(g))));
        }
        ids.push((id, grants(g)));
    }
    let r = net.mallory_sends(facts.clone());
    assert_eq!(
        (r.applied, r.refused, r.deferred),
        (facts.len() as u64, 0, 0),
        "{r:?}"
    );

    let apollo = grants(&["team:apollo"]);
    for (id, g) in &ids {
        let m = net.ours.memory(id).unwrap();
        assert_eq!(
            m.effective,
            g.intersection(&apollo),
            "effective grants of {id}"
        );
        assert!(!m.owner_trusted);
        // The signed grants are stored verbatim (so digests still agree);
        // only the effective ones are narrowed.
        let stored = net.ours.fact(&Register::MemoryAcl(*id));
        if g.is_empty() {
            assert!(stored.is_none());
        } else {
            let sent = facts
                .iter()
                .find(|f| f.fact.body.register() == Register::MemoryAcl(*id));
            assert_eq!(stored.as_ref(), sent);
        }
    }
    let k = |n: usize| ids[n].0;
    let mut gained = |a: &str| -> BTreeSet<MemoryId> {
        net.ours
            .visible_to(&agent(a))
            .difference(&before.visible[a])
            .copied()
            .collect()
    };
    // Only the apollo grant takes effect, for apollo's members.
    assert_eq!(gained("alice"), BTreeSet::from([k(1), k(3)]));
    assert_eq!(gained("bob"), BTreeSet::from([k(1), k(3)]));
    // Not via global, agent:carol, nor by owning it.
    assert_eq!(gained("carol"), BTreeSet::new());
    assert_eq!(gained("eve"), BTreeSet::new());
    assert_eq!(gained("olga"), BTreeSet::new());
    // Nobody lost anything.
    for a in WATCHED {
        assert!(
            before.visible[a].is_subset(&net.ours.visible_to(&agent(a))),
            "{a}"
        );
    }
}

// ---------------------------------------------------------------------------
// (l): export.

/// (l) What leaves for mallory: only what `team:apollo` admits. Private,
/// `agent:`, zeus, project ui and global-only memories stay home; the memory
/// moved away from apollo goes out as a retraction (acl, no content), the
/// forgotten one as a tombstone; links only between memories that go whole;
/// org records only of apollo; no agents or profiles.
fn export_to_a_scoped_peer_leaks_nothing<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let policy = net.mallory_policy.clone();
    let out = net.ours.export(&policy);
    let regs: BTreeSet<Register> = out.iter().map(|f| f.fact.body.register()).collect();
    let m = &net.mine;
    for id in [m.private, m.agent_bob, m.zeus, m.global, m.project_ui] {
        assert!(
            !regs.contains(&Register::MemoryContent(id)),
            "content of {id} leaked"
        );
        assert!(
            !regs.contains(&Register::MemoryAcl(id)),
            "acl of {id} leaked"
        );
    }
    for id in [m.apollo, m.apollo_global, net.theirs.0] {
        assert!(
            regs.contains(&Register::MemoryContent(id)) && regs.contains(&Register::MemoryAcl(id))
        );
    }
    // Retractions.
    assert!(regs.contains(&Register::MemoryAcl(m.unshared)));
    assert!(!regs.contains(&Register::MemoryContent(m.unshared)));
    assert!(regs.contains(&Register::MemoryTombstone(m.forgotten)));
    assert!(!regs.contains(&Register::MemoryContent(m.forgotten)));
    // Links only where both ends go whole.
    let rel = Relation::default();
    assert!(regs.contains(&Register::Link(m.apollo, m.apollo_global, rel.clone())));
    for other in [m.private, m.zeus, m.unshared] {
        assert!(
            !regs.contains(&Register::Link(m.apollo, other, rel.clone())),
            "link to {other} leaked"
        );
    }
    // Org records of apollo only; no registry.
    let apollo = OrgScope::Team(team("apollo"));
    assert!(regs.contains(&Register::Team(team("apollo"))));
    assert!(regs.contains(&Register::Membership(apollo.clone(), agent("alice"))));
    assert!(regs.contains(&Register::Membership(apollo, agent("bob"))));
    for r in &regs {
        match r {
            Register::Team(t) => assert_eq!(t, &team("apollo")),
            Register::Membership(s, _) => assert_eq!(s, &OrgScope::Team(team("apollo"))),
            Register::Project(_) | Register::Agent(_) | Register::Profile(_) => {
                panic!("{r:?} leaked to a scoped peer")
            }
            _ => {}
        }
    }
    // And no text of a memory mallory may not see, anywhere in the export.
    let texts: Vec<&str> = out
        .iter()
        .filter_map(|f| match &f.fact.body {
            FactBody::MemoryContent(c) => c.text.plain(),
            _ => None,
        })
        .collect();
    for secret in [
        "diary",
        "bob's eyes",
        "zeus plans",
        "hello world",
        "ui mockups",
        "was apollo's",
        "short-lived",
    ] {
        assert!(!texts.iter().any(|t| t.contains(secret)), "{secret} leaked");
    }
    assert_eq!(texts.len(), 3, "{texts:?}");
}

// ---------------------------------------------------------------------------
// Registry and links.

/// Agent records and profiles come only from full peers.
fn an_agent_record_or_profile_from_a_scoped_peer_is_refused<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let mut attack = Vec::new();
    let bodies = [
        FactBody::Agent(AgentFact {
            id: agent("alice"),
            kind: "impostor".into(),
            display_name: "alice (pwned)".into(),
            present: false,
        }),
        FactBody::Agent(AgentFact {
            id: agent("eve"),
            kind: "claude-code".into(),
            display_name: "eve".into(),
            present: true,
        }),
        FactBody::Profile(ProfileFact {
            agent: agent("bob"),
            weights: vec![(MemoryType::default(), 10.0)],
        }),
    ];
    for body in bodies {
        for f in net.forge_now_and_far(body) {
            attack.push((f, outside_policy as Want));
        }
    }
    expect_all_refused(&mut net, attack);
}

/// A link from a scoped peer stands only between memories that peer may
/// share; one to a memory we do not hold waits (and is never applied).
fn a_link_between_memories_the_peer_may_not_share_is_refused<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let theirs = net.theirs.0;
    let m = &net.mine;
    let link = |from, to| {
        FactBody::Link(LinkFact {
            from,
            to,
            relation: Relation::parse("supports").unwrap(),
            weight: 1.0,
            present: true,
        })
    };
    let pairs = [
        (theirs, m.private),
        (m.agent_bob, theirs),
        (m.apollo, m.zeus),
        (m.apollo, m.global),
        (m.apollo, m.unshared),
        (m.apollo, m.forgotten),
        (m.project_ui, m.apollo_global),
    ];
    let mut attack = Vec::new();
    for (a, b) in pairs {
        // Mallory originated none of these memories: the link origin rule
        // refuses its links first.
        for f in net.forge_now_and_far(link(a, b)) {
            attack.push((f, link_not_origin as Want));
        }
        // Signed by the origin of `theirs` and relayed by mallory, a link
        // from it still needs both ends inside mallory's policy.
        if a == theirs {
            let f = net.origin_write(link(a, b));
            attack.push((f, outside_policy as Want));
        }
    }
    // Even between memories it may share: not from a memory it originated.
    for f in net.forge_now_and_far(link(net.mine.apollo, theirs)) {
        attack.push((f, link_not_origin as Want));
    }
    expect_all_refused(&mut net, attack);

    // An endpoint we do not hold: deferred, not applied.
    let unknown = MemoryId([0x99; 16]);
    let f = net.forge(net.now, link(theirs, unknown));
    let before = net.snapshot();
    let r = net.mallory_sends(vec![f.clone()]);
    assert_eq!((r.applied, r.deferred), (0, 1), "{r:?}");
    assert!(
        matches!(net.ours.deferred().last(), Some((g, _, None)) if *g == *f),
        "deferred for a missing endpoint"
    );
    assert_eq!(net.snapshot(), before);

    // Control: signed by the origin of `theirs`, from it to a memory
    // mallory may share, relayed by mallory: admitted.
    let ok = net.origin_write(link(theirs, net.mine.apollo));
    let r = net.mallory_sends(vec![ok.clone()]);
    assert_eq!(r.applied, 1, "{r:?}");
    assert_eq!(net.ours.fact(&ok.fact.body.register()), Some(ok));
}

/// A peer scoped to a project we do not hold yet names one of *our* teams as
/// the project's team. The project may be created (the policy names it), but
/// that gives the peer no say over the team: memberships of `apollo` and the
/// team record itself are ours to author (the org origin rule).
fn a_project_scoped_peer_cannot_take_over_a_team<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let mallory = net.mallory();
    net.ours.set_peer_policy(&mallory, &policy("project:newui"));
    net.tick();
    let project_fact = net.forge(
        net.now,
        FactBody::Project(ProjectFact {
            id: project("newui"),
            team: team("apollo"),
            origin: mallory,
            name: "New UI".into(),
            present: true,
        }),
    );
    let r = net.mallory_sends(vec![project_fact]);
    assert_eq!(
        r.applied, 1,
        "the project the policy names is admitted: {r:?}"
    );
    let before = net.snapshot();
    // A `project:` policy reaches the project's team record and roster
    // (what its members need), but only as written by the team's origin:
    // us. Mallory's own are refused by the org origin rule.
    let us = net.ours_id.node_id();
    let attack: Attack = vec![
        (
            net.forge(
                net.now + 1,
                membership(OrgScope::Team(team("apollo")), "mallory", true),
            ),
            org_not_origin,
        ),
        (
            net.forge(
                net.now + 2,
                membership(OrgScope::Team(team("apollo")), "alice", false),
            ),
            org_not_origin,
        ),
        (
            net.forge(
                net.now + 3,
                FactBody::Team(TeamFact {
                    id: team("apollo"),
                    origin: us,
                    name: "apollo".into(),
                    present: false,
                }),
            ),
            org_not_origin,
        ),
        (
            net.forge(
                net.now + 4,
                FactBody::Team(TeamFact {
                    id: team("apollo"),
                    origin: mallory,
                    name: "apollo".into(),
                    present: false,
                }),
            ),
            |r: &str| r == "org_origin_conflict",
        ),
    ];
    expect_all_refused(&mut net, attack);
    assert_eq!(net.snapshot(), before);
}

/// A revocation purges a scoped peer's memory content here; an older content
/// fact replayed afterwards stays stale (the purged register keeps its
/// clock), while the same content re-sent when the memory is shared again is
/// taken back.
fn purged_content_is_not_resurrected_by_replay_but_returns_on_reshare<R: TestReplica>() {
    let mut net = Net::<R>::new(OriginTrust::Stranger);
    let (id, fixed) = net.theirs.clone();
    let first_content = history(&net.origin_log, id, false);
    assert!(!first_content.is_empty());
    // origin edits, then revokes apollo; mallory relays both.
    net.origin_write(content_body(id, &fixed, "origin's apollo note, edited"));
    net.origin_write(acl_body(id, &fixed, grants(&["team:zeus"])));
    let relay = net.origin.export(&net.mallory_policy);
    net.mallory_sends(relay);
    assert_eq!(net.ours.text(&id), None, "content purged after revocation");
    assert!(!net.ours.visible_to(&agent("bob")).contains(&id));
    // Replay of the first (older) content: stale, still purged.
    let r = net.mallory_sends(first_content);
    assert_eq!(r.applied, 0, "{r:?}");
    assert_eq!(net.ours.text(&id), None);
    // origin shares with apollo again: the edited content comes back whole.
    net.origin_write(acl_body(id, &fixed, grants(&["team:apollo"])));
    let relay = net.origin.export(&net.mallory_policy);
    net.mallory_sends(relay);
    assert_eq!(
        net.ours.text(&id).as_deref(),
        Some("origin's apollo note, edited")
    );
    assert!(net.ours.visible_to(&agent("bob")).contains(&id));
}

// ---------------------------------------------------------------------------
// Every case on the in-memory twin and on the real store.

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod mem {
            use super::*;
            $(#[test]
            fn $name() {
                super::$name::<Mem>()
            })*
        }
        mod sql {
            use super::*;
            $(#[test]
            fn $name() {
                super::$name::<Sql>()
            })*
        }
    };
}

on_both_stores!(
    a_scoped_peer_cannot_widen_anothers_memory,
    a_scoped_peer_cannot_edit_anothers_memory,
    a_scoped_peer_cannot_reown_a_memory,
    a_scoped_peer_cannot_forget_anothers_memory,
    a_membership_outside_the_scope_is_refused,
    a_team_or_project_outside_the_scope_is_refused,
    a_project_cannot_move_to_another_team,
    an_altered_signed_fact_never_verifies,
    a_replayed_old_fact_is_stale,
    a_tombstoned_memory_cannot_be_resurrected,
    an_injected_memory_is_confined_to_the_policy,
    export_to_a_scoped_peer_leaks_nothing,
    an_agent_record_or_profile_from_a_scoped_peer_is_refused,
    a_link_between_memories_the_peer_may_not_share_is_refused,
    a_project_scoped_peer_cannot_take_over_a_team,
    purged_content_is_not_resurrected_by_replay_but_returns_on_reshare,
);
