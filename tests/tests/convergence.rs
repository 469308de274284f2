//! Property tests: replicas converge (DESIGN.md §3–§7).
//!
//! N in-memory replicas ([`MemStore`]), each with its own identity and its own
//! skewed physical clock, all `full` peers of each other, run a random script
//! of local writes (memories, shares, revocations, tombstones, links, org
//! records, agents, profiles) interleaved with random *partial* exchanges
//! (subsets, duplicates, random order, loss). After a final all-to-all
//! exchange every replica must hold exactly the facts a sequential reference
//! model picks (last writer wins per register, tombstones terminal), so all
//! digests agree; nothing forgotten keeps content or is visible; and every
//! agent sees, on every replica, exactly what the §5 rule computed from those
//! winners says — the model never goes through `AuthorizedScopes`.

use std::collections::{BTreeMap, BTreeSet};

use amos_acl::PeerPolicy;
use amos_protocol::{
    AgentFact, AgentId, FactBody, Grants, Hlc, LinkFact, MembershipFact, MemoryAcl, MemoryContent,
    MemoryFixed, MemoryId, MemoryText, MemoryTombstone, MemoryType, NodeId, NodeIdentity, OrgScope,
    ProfileFact, ProjectFact, ProjectId, Register, Relation, Scope, SignedFact, TeamFact, TeamId,
    Verified,
};
use amos_sync::digest::Digest;
use amos_sync::memstore::MemStore;
use amos_sync::{ApplyReport, DeferReason, Sender, apply_batch};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const BASE_MS: u64 = 1_750_000_000_000;
const MINUTE: u64 = 60_000;
const MAX_SKEW_MS: u64 = 10 * MINUTE;

const AGENTS: [&str; 4] = ["x", "y", "z", "w"];
const TEAMS: [&str; 2] = ["t", "u"];
/// Projects with their fixed team.
const PROJECTS: [(&str, &str); 2] = [("p", "t"), ("q", "u")];

fn agent(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

fn team(s: &str) -> TeamId {
    TeamId::parse(s).unwrap()
}

fn project(s: &str) -> ProjectId {
    ProjectId::parse(s).unwrap()
}

/// The small pool grants are drawn from.
fn grant_pool() -> Vec<Scope> {
    [
        "private",
        "global",
        "agent:x",
        "agent:y",
        "team:t",
        "team:u",
        "project:p",
        "project:q",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect()
}

/// The org scopes memberships are drawn from.
fn org_pool() -> Vec<OrgScope> {
    vec![
        OrgScope::Team(team("t")),
        OrgScope::Team(team("u")),
        OrgScope::Project(project("p")),
        OrgScope::Project(project("q")),
    ]
}

/// One step of a script. Indices are reduced modulo the pool they pick from
/// at run time (replicas, memories made so far, agents, …).
#[derive(Clone, Debug)]
enum Op {
    Add {
        at: usize,
        owner: usize,
        grants: Vec<usize>,
        text: u16,
    },
    Update {
        at: usize,
        mem: usize,
        text: u16,
    },
    Share {
        at: usize,
        mem: usize,
        grant: usize,
    },
    Unshare {
        at: usize,
        mem: usize,
        grant: usize,
    },
    Forget {
        at: usize,
        mem: usize,
    },
    Link {
        at: usize,
        from: usize,
        to: usize,
        supports: bool,
        weight: u8,
        present: bool,
    },
    Team {
        at: usize,
        team: usize,
        present: bool,
    },
    Project {
        at: usize,
        project: usize,
        present: bool,
    },
    Member {
        at: usize,
        scope: usize,
        agent: usize,
        present: bool,
    },
    Agent {
        at: usize,
        agent: usize,
        present: bool,
    },
    Profile {
        at: usize,
        agent: usize,
        weight: u8,
    },
    /// `from` sends its export to `to`; `partial` is the seed of a random
    /// subset with duplicates, shuffling and loss (`None`: everything, in order).
    Exchange {
        from: usize,
        to: usize,
        partial: Option<u64>,
    },
}

fn arb_op() -> impl Strategy<Value = Op> {
    let i = || 0usize..8;
    prop_oneof![
        4 => (i(), i(), prop::collection::vec(i(), 0..3), any::<u16>())
            .prop_map(|(at, owner, grants, text)| Op::Add { at, owner, grants, text }),
        2 => (i(), 0usize..64, any::<u16>()).prop_map(|(at, mem, text)| Op::Update { at, mem, text }),
        2 => (i(), 0usize..64, i()).prop_map(|(at, mem, grant)| Op::Share { at, mem, grant }),
        2 => (i(), 0usize..64, i()).prop_map(|(at, mem, grant)| Op::Unshare { at, mem, grant }),
        1 => (i(), 0usize..64).prop_map(|(at, mem)| Op::Forget { at, mem }),
        1 => (i(), 0usize..64, 0usize..64, any::<bool>(), any::<u8>(), prop::bool::weighted(0.8))
            .prop_map(|(at, from, to, supports, weight, present)| Op::Link {
                at, from, to, supports, weight, present
            }),
        2 => (i(), i(), prop::bool::weighted(0.8))
            .prop_map(|(at, team, present)| Op::Team { at, team, present }),
        2 => (i(), i(), prop::bool::weighted(0.8))
            .prop_map(|(at, project, present)| Op::Project { at, project, present }),
        3 => (i(), i(), i(), prop::bool::weighted(0.75))
            .prop_map(|(at, scope, agent, present)| Op::Member { at, scope, agent, present }),
        1 => (i(), i(), prop::bool::weighted(0.8))
            .prop_map(|(at, agent, present)| Op::Agent { at, agent, present }),
        1 => (i(), i(), any::<u8>()).prop_map(|(at, agent, weight)| Op::Profile { at, agent, weight }),
        6 => (i(), i(), prop::option::weighted(0.8, any::<u64>()))
            .prop_map(|(from, to, partial)| Op::Exchange { from, to, partial }),
    ]
}

/// A script: the steps, each with how far the shared physical time moves first.
fn arb_script() -> impl Strategy<Value = Vec<(u16, Op)>> {
    prop::collection::vec((0u16..3_000, arb_op()), 1..70)
}

/// splitmix64: the randomness of partial exchanges and permutations, from a
/// proptest-chosen seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// A random subset with random duplicates, in random order.
    fn mangle<T: Clone>(&mut self, items: Vec<T>, loss_in_4: usize) -> Vec<T> {
        let mut out = Vec::new();
        for f in items {
            if self.below(4) < loss_in_4 {
                continue;
            }
            if self.below(4) == 0 {
                out.push(f.clone());
            }
            out.push(f);
        }
        self.shuffle(&mut out);
        out
    }
}

/// The replicas of one run, the memories made so far and every fact written.
struct World {
    ids: Vec<NodeIdentity>,
    stores: Vec<MemStore>,
    /// Each replica's physical clock offset from the shared time.
    offsets: Vec<i64>,
    /// The shared physical time.
    t: u64,
    mems: Vec<(MemoryId, MemoryFixed)>,
    /// Every fact any replica authored, in order.
    log: Vec<Verified<SignedFact>>,
    /// Every report of a script exchange, with the receiver.
    reports: Vec<(usize, ApplyReport)>,
}

fn identity(seed: u8) -> NodeIdentity {
    NodeIdentity::from_secret([seed; 32])
}

impl World {
    fn new(offsets: Vec<i64>) -> World {
        let n = offsets.len();
        let ids: Vec<NodeIdentity> = (0..n).map(|i| identity(i as u8 + 1)).collect();
        let mut stores: Vec<MemStore> = ids.iter().map(|id| MemStore::new(id.node_id())).collect();
        for (i, s) in stores.iter_mut().enumerate() {
            for (j, other) in ids.iter().enumerate() {
                if i != j {
                    s.peers.insert(other.node_id(), PeerPolicy::Full);
                }
            }
        }
        World {
            ids,
            stores,
            offsets,
            t: BASE_MS,
            mems: Vec::new(),
            log: Vec::new(),
            reports: Vec::new(),
        }
    }

    fn n(&self) -> usize {
        self.stores.len()
    }

    fn now(&self, i: usize) -> u64 {
        (self.t as i64 + self.offsets[i]) as u64
    }

    fn write(&mut self, at: usize, body: FactBody) {
        let now = self.now(at);
        let f = self.stores[at].write(&self.ids[at], body, now);
        self.log.push(f);
    }

    /// A replica (trying `start` first) that holds memory `id` live; with
    /// `content`, one that also holds its content.
    fn holder(&self, start: usize, id: MemoryId, content: bool) -> Option<usize> {
        (0..self.n()).map(|k| (start + k) % self.n()).find(|&i| {
            let s = &self.stores[i];
            s.memories.get(&id).is_some_and(|m| !m.tombstoned)
                && (!content || s.facts.contains_key(&Register::MemoryContent(id)))
        })
    }

    fn mem(&self, k: usize) -> Option<(MemoryId, MemoryFixed)> {
        (!self.mems.is_empty()).then(|| self.mems[k % self.mems.len()].clone())
    }

    fn grants_at(&self, at: usize, id: MemoryId) -> Grants {
        match self.stores[at]
            .facts
            .get(&Register::MemoryAcl(id))
            .map(|f| &f.fact.body)
        {
            Some(FactBody::MemoryAcl(a)) => a.grants.clone(),
            _ => Grants::private(),
        }
    }

    fn run(&mut self, script: &[(u16, Op)]) {
        for (dt, op) in script {
            self.t += u64::from(*dt);
            self.step(op);
        }
    }

    fn step(&mut self, op: &Op) {
        let n = self.n();
        let pool = grant_pool();
        match op.clone() {
            Op::Add {
                at,
                owner,
                grants,
                text,
            } => {
                let at = at % n;
                let k = self.mems.len();
                let now = self.now(at);
                let mut rnd = [0u8; 10];
                rnd[..8].copy_from_slice(&(k as u64).to_be_bytes());
                let id = MemoryId::new(now, rnd);
                let fixed = MemoryFixed {
                    owner: agent(AGENTS[owner % AGENTS.len()]),
                    created_ms: now,
                    origin: self.ids[at].node_id(),
                };
                self.mems.push((id, fixed.clone()));
                self.write(
                    at,
                    content(id, fixed.clone(), format!("memory {k} v{text}")),
                );
                if !grants.is_empty() {
                    let mut g = Grants::private();
                    for x in grants {
                        g.insert(pool[x % pool.len()].clone());
                    }
                    self.write(
                        at,
                        FactBody::MemoryAcl(MemoryAcl {
                            id,
                            fixed,
                            grants: g,
                        }),
                    );
                }
            }
            Op::Update { at, mem, text } => {
                let Some((id, _)) = self.mem(mem) else { return };
                let Some(at) = self.holder(at % n, id, true) else {
                    return;
                };
                let Some(FactBody::MemoryContent(mut c)) = self.stores[at]
                    .facts
                    .get(&Register::MemoryContent(id))
                    .map(|f| f.fact.body.clone())
                else {
                    unreachable!("holder holds content")
                };
                c.text = MemoryText::Plain(format!(
                    "{} / edit {text}",
                    c.text.plain().unwrap_or_default()
                ));
                c.importance = f32::from(text % 101) / 100.0;
                self.write(at, FactBody::MemoryContent(c));
            }
            Op::Share { at, mem, grant } | Op::Unshare { at, mem, grant } => {
                let Some((id, fixed)) = self.mem(mem) else {
                    return;
                };
                let Some(at) = self.holder(at % n, id, false) else {
                    return;
                };
                let mut g = self.grants_at(at, id);
                let s = pool[grant % pool.len()].clone();
                if matches!(op, Op::Share { .. }) {
                    g.insert(s);
                } else {
                    g.remove(&s);
                }
                self.write(
                    at,
                    FactBody::MemoryAcl(MemoryAcl {
                        id,
                        fixed,
                        grants: g,
                    }),
                );
            }
            Op::Forget { at, mem } => {
                let Some((id, fixed)) = self.mem(mem) else {
                    return;
                };
                let Some(at) = self.holder(at % n, id, false) else {
                    return;
                };
                self.write(at, FactBody::MemoryTombstone(MemoryTombstone { id, fixed }));
            }
            Op::Link {
                at,
                from,
                to,
                supports,
                weight,
                present,
            } => {
                let (Some((a, _)), Some((b, _))) = (self.mem(from), self.mem(to)) else {
                    return;
                };
                if a == b {
                    return;
                }
                let relation = if supports {
                    Relation::parse("supports").unwrap()
                } else {
                    Relation::default()
                };
                self.write(
                    at % n,
                    FactBody::Link(LinkFact {
                        from: a,
                        to: b,
                        relation,
                        weight: f32::from(weight) / 255.0,
                        present,
                    }),
                );
            }
            Op::Team {
                at,
                team: t,
                present,
            } => {
                let t = TEAMS[t % TEAMS.len()];
                self.write(
                    at % n,
                    FactBody::Team(TeamFact {
                        id: team(t),
                        name: format!("Team {t}"),
                        present,
                    }),
                );
            }
            Op::Project {
                at,
                project: p,
                present,
            } => {
                let (p, t) = PROJECTS[p % PROJECTS.len()];
                self.write(
                    at % n,
                    FactBody::Project(ProjectFact {
                        id: project(p),
                        team: team(t),
                        name: format!("Project {p}"),
                        present,
                    }),
                );
            }
            Op::Member {
                at,
                scope,
                agent: a,
                present,
            } => {
                let scopes = org_pool();
                self.write(
                    at % n,
                    FactBody::Membership(MembershipFact {
                        scope: scopes[scope % scopes.len()].clone(),
                        agent: agent(AGENTS[a % AGENTS.len()]),
                        role: "member".into(),
                        present,
                    }),
                );
            }
            Op::Agent {
                at,
                agent: a,
                present,
            } => {
                let a = AGENTS[a % AGENTS.len()];
                self.write(
                    at % n,
                    FactBody::Agent(AgentFact {
                        id: agent(a),
                        kind: "claude-code".into(),
                        display_name: format!("Agent {a}"),
                        present,
                    }),
                );
            }
            Op::Profile {
                at,
                agent: a,
                weight,
            } => {
                self.write(
                    at % n,
                    FactBody::Profile(ProfileFact {
                        agent: agent(AGENTS[a % AGENTS.len()]),
                        weights: vec![(MemoryType::default(), f32::from(weight) / 25.5)],
                    }),
                );
            }
            Op::Exchange { from, to, partial } => {
                let (from, to) = (from % n, to % n);
                if from == to {
                    return;
                }
                let mut facts = self.stores[from].export(&PeerPolicy::Full);
                if let Some(seed) = partial {
                    let mut rng = Rng(seed);
                    let loss = rng.below(3);
                    facts = rng.mangle(facts, loss);
                }
                let report = self.send(from, to, facts);
                self.reports.push((to, report));
            }
        }
    }

    /// Apply `facts` from replica `from` on replica `to`, at `to`'s clock.
    fn send(&mut self, from: usize, to: usize, facts: Vec<Verified<SignedFact>>) -> ApplyReport {
        let sender = Sender {
            node: self.ids[from].node_id(),
            policy: self.stores[to].peers[&self.ids[from].node_id()].clone(),
        };
        let now = self.now(to);
        let Ok(report) = apply_batch(&mut self.stores[to], &sender, facts, now, MAX_SKEW_MS);
        report
    }

    /// Full all-to-all exchanges until nothing changes (bounded).
    fn settle(&mut self) {
        let n = self.n();
        for _round in 0..=n + 2 {
            let mut changed = false;
            for from in 0..n {
                for to in 0..n {
                    if from != to {
                        let facts = self.stores[from].export(&PeerPolicy::Full);
                        let r = self.send(from, to, facts);
                        assert_eq!(r.refused, 0, "refusal between full peers: {r:?}");
                        assert_eq!(r.deferred, 0, "deferral in the final exchange: {r:?}");
                        changed |= r.applied > 0;
                    }
                }
            }
            if !changed {
                return;
            }
        }
        panic!("replicas did not settle within {} rounds", n + 3);
    }
}

fn content(id: MemoryId, fixed: MemoryFixed, text: String) -> FactBody {
    FactBody::MemoryContent(MemoryContent {
        id,
        fixed,
        kind: MemoryType::default(),
        text: MemoryText::Plain(text),
        tags: vec!["prop".into()],
        importance: 0.5,
        confidence: 1.0,
        pinned: false,
        expires_ms: None,
        supersedes: None,
    })
}

// ---------------------------------------------------------------------------
// The sequential reference model (DESIGN.md §4–§5), computed from the log of
// every fact ever written, never from a replica's state.

/// The final winners: per register the fact with the greatest clock; a
/// tombstone erases the memory's content and acl whatever their clocks.
struct Model {
    winners: BTreeMap<Register, SignedFact>,
}

impl Model {
    fn from_log(log: &[Verified<SignedFact>]) -> Model {
        let mut winners: BTreeMap<Register, SignedFact> = BTreeMap::new();
        for f in log {
            let reg = f.fact.body.register();
            if winners
                .get(&reg)
                .is_none_or(|w| w.fact.clock < f.fact.clock)
            {
                winners.insert(reg, (**f).clone());
            }
        }
        let tombstoned: Vec<MemoryId> = winners
            .keys()
            .filter_map(|r| match r {
                Register::MemoryTombstone(id) => Some(*id),
                _ => None,
            })
            .collect();
        for id in &tombstoned {
            winners.remove(&Register::MemoryContent(*id));
            winners.remove(&Register::MemoryAcl(*id));
        }
        Model { winners }
    }

    fn digest(&self) -> String {
        let mut d = Digest::new();
        for f in self.winners.values() {
            d.add(&f.to_bytes());
        }
        d.finish().0
    }

    fn clocks(&self) -> BTreeMap<Register, Hlc> {
        self.winners
            .iter()
            .map(|(r, f)| (r.clone(), f.fact.clock))
            .collect()
    }

    fn tombstoned(&self) -> BTreeSet<MemoryId> {
        self.winners
            .keys()
            .filter_map(|r| match r {
                Register::MemoryTombstone(id) => Some(*id),
                _ => None,
            })
            .collect()
    }

    fn team_present(&self, t: &TeamId) -> bool {
        matches!(
            self.winners
                .get(&Register::Team(t.clone()))
                .map(|f| &f.fact.body),
            Some(FactBody::Team(TeamFact { present: true, .. }))
        )
    }

    fn member(&self, scope: OrgScope, a: &AgentId) -> bool {
        matches!(
            self.winners
                .get(&Register::Membership(scope, a.clone()))
                .map(|f| &f.fact.body),
            Some(FactBody::Membership(MembershipFact { present: true, .. }))
        )
    }

    /// §5, team clause: a present member of a present team.
    fn in_team(&self, t: &TeamId, a: &AgentId) -> bool {
        self.team_present(t) && self.member(OrgScope::Team(t.clone()), a)
    }

    /// §5, project clause: a present member of a present project who is a
    /// member of the project's team (read as: the team clause holds for it).
    fn in_project(&self, p: &ProjectId, a: &AgentId) -> bool {
        match self
            .winners
            .get(&Register::Project(p.clone()))
            .map(|f| &f.fact.body)
        {
            Some(FactBody::Project(pf)) => {
                pf.present
                    && self.member(OrgScope::Project(p.clone()), a)
                    && self.in_team(&pf.team, a)
            }
            _ => false,
        }
    }

    /// The live memories `a` may see.
    fn visible_to(&self, a: &AgentId) -> BTreeSet<MemoryId> {
        let mut out = BTreeSet::new();
        for (reg, f) in &self.winners {
            let (Register::MemoryContent(id), FactBody::MemoryContent(c)) = (reg, &f.fact.body)
            else {
                continue;
            };
            let grants = match self
                .winners
                .get(&Register::MemoryAcl(*id))
                .map(|f| &f.fact.body)
            {
                Some(FactBody::MemoryAcl(acl)) => acl.grants.iter().cloned().collect(),
                _ => Vec::new(),
            };
            let granted = grants.iter().any(|g| match g {
                Scope::Private => false,
                Scope::Global => true,
                Scope::Agent(x) => x == a,
                Scope::Team(t) => self.in_team(t, a),
                Scope::Project(p) => self.in_project(p, a),
            });
            if c.fixed.owner == *a || granted {
                out.insert(*id);
            }
        }
        out
    }
}

/// Every replica holds exactly the model's winners, nothing forgotten shows,
/// and visibility everywhere equals the model's.
fn check_against_model(w: &World, model: &Model) -> Result<(), TestCaseError> {
    let want_digest = model.digest();
    let want_clocks = model.clocks();
    let tombstoned = model.tombstoned();
    for (i, s) in w.stores.iter().enumerate() {
        let held: BTreeMap<Register, Hlc> = s
            .facts
            .iter()
            .map(|(r, f)| (r.clone(), f.fact.clock))
            .collect();
        prop_assert_eq!(
            &held,
            &want_clocks,
            "replica {} holds other winners than the model",
            i
        );
        prop_assert_eq!(s.digest(), want_digest.clone(), "replica {} digest", i);
        for id in &tombstoned {
            prop_assert!(
                s.memories.get(id).is_some_and(|m| m.tombstoned),
                "replica {} lost a tombstone",
                i
            );
            prop_assert_eq!(
                s.text(id),
                None,
                "replica {} kept the content of a forgotten memory",
                i
            );
        }
        for a in AGENTS {
            let a = agent(a);
            let got = s.visible_to(&a);
            prop_assert!(
                got.is_disjoint(&tombstoned),
                "replica {} shows a forgotten memory to {}",
                i,
                a
            );
            prop_assert_eq!(
                got,
                model.visible_to(&a),
                "replica {} visibility of {}",
                i,
                a
            );
        }
    }
    Ok(())
}

/// `cases` cases; failures persisted in `tests/proptest-regressions/` (the
/// working directory of an integration test is the package root).
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/convergence.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn arb_offsets() -> impl Strategy<Value = Vec<i64>> {
    let five_min = 5 * MINUTE as i64;
    (2usize..=5).prop_flat_map(move |n| prop::collection::vec(-five_min..=five_min, n))
}

proptest! {
    #![proptest_config(config(128))]

    /// Random writes on random replicas with skewed clocks, random partial
    /// exchanges, then a full exchange: every replica ends on the model.
    #[test]
    fn replicas_converge_to_the_reference_model(offsets in arb_offsets(), script in arb_script()) {
        let mut w = World::new(offsets);
        w.run(&script);
        for (to, r) in &w.reports {
            // Clocks are at most 10 minutes apart: nothing is quarantined,
            // and full peers refuse nothing.
            prop_assert_eq!(r.deferred, 0, "replica {} deferred a fact", to);
            prop_assert_eq!(r.refused, 0, "replica {} refused a fact", to);
        }
        w.settle();
        for s in &w.stores {
            prop_assert!(s.refused.is_empty() && s.deferred.is_empty());
        }
        let digests: BTreeSet<String> = w.stores.iter().map(MemStore::digest).collect();
        prop_assert_eq!(digests.len(), 1, "digests differ");
        check_against_model(&w, &Model::from_log(&w.log))?;
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// One replica's clock is an hour ahead: its facts are deferred (not
    /// applied, not refused) everywhere else, and not lost — once the
    /// receivers' clocks catch up, retrying the deferred facts applies them,
    /// and everything converges.
    #[test]
    fn a_replica_an_hour_ahead_is_deferred_then_converges(
        offsets in arb_offsets(),
        script in arb_script(),
    ) {
        let mut offsets = offsets;
        offsets[0] = 60 * MINUTE as i64;
        let mut w = World::new(offsets);
        w.run(&script);
        let ahead = w.ids[0].node_id();
        for (to, r) in &w.reports {
            prop_assert_eq!(r.refused, 0, "replica {} refused a fact", to);
            if *to == 0 {
                prop_assert_eq!(r.deferred, 0, "the replica ahead deferred a fact");
            }
        }
        for (i, s) in w.stores.iter().enumerate().skip(1) {
            for (f, from, why) in &s.deferred {
                prop_assert_eq!(f.fact.author(), ahead, "replica {} deferred a fact of another node", i);
                prop_assert_eq!(*from, ahead);
                let skewed = matches!(why, DeferReason::ClockSkew { ahead_ms } if *ahead_ms > MAX_SKEW_MS);
                prop_assert!(skewed, "deferred for {}", why);
            }
            prop_assert!(
                s.facts.values().all(|f| f.fact.author() != ahead),
                "replica {} applied a fact from a clock an hour ahead", i
            );
        }
        // The receivers' clocks catch up; each retries what it set aside.
        w.t += 2 * 60 * MINUTE;
        for i in 1..w.n() {
            let deferred = std::mem::take(&mut w.stores[i].deferred);
            let facts: Vec<Verified<SignedFact>> =
                deferred.iter().map(|(f, _, _)| f.clone().verify().unwrap()).collect();
            let r = w.send(0, i, facts);
            prop_assert_eq!(r.deferred + r.refused, 0, "retry at replica {}: {:?}", i, r);
            // Not lost: each retried fact is now held, or superseded by a
            // later fact of its register, or its memory was forgotten.
            let s = &w.stores[i];
            for (f, _, _) in &deferred {
                let reg = f.fact.body.register();
                let held = s.facts.get(&reg).is_some_and(|h| h.fact.clock >= f.fact.clock);
                let forgotten = f.fact.body.memory().is_some_and(|(id, _)| {
                    s.memories.get(&id).is_some_and(|m| m.tombstoned)
                });
                prop_assert!(held || forgotten, "replica {} lost a deferred fact {:?}", i, f.fact);
            }
        }
        w.settle();
        check_against_model(&w, &Model::from_log(&w.log))?;
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Merge is idempotent and order-independent: the same facts, with
    /// duplicates, in two random orders and random batches, applied to two
    /// fresh replicas give the same state — the model's — and applying them
    /// all again changes nothing.
    #[test]
    fn merge_is_idempotent_and_order_independent(
        offsets in arb_offsets(),
        script in arb_script(),
        seeds in any::<(u64, u64)>(),
    ) {
        let mut w = World::new(offsets);
        w.run(&script);
        let authors: Vec<NodeId> = w.ids.iter().map(NodeIdentity::node_id).collect();
        let mut fresh = Vec::new();
        for (k, seed) in [seeds.0, seeds.1].into_iter().enumerate() {
            let me = identity(200 + k as u8).node_id();
            let mut s = MemStore::new(me);
            for a in &authors {
                s.peers.insert(*a, PeerPolicy::Full);
            }
            let mut rng = Rng(seed);
            let facts = rng.mangle(w.log.clone(), 0);
            let mut rest = facts.as_slice();
            while !rest.is_empty() {
                let take = 1 + rng.below(rest.len().min(12));
                let (batch, tail) = rest.split_at(take);
                rest = tail;
                let sender = Sender { node: authors[rng.below(authors.len())], policy: PeerPolicy::Full };
                let Ok(r) = apply_batch(&mut s, &sender, batch.to_vec(), w.t + MAX_SKEW_MS, MAX_SKEW_MS);
                prop_assert_eq!(r.refused + r.deferred, 0);
            }
            // Idempotent: everything again, one batch, changes nothing.
            let before = s.digest();
            let sender = Sender { node: authors[0], policy: PeerPolicy::Full };
            let Ok(r) = apply_batch(&mut s, &sender, w.log.clone(), w.t + MAX_SKEW_MS, MAX_SKEW_MS);
            prop_assert_eq!(r.applied, 0, "re-applying held facts applied something");
            prop_assert_eq!(s.digest(), before);
            fresh.push(s);
        }
        let model = Model::from_log(&w.log);
        prop_assert_eq!(fresh[0].digest(), fresh[1].digest());
        prop_assert_eq!(fresh[0].digest(), model.digest());
        for a in AGENTS {
            let a = agent(a);
            prop_assert_eq!(fresh[0].visible_to(&a), fresh[1].visible_to(&a));
            prop_assert_eq!(fresh[0].visible_to(&a), model.visible_to(&a));
        }
    }
}

/// A hand-written instance of the case the properties hunt for: two replicas
/// forget the same memory concurrently, each after its own edit; both
/// tombstones win over every edit, and the replicas agree on one of them.
#[test]
fn concurrent_forgets_converge() {
    let mut w = World::new(vec![0, 1_000, -2_000]);
    w.step(&Op::Add {
        at: 0,
        owner: 0,
        grants: vec![1],
        text: 1,
    });
    w.step(&Op::Exchange {
        from: 0,
        to: 1,
        partial: None,
    });
    w.step(&Op::Exchange {
        from: 0,
        to: 2,
        partial: None,
    });
    w.t += 10;
    w.step(&Op::Update {
        at: 1,
        mem: 0,
        text: 2,
    });
    w.step(&Op::Forget { at: 1, mem: 0 });
    w.step(&Op::Forget { at: 2, mem: 0 });
    w.step(&Op::Update {
        at: 0,
        mem: 0,
        text: 3,
    });
    w.settle();
    let model = Model::from_log(&w.log);
    check_against_model(&w, &model).unwrap();
    assert_eq!(model.tombstoned().len(), 1);
}
