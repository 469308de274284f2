//! Minimal, deterministic repros of what the property tests found on the
//! replica stores (`amos_tests::replica`), one test per finding, each on the
//! real store (`sql_…`) and on the in-memory twin (`mem_…`).
//!
//! A test marked `#[ignore = "bug: …"]` fails today: it states the behaviour
//! the replica contract requires, and is un-ignored with its fix.
//!
//! The cast: node `a` (the origin, where alice writes) and node `b`, peers
//! of each other with policy `team:apollo` on both sides unless a test says
//! otherwise; both know team apollo with alice and bob as members.

use amos_acl::PeerPolicy;
use amos_protocol::{
    AgentId, FactBody, Grants, MembershipFact, MemoryAcl, MemoryContent, MemoryFixed, MemoryId,
    MemoryText, MemoryType, NodeIdentity, OrgScope, Scope, SignedFact, TeamFact, TeamId, Verified,
};
use amos_sync::{ApplyReport, Sender};
use amos_tests::replica::{Mem, Sql, TestReplica};

const T0: u64 = 1_750_000_000_000;
const MAX_SKEW_MS: u64 = 600_000;

fn agent(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

fn grants(s: &[&str]) -> Grants {
    s.iter().map(|x| x.parse::<Scope>().unwrap()).collect()
}

fn policy(s: &str) -> PeerPolicy {
    s.parse().unwrap()
}

struct Pair<R: TestReplica> {
    ids: [NodeIdentity; 2],
    nodes: [R; 2],
    now: u64,
}

impl<R: TestReplica> Pair<R> {
    /// `a` and `b`, peers with `p` on both sides, both with team apollo
    /// (alice, bob) written on `a` and received by `b`.
    fn new(p: &str) -> Pair<R> {
        let ids = [
            NodeIdentity::from_secret([1; 32]),
            NodeIdentity::from_secret([2; 32]),
        ];
        let nodes = [R::create(&ids[0]), R::create(&ids[1])];
        let mut pair = Pair {
            ids,
            nodes,
            now: T0,
        };
        pair.set_policy(&policy(p));
        let apollo = TeamId::parse("apollo").unwrap();
        pair.write(
            0,
            FactBody::Team(TeamFact {
                id: apollo.clone(),
                origin: pair.ids[0].node_id(),
                name: "apollo".into(),
                present: true,
            }),
        );
        for a in ["alice", "bob"] {
            pair.write(
                0,
                FactBody::Membership(MembershipFact {
                    scope: OrgScope::Team(apollo.clone()),
                    agent: agent(a),
                    role: "member".into(),
                    present: true,
                }),
            );
        }
        pair.send(0, 1);
        pair
    }

    /// Both sides give each other `p` (`amos peers policy <id> <p>` on each).
    fn set_policy(&mut self, p: &PeerPolicy) {
        let (na, nb) = (self.ids[0].node_id(), self.ids[1].node_id());
        self.nodes[0].set_peer_policy(&nb, p);
        self.nodes[1].set_peer_policy(&na, p);
    }

    fn write(&mut self, at: usize, body: FactBody) -> Verified<SignedFact> {
        self.now += 1_000;
        self.nodes[at].write(&self.ids[at], body, self.now)
    }

    /// `from` exports for `to` (with the policy it gave `to`); `to` applies.
    fn send(&mut self, from: usize, to: usize) -> ApplyReport {
        self.now += 1_000;
        let (nf, nt) = (self.ids[from].node_id(), self.ids[to].node_id());
        let out = self.nodes[from].peer_policy(&nt).unwrap();
        let facts = self.nodes[from].export(&out);
        let sender = Sender {
            node: nf,
            policy: self.nodes[to].peer_policy(&nf).unwrap(),
        };
        self.nodes[to].apply(&sender, facts, self.now, MAX_SKEW_MS)
    }

    /// alice's memory on `a`, shared with `g`.
    fn memory(&mut self, g: &[&str], text: &str) -> (MemoryId, MemoryFixed) {
        self.now += 1_000;
        let id = MemoryId::new(self.now, [7; 10]);
        let fixed = MemoryFixed {
            owner: agent("alice"),
            created_ms: self.now,
            origin: self.ids[0].node_id(),
        };
        self.write(
            0,
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
            }),
        );
        self.share(&(id, fixed.clone()), g);
        (id, fixed)
    }

    fn share(&mut self, m: &(MemoryId, MemoryFixed), g: &[&str]) {
        self.write(
            0,
            FactBody::MemoryAcl(MemoryAcl {
                id: m.0,
                fixed: m.1.clone(),
                grants: grants(g),
            }),
        );
    }
}

/// The scenario: shared with `team:apollo`, received by b; alice
/// unshares it (b purges the content, as designed); both sides change the
/// policy to `full` and exchange twice. b must hold the content again, and
/// both digests agree.
fn purged_content_returns_when_the_policy_becomes_full<R: TestReplica>() {
    let mut p = Pair::<R>::new("team:apollo");
    let m = p.memory(&["team:apollo"], "apollo standup notes");
    p.send(0, 1);
    assert_eq!(
        p.nodes[1].text(&m.0).as_deref(),
        Some("apollo standup notes")
    );
    p.share(&m, &[]);
    p.send(0, 1);
    assert!(
        p.nodes[1].memory(&m.0).unwrap().purged(),
        "unshared: b purges"
    );

    p.set_policy(&PeerPolicy::Full);
    for _ in 0..2 {
        p.send(0, 1);
        p.send(1, 0);
    }
    let info = p.nodes[1].memory(&m.0).unwrap();
    assert!(info.owner_trusted, "a is a full peer of b now");
    assert_eq!(
        p.nodes[1].text(&m.0).as_deref(),
        Some("apollo standup notes"),
        "b keeps an empty row: {info:?}"
    );
    assert!(p.nodes[1].visible_to(&agent("alice")).contains(&m.0));
    assert_eq!(p.nodes[0].digest(), p.nodes[1].digest(), "digests differ");
}

#[test]
fn sql_purged_content_returns_when_the_policy_becomes_full() {
    purged_content_returns_when_the_policy_becomes_full::<Sql>();
}

#[test]
fn mem_purged_content_returns_when_the_policy_becomes_full() {
    purged_content_returns_when_the_policy_becomes_full::<Mem>();
}

/// An edited memory whose content b purged comes back whole when it is
/// needed again, whatever order its text facts arrive in — here its base
/// alone first, then the edit that is its content register (found by the
/// mixed-topology property: the real store exports an edited memory's text
/// log before its register). The base is older than the purged register's
/// clock, yet it must not be dropped as stale: the text is a function of
/// the facts held, never of their order.
fn purged_edited_text_returns_in_any_order<R: TestReplica>() {
    let mut p = Pair::<R>::new("team:apollo");
    let m = p.memory(&["team:apollo"], "apollo standup notes");
    p.now += 1_000;
    let now = p.now;
    let edit = p.nodes[0]
        .edit_text(&p.ids[0], &m.0, "apollo standup notes moved", now)
        .expect("alice edits on a");
    p.send(0, 1);
    assert_eq!(
        p.nodes[1].text(&m.0).as_deref(),
        Some("apollo standup notes moved")
    );
    p.share(&m, &[]);
    p.send(0, 1);
    assert!(p.nodes[1].memory(&m.0).unwrap().purged(), "b purges");

    p.set_policy(&PeerPolicy::Full);
    // a's content facts of the memory, oldest (the base) first, one a batch.
    let (na, nb) = (p.ids[0].node_id(), p.ids[1].node_id());
    let out = p.nodes[0].peer_policy(&nb).unwrap();
    let mut content: Vec<_> = p.nodes[0]
        .export(&out)
        .into_iter()
        .filter(|f| matches!(&f.fact.body, FactBody::MemoryContent(c) if c.id == m.0))
        .collect();
    content.sort_by_key(|f| f.fact.clock);
    assert_eq!(content.len(), 2, "the base and the edit");
    assert_eq!(content[1].fact.clock, edit.fact.clock);
    let sender = Sender {
        node: na,
        policy: PeerPolicy::Full,
    };
    for f in content {
        p.now += 1_000;
        p.nodes[1].apply(&sender, vec![f], p.now, MAX_SKEW_MS);
    }
    assert_eq!(
        p.nodes[1].text(&m.0).as_deref(),
        Some("apollo standup notes moved"),
        "the base that came first was dropped"
    );
}

#[test]
fn sql_purged_edited_text_returns_in_any_order() {
    purged_edited_text_returns_in_any_order::<Sql>();
}

#[test]
fn mem_purged_edited_text_returns_in_any_order() {
    purged_edited_text_returns_in_any_order::<Mem>();
}
