//! Same-name scopes made concurrently (issue 40 item 2, docs/design.md §3
//! and §6.2), as a property of the replica contract on both stores (the
//! in-memory twin and the real SQLite store, through `amos_tests::replica`;
//! the gate, merge and export are amos-sync's and amos-acl's).
//!
//! Several nodes each create a team `zeus` with a project `rocket` under it
//! — concurrently: creations, members, shares and syncs in a random order —
//! each node's agent a member of its own, and share memories to their own
//! `team:zeus` or `project:rocket`. Every pair of nodes are peers, `full` or
//! scoped to the scopes of that name, and sync in a random order, then until
//! nothing moves.
//!
//! * With qualified ids (this release) the mesh converges: the same
//!   registers and the same digest everywhere, nothing refused, every team
//!   and project held on every node.
//! * With legacy ids (made before ids were qualified: every node creates
//!   its own before they meet) each node keeps its own and refuses the
//!   others' records and members (no convergence, by design:
//!   docs/design.md §6.2).
//! * Either way, on every node, no agent ever sees a memory shared only with
//!   another node's scope of the same name.

use std::collections::{BTreeMap, BTreeSet};

use amos_acl::PeerPolicy;
use amos_protocol::{
    AgentId, FactBody, Grants, MembershipFact, MemoryAcl, MemoryContent, MemoryFixed, MemoryId,
    MemoryText, MemoryType, NodeIdentity, OrgScope, ProjectFact, ProjectId, Scope, TeamFact,
    TeamId,
};
use amos_sync::Sender;
use amos_tests::replica::{Mem, Sql, TestReplica};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};

const T0: u64 = 1_750_000_000_000;
const MAX_SKEW_MS: u64 = 10 * 60_000;

#[derive(Debug, Clone)]
enum Op {
    /// Node `n` creates its zeus, rocket under it, and makes its agent a
    /// member of both (once).
    Create(usize),
    /// Node `n`'s agent shares a memory with its own zeus (or rocket).
    Share { node: usize, project: bool },
    /// `from` sends `to` everything `to`'s policy at `from` lets out.
    Sync { from: usize, to: usize },
}

#[derive(Debug, Clone)]
struct Case {
    legacy: bool,
    /// Per unordered pair (i < j): scoped (true) or full.
    scoped: Vec<bool>,
    ops: Vec<Op>,
}

const N: usize = 4;

fn arb_case() -> impl Strategy<Value = Case> {
    let op = prop_oneof![
        (0..N).prop_map(Op::Create),
        (0..N, any::<bool>()).prop_map(|(node, project)| Op::Share { node, project }),
        (0..N, 0..N)
            .prop_filter("two nodes", |(a, b)| a != b)
            .prop_map(|(from, to)| Op::Sync { from, to }),
    ];
    (
        any::<bool>(),
        prop::collection::vec(any::<bool>(), N * (N - 1) / 2),
        prop::collection::vec(op, 10..50),
    )
        .prop_map(|(legacy, scoped, ops)| Case {
            legacy,
            scoped,
            ops,
        })
}

fn agent(i: usize) -> AgentId {
    AgentId::parse(&format!("agent{i}")).unwrap()
}

struct Mesh<R> {
    ids: Vec<NodeIdentity>,
    nodes: Vec<R>,
    legacy: bool,
    created: BTreeSet<usize>,
    /// Each memory with the node whose scope it was shared with.
    shared: BTreeMap<MemoryId, usize>,
    clock: u64,
}

impl<R: TestReplica> Mesh<R> {
    fn new(case: &Case) -> Mesh<R> {
        let ids: Vec<NodeIdentity> = (0..N)
            .map(|i| NodeIdentity::from_secret([i as u8 + 40; 32]))
            .collect();
        let mut nodes: Vec<R> = ids.iter().map(R::create).collect();
        let mut m = Mesh {
            ids,
            nodes: Vec::new(),
            legacy: case.legacy,
            created: BTreeSet::new(),
            shared: BTreeMap::new(),
            clock: T0,
        };
        let mut k = 0;
        for i in 0..N {
            for j in i + 1..N {
                let p = if case.scoped[k] {
                    m.scoped_policy()
                } else {
                    PeerPolicy::Full
                };
                k += 1;
                let (ni, nj) = (m.ids[i].node_id(), m.ids[j].node_id());
                nodes[i].set_peer_policy(&nj, &p);
                nodes[j].set_peer_policy(&ni, &p);
            }
        }
        m.nodes = nodes;
        m
    }

    fn team(&self, i: usize) -> TeamId {
        if self.legacy {
            TeamId::parse("zeus").unwrap()
        } else {
            TeamId::qualified("zeus", &self.ids[i].node_id()).unwrap()
        }
    }

    fn project(&self, i: usize) -> ProjectId {
        if self.legacy {
            ProjectId::parse("rocket").unwrap()
        } else {
            ProjectId::qualified("rocket", &self.ids[i].node_id()).unwrap()
        }
    }

    /// Every scope of the two names (the operator names them all).
    fn scoped_policy(&self) -> PeerPolicy {
        let scopes: Vec<Scope> = (0..N)
            .flat_map(|i| [Scope::Team(self.team(i)), Scope::Project(self.project(i))])
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        PeerPolicy::scoped(scopes).unwrap()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 7;
        self.clock
    }

    fn write(&mut self, i: usize, body: FactBody) {
        let now = self.tick();
        self.nodes[i].write(&self.ids[i], body, now);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Create(i) => {
                if !self.created.insert(i) {
                    return;
                }
                let origin = self.ids[i].node_id();
                let (t, p) = (self.team(i), self.project(i));
                self.write(
                    i,
                    FactBody::Team(TeamFact {
                        id: t.clone(),
                        origin,
                        name: "zeus".into(),
                        present: true,
                    }),
                );
                self.write(
                    i,
                    FactBody::Project(ProjectFact {
                        id: p.clone(),
                        team: t.clone(),
                        origin,
                        name: "rocket".into(),
                        present: true,
                    }),
                );
                for scope in [OrgScope::Team(t), OrgScope::Project(p)] {
                    self.write(
                        i,
                        FactBody::Membership(MembershipFact {
                            scope,
                            agent: agent(i),
                            role: "member".into(),
                            present: true,
                        }),
                    );
                }
            }
            Op::Share { node: i, project } => {
                if !self.created.contains(&i) {
                    return;
                }
                let now = self.tick();
                let id = MemoryId::new(now, [i as u8 + 1; 10]);
                let fixed = MemoryFixed {
                    owner: agent(i),
                    created_ms: now,
                    origin: self.ids[i].node_id(),
                };
                let scope = if project {
                    Scope::Project(self.project(i))
                } else {
                    Scope::Team(self.team(i))
                };
                self.write(
                    i,
                    FactBody::MemoryContent(MemoryContent {
                        id,
                        fixed: fixed.clone(),
                        kind: MemoryType::default(),
                        text: MemoryText::Plain(format!("note {now} of zeus {i}")),
                        tags: vec![],
                        importance: 0.5,
                        confidence: 1.0,
                        pinned: false,
                        expires_ms: None,
                        supersedes: None,
                        validity: Default::default(),
                    }),
                );
                self.write(
                    i,
                    FactBody::MemoryAcl(MemoryAcl {
                        id,
                        fixed,
                        grants: Grants::from_scopes([scope]),
                    }),
                );
                self.shared.insert(id, i);
            }
            Op::Sync { from, to } => {
                self.sync(from, to);
            }
        }
    }

    /// Returns how many facts `to` applied.
    fn sync(&mut self, from: usize, to: usize) -> u64 {
        let (nf, nt) = (self.ids[from].node_id(), self.ids[to].node_id());
        let out = self.nodes[from].peer_policy(&nt).expect("peers");
        let facts = self.nodes[from].export(&out);
        let policy = self.nodes[to].peer_policy(&nf).expect("peers");
        let now = self.tick();
        self.nodes[to]
            .apply(&Sender { node: nf, policy }, facts, now, MAX_SKEW_MS)
            .applied
    }

    /// Every pair both ways until a whole pass moves nothing (bounded).
    fn settle(&mut self) {
        for _ in 0..2 * N + 2 {
            let mut moved = 0;
            for from in 0..N {
                for to in 0..N {
                    if from != to {
                        moved += self.sync(from, to);
                    }
                }
            }
            if moved == 0 {
                return;
            }
        }
        panic!("the mesh did not settle");
    }
}

fn run<R: TestReplica>(case: &Case) -> Result<(), TestCaseError> {
    let mut m: Mesh<R> = Mesh::new(case);
    if m.legacy {
        // Legacy ids were made before any of these nodes met.
        for i in 0..N {
            m.step(&Op::Create(i));
        }
    }
    for op in &case.ops {
        m.step(op);
    }
    // Whatever the order, every node ends up creating and sharing once.
    for i in 0..N {
        m.step(&Op::Create(i));
        m.step(&Op::Share {
            node: i,
            project: i % 2 == 0,
        });
    }
    m.settle();

    // No agent sees a memory shared only with another node's zeus or rocket.
    for j in 0..N {
        for i in 0..N {
            let seen = m.nodes[j].visible_to(&agent(i));
            for id in &seen {
                prop_assert_eq!(
                    m.shared.get(id),
                    Some(&i),
                    "{}: on node {}, agent{} sees {} (legacy {})",
                    R::KIND,
                    j,
                    i,
                    id,
                    m.legacy
                );
            }
        }
    }
    // Each agent sees its own scope's memories on its own node.
    for i in 0..N {
        let own: BTreeSet<MemoryId> = m
            .shared
            .iter()
            .filter(|(_, n)| **n == i)
            .map(|(id, _)| *id)
            .collect();
        prop_assert_eq!(m.nodes[i].visible_to(&agent(i)), own);
    }
    if !m.legacy {
        // Qualified: one state everywhere, nothing refused.
        let digest = m.nodes[0].digest();
        let registers = m.nodes[0].registers();
        for j in 0..N {
            prop_assert_eq!(m.nodes[j].refused().len(), 0, "{}: node {}", R::KIND, j);
            prop_assert_eq!(&m.nodes[j].digest(), &digest, "{}: node {}", R::KIND, j);
            prop_assert_eq!(&m.nodes[j].registers(), &registers);
            // and every agent sees its scope's memories on every node.
            for i in 0..N {
                let own: BTreeSet<MemoryId> = m
                    .shared
                    .iter()
                    .filter(|(_, n)| **n == i)
                    .map(|(id, _)| *id)
                    .collect();
                prop_assert_eq!(m.nodes[j].visible_to(&agent(i)), own);
            }
        }
    }
    Ok(())
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(24);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/same_name.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn same_name_scopes_made_concurrently_never_leak_on_the_twin(case in arb_case()) {
        run::<Mem>(&case)?;
    }

    #[test]
    fn same_name_scopes_made_concurrently_never_leak_on_the_real_store(case in arb_case()) {
        run::<Sql>(&case)?;
    }
}
