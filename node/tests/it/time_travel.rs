//! Valid time, supersession and looking back (docs/design.md §12), on real
//! nodes (SQLite stores in temp dirs) that exchange their signed facts as
//! peers do, in random order.
//!
//! The property: for random histories (adds, updates of text and of valid
//! time, supersessions, shares, unshares, forgets, by agents in and out of a
//! team, on two origins) replicated between three nodes in random order and
//! then to convergence, every node gives the same `--valid-at` and
//! `--known-at` answers, for every agent and probe time, and they equal a
//! reference model that knows nothing of stores or sync. A forgotten memory
//! never comes back through either, and a superseder the requester cannot
//! see changes nothing for that requester (the model counts only visible
//! superseders, and the node must agree with it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use amos_node::clock::WallClock;
use amos_node::recall::{RecallMode, RecallOptions, TimeQuery};
use amos_node::{Home, NewMemory, Node};
use amos_protocol::{MemoryId, Scope, SignedFact, Validity};
use proptest::prelude::*;

/// One wall clock for every node of a case; ops move it on.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl WallClock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

const START_MS: u64 = 1_800_000_000_000;
const STEP_MS: u64 = 1_000;
const AGENTS: [&str; 3] = ["alice", "bob", "carol"];
const WORDS: [&str; 4] = ["red", "green", "blue", "black"];
const NODES: usize = 3;

fn scope_of(i: u8) -> Scope {
    match i % 3 {
        0 => "team:apollo".parse().unwrap(),
        1 => Scope::Global,
        _ => "agent:carol".parse().unwrap(),
    }
}

/// A valid time as offsets from the write's own time.
#[derive(Debug, Clone, Copy)]
struct ValidSpec {
    /// Start: `now + from` seconds (None: the creation).
    from: Option<i8>,
    /// End: this many seconds after the start (None: still true).
    len: Option<u8>,
}

impl ValidSpec {
    fn at(&self, now: u64) -> Validity {
        let from_ms = self
            .from
            .map(|s| (now as i64 + s as i64 * STEP_MS as i64) as u64);
        let start = from_ms.unwrap_or(now);
        Validity {
            from_ms,
            to_ms: self.len.map(|l| start + (l as u64 + 1) * STEP_MS),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add {
        node: usize,
        agent: usize,
        words: (usize, usize),
        share: Vec<u8>,
        valid: ValidSpec,
        supersedes: Option<prop::sample::Index>,
    },
    Update {
        mem: prop::sample::Index,
        words: Option<(usize, usize)>,
        valid: Option<ValidSpec>,
    },
    Share {
        mem: prop::sample::Index,
        scope: u8,
        on: bool,
    },
    Forget {
        mem: prop::sample::Index,
    },
    Sync {
        from: usize,
        to: usize,
        shuffle: u64,
    },
}

fn arb_valid() -> impl Strategy<Value = ValidSpec> {
    (
        prop::option::weighted(0.6, -8i8..8),
        prop::option::weighted(0.4, 0u8..10),
    )
        .prop_map(|(from, len)| ValidSpec { from, len })
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            0..2usize,
            0..AGENTS.len(),
            (0..WORDS.len(), 0..WORDS.len()),
            prop::collection::vec(0u8..3, 0..2),
            arb_valid(),
            prop::option::weighted(0.5, any::<prop::sample::Index>()),
        )
            .prop_map(|(node, agent, words, share, valid, supersedes)| Op::Add {
                node,
                agent,
                words,
                share,
                valid,
                supersedes,
            }),
        2 => (
            any::<prop::sample::Index>(),
            prop::option::of((0..WORDS.len(), 0..WORDS.len())),
            prop::option::of(arb_valid()),
        )
            .prop_map(|(mem, words, valid)| Op::Update { mem, words, valid }),
        1 => (any::<prop::sample::Index>(), 0u8..3, any::<bool>())
            .prop_map(|(mem, scope, on)| Op::Share { mem, scope, on }),
        1 => any::<prop::sample::Index>().prop_map(|mem| Op::Forget { mem }),
        3 => (0..NODES, 0..NODES, any::<u64>())
            .prop_map(|(from, to, shuffle)| Op::Sync { from, to, shuffle }),
    ]
}

// ---------------------------------------------------------------- the model

#[derive(Debug, Clone)]
struct ModelMemory {
    id: MemoryId,
    owner: &'static str,
    origin: usize,
    created: u64,
    /// (record time, text, validity), oldest first.
    versions: Vec<(u64, String, Validity)>,
    /// Which versions a node holds the fact of: the creation and every
    /// text change (the text log), and the newest (the register). A change
    /// of valid time alone is an empty edit, which the log does not keep.
    held: Vec<bool>,
    grants: BTreeSet<Scope>,
    forgotten: bool,
    supersedes: Option<MemoryId>,
}

impl ModelMemory {
    fn current(&self) -> &(u64, String, Validity) {
        self.versions.last().unwrap()
    }
    fn start(&self) -> u64 {
        self.current().2.from_ms.unwrap_or(self.created)
    }
    fn version_at(&self, t: u64) -> Option<&(u64, String, Validity)> {
        self.versions.iter().rev().find(|v| v.0 <= t)
    }
    /// The newest version whose fact is held and stamped by `t`.
    fn held_at(&self, t: u64) -> Option<&(u64, String, Validity)> {
        let last = self.versions.len() - 1;
        self.versions
            .iter()
            .enumerate()
            .rev()
            .find(|(i, v)| v.0 <= t && (self.held[*i] || *i == last))
            .map(|(_, v)| v)
    }
    fn text_at(&self, t: u64) -> Option<&str> {
        self.version_at(t).map(|v| v.1.as_str())
    }
}

#[derive(Default)]
struct Model {
    mems: Vec<ModelMemory>,
}

fn in_team(agent: &str) -> bool {
    agent != "carol"
}

impl Model {
    /// The memory `mem` picks, unless there is none or it was forgotten.
    fn live(&self, mem: &prop::sample::Index) -> Option<usize> {
        let i = (!self.mems.is_empty()).then(|| mem.index(self.mems.len()))?;
        (!self.mems[i].forgotten).then_some(i)
    }

    fn sees(&self, agent: &str, m: &ModelMemory) -> bool {
        !m.forgotten
            && (m.owner == agent
                || m.grants.iter().any(|g| match g {
                    Scope::Global => true,
                    Scope::Team(_) => in_team(agent),
                    Scope::Agent(a) => a.as_str() == agent,
                    _ => false,
                }))
    }

    /// When `m` stops being true for `agent`: its own end, or the earliest
    /// start of a superseder `agent` can see (on record by `known_at`).
    fn end(&self, agent: &str, m: &ModelMemory, known_at: Option<u64>) -> Option<u64> {
        let by = self
            .mems
            .iter()
            .filter(|s| s.supersedes == Some(m.id) && self.sees(agent, s))
            .filter(|s| known_at.is_none_or(|t| s.created <= t))
            .map(|s| s.start())
            .min();
        match (m.current().2.to_ms, by) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn valid_at(&self, agent: &str, t: u64) -> BTreeSet<MemoryId> {
        self.mems
            .iter()
            .filter(|m| self.sees(agent, m))
            .filter(|m| m.start() <= t && self.end(agent, m, None).is_none_or(|e| t < e))
            .map(|m| m.id)
            .collect()
    }

    /// What was believed at `t` to be true at `t`: the records then, with
    /// the valid time they held then, ended by superseders on record then.
    fn valid_then(&self, agent: &str, t: u64) -> BTreeSet<MemoryId> {
        self.mems
            .iter()
            .filter(|m| self.sees(agent, m) && m.created <= t)
            .filter(|m| {
                // Nothing held that old: the register stands.
                let v = m.held_at(t).unwrap_or(m.current()).2;
                let start = v.from_ms.unwrap_or(m.created);
                let by = self
                    .mems
                    .iter()
                    .filter(|s| s.supersedes == Some(m.id) && self.sees(agent, s))
                    .filter(|s| s.created <= t)
                    .map(|s| s.start())
                    .min();
                let end = match (v.to_ms, by) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                start <= t && end.is_none_or(|e| t < e)
            })
            .map(|m| m.id)
            .collect()
    }

    fn known_at(&self, agent: &str, t: u64) -> BTreeMap<MemoryId, String> {
        self.mems
            .iter()
            .filter(|m| self.sees(agent, m) && m.created <= t)
            .map(|m| (m.id, m.text_at(t).unwrap().to_owned()))
            .collect()
    }
}

// ---------------------------------------------------------------- the mesh

struct Mesh {
    _dirs: Vec<tempfile::TempDir>,
    nodes: Vec<Node>,
    clock: TestClock,
}

impl Mesh {
    fn new() -> Mesh {
        let clock = TestClock(Arc::new(AtomicU64::new(START_MS)));
        let mut dirs = Vec::new();
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let dir = tempfile::tempdir().unwrap();
            let home = Home::new(dir.path().to_path_buf());
            Node::init(&home, Some(&format!("n{i}"))).unwrap();
            nodes.push(Node::open_with_clock(&home, Arc::new(clock.clone())).unwrap());
            dirs.push(dir);
        }
        let ids: Vec<String> = nodes.iter().map(|n| n.node_id().to_string()).collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    n.peer_add(id, None, "full").unwrap();
                }
            }
        }
        let mut mesh = Mesh {
            _dirs: dirs,
            nodes,
            clock,
        };
        mesh.nodes[0].team_create("apollo", None).unwrap();
        for a in AGENTS {
            let teams = match in_team(a) {
                true => vec!["apollo".to_owned()],
                false => vec![],
            };
            mesh.nodes[0].agent_add(a, "agent", &teams).unwrap();
        }
        mesh.converge();
        mesh
    }

    fn tick(&self) -> u64 {
        self.clock.0.fetch_add(STEP_MS, Ordering::SeqCst) + STEP_MS
    }

    /// Every fact `from` holds that `to` may have, applied on `to` in an
    /// order shuffled by `shuffle` (0: as exported).
    fn sync(&mut self, from: usize, to: usize, shuffle: u64) {
        if from == to {
            return;
        }
        let to_id = self.nodes[to].node_id();
        let mut facts = Vec::new();
        self.nodes[from]
            .export_for_session(&to_id, 0, true, 4096, |batch| {
                for b in batch {
                    facts.push(SignedFact::decode_verified(&b)?);
                }
                Ok(())
            })
            .unwrap();
        let mut x = shuffle | 1;
        for i in (1..facts.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            facts.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let from_id = self.nodes[from].node_id();
        self.nodes[to].apply_from(&from_id, facts).unwrap();
    }

    fn converge(&mut self) {
        for _ in 0..2 {
            for from in 0..NODES {
                for to in 0..NODES {
                    self.sync(from, to, 0);
                }
            }
        }
    }
}

fn words_text(w: (usize, usize)) -> String {
    format!("memo {} {}", WORDS[w.0], WORDS[w.1])
}

/// Run `ops`, keeping the model in step; returns the mesh and the model.
fn run(ops: &[Op]) -> (Mesh, Model) {
    let mut mesh = Mesh::new();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Add {
                node,
                agent,
                words,
                share,
                valid,
                supersedes,
            } => {
                let now = mesh.tick();
                let owner = AGENTS[*agent];
                let n = &mut mesh.nodes[*node];
                let who = n.requester(owner).unwrap();
                // Only a memory the writer can see here may be replaced.
                let sup = supersedes
                    .filter(|_| !model.mems.is_empty())
                    .map(|i| model.mems[i.index(model.mems.len())].id)
                    .filter(|id| n.get(&who, &id.to_string()).is_ok());
                let validity = valid.at(now);
                let mut new = NewMemory::new(words_text(*words));
                new.share = share.iter().map(|s| scope_of(*s)).collect();
                new.validity = validity;
                new.supersedes = sup;
                // A superseder may not start before what it replaces (as
                // the writer's node sees that one).
                let starts_before = |n: &Node, old: MemoryId| {
                    let start = validity.from_ms.unwrap_or(now);
                    n.get(&who, &old.to_string())
                        .is_ok_and(|o| start < o.valid_from_ms())
                };
                if sup.is_some_and(|old| starts_before(n, old)) {
                    assert!(
                        n.add(&who, new).is_err(),
                        "an earlier superseder is refused"
                    );
                    continue;
                }
                let id = n.add(&who, new).unwrap();
                let text = words_text(*words);
                model.mems.push(ModelMemory {
                    id,
                    owner,
                    origin: *node,
                    created: now,
                    versions: vec![(now, text, validity)],
                    held: vec![true],
                    grants: share.iter().map(|s| scope_of(*s)).collect(),
                    forgotten: false,
                    supersedes: sup,
                });
            }
            Op::Update { mem, words, valid } => {
                let Some(i) = model
                    .live(mem)
                    .filter(|_| words.is_some() || valid.is_some())
                else {
                    continue;
                };
                let now = mesh.tick();
                let m = &mut model.mems[i];
                let n = &mut mesh.nodes[m.origin];
                let who = n.requester(m.owner).unwrap();
                let (_, old_text, old_valid) = m.current().clone();
                let text = words.map(words_text);
                let validity = valid.map(|v| {
                    let v = v.at(now);
                    Validity {
                        from_ms: v.from_ms.or(old_valid.from_ms),
                        to_ms: v.to_ms.or(old_valid.to_ms),
                    }
                });
                let new_valid = validity.unwrap_or(old_valid);
                let start = new_valid.from_ms.unwrap_or(m.created);
                let bad = new_valid.to_ms.is_some_and(|t| t <= start)
                    || validity.is_some()
                        && m.supersedes.is_some_and(|old| {
                            n.get(&who, &old.to_string())
                                .is_ok_and(|o| start < o.valid_from_ms())
                        });
                let r = n.revise(&who, &m.id.to_string(), text.as_deref(), validity, 1 << 20);
                if bad {
                    assert!(
                        r.is_err(),
                        "an end before the start, or a start before what it replaces, is refused"
                    );
                    continue;
                }
                r.unwrap();
                let new_text = text.unwrap_or(old_text.clone());
                if new_text != old_text || new_valid != old_valid {
                    m.held.push(new_text != old_text);
                    m.versions.push((now, new_text, new_valid));
                }
            }
            Op::Share { mem, .. } | Op::Forget { mem } => {
                let Some(i) = model.live(mem) else {
                    continue;
                };
                mesh.tick();
                let m = &mut model.mems[i];
                let n = &mut mesh.nodes[m.origin];
                let who = n.requester(m.owner).unwrap();
                let id = m.id.to_string();
                if let Op::Share { scope, on, .. } = op {
                    let s = scope_of(*scope);
                    n.set_grant(&who, &id, &s.to_string(), *on).unwrap();
                    match on {
                        true => m.grants.insert(s),
                        false => m.grants.remove(&s),
                    };
                } else {
                    n.forget(&who, &id).unwrap();
                    m.forgotten = true;
                }
            }
            Op::Sync { from, to, shuffle } => mesh.sync(*from, *to, *shuffle),
        }
    }
    mesh.tick();
    mesh.converge();
    (mesh, model)
}

/// The probe times: before everything, around every write and every valid
/// time boundary, and after everything.
fn probes(model: &Model, end: u64) -> Vec<u64> {
    let mut t = BTreeSet::from([START_MS - 20 * STEP_MS, end + 20 * STEP_MS]);
    for m in &model.mems {
        for (at, _, v) in &m.versions {
            for x in [Some(*at), v.from_ms, v.to_ms].into_iter().flatten() {
                t.extend([x.saturating_sub(1), x, x + STEP_MS / 2]);
            }
        }
    }
    t.into_iter().collect()
}

/// What `list` answers `agent` on `n` under `q`: id → text.
fn listed(n: &Node, agent: &str, q: TimeQuery) -> BTreeMap<MemoryId, String> {
    let who = n.requester(agent).unwrap();
    n.list_in_time(&who, None, 10_000, &q)
        .unwrap()
        .into_iter()
        .map(|(m, _)| (m.id(), m.content().to_owned()))
        .collect()
}

fn node_valid_at(n: &Node, agent: &str, t: u64) -> BTreeSet<MemoryId> {
    let q = TimeQuery {
        valid_at_ms: Some(t),
        ..TimeQuery::default()
    };
    listed(n, agent, q).into_keys().collect()
}

fn node_valid_then(n: &Node, agent: &str, t: u64) -> BTreeSet<MemoryId> {
    let q = TimeQuery {
        valid_at_ms: Some(t),
        known_at_ms: Some(t),
        ..TimeQuery::default()
    };
    listed(n, agent, q).into_keys().collect()
}

fn node_known_at(n: &Node, agent: &str, t: u64) -> BTreeMap<MemoryId, String> {
    let q = TimeQuery {
        known_at_ms: Some(t),
        ..TimeQuery::default()
    };
    listed(n, agent, q)
}

/// What a search for `word` returns under `q`, by words alone.
fn node_search(n: &mut Node, agent: &str, word: &str, q: TimeQuery) -> BTreeSet<MemoryId> {
    node_search_in(n, agent, word, q, RecallMode::Lexical)
}

/// What a search for `word` returns under `q` in `mode`.
fn node_search_in(
    n: &mut Node,
    agent: &str,
    word: &str,
    q: TimeQuery,
    mode: RecallMode,
) -> BTreeSet<MemoryId> {
    let who = n.requester(agent).unwrap();
    let opts = RecallOptions {
        k: 1000,
        time: q,
        note_recall: false,
        mode,
        ..RecallOptions::default()
    };
    n.search_with(&who, word, &opts)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.id())
        .collect()
}

fn check(ops: &[Op]) -> Result<(), TestCaseError> {
    let (mut mesh, model) = run(ops);
    let end = mesh.clock.now_ms();
    let forgotten: BTreeSet<MemoryId> = model
        .mems
        .iter()
        .filter(|m| m.forgotten)
        .map(|m| m.id)
        .collect();
    for t in probes(&model, end) {
        for agent in AGENTS {
            let want_valid = model.valid_at(agent, t);
            let want_known = model.known_at(agent, t);
            let want_then = model.valid_then(agent, t);
            for (i, n) in mesh.nodes.iter_mut().enumerate() {
                let valid = node_valid_at(n, agent, t);
                prop_assert_eq!(
                    &valid,
                    &want_valid,
                    "valid-at {} as {} on node {}",
                    t,
                    agent,
                    i
                );
                let known = node_known_at(n, agent, t);
                prop_assert_eq!(
                    &known,
                    &want_known,
                    "known-at {} as {} on node {}",
                    t,
                    agent,
                    i
                );
                let then = node_valid_then(n, agent, t);
                prop_assert_eq!(
                    &then,
                    &want_then,
                    "valid-at and known-at {} as {} on node {}",
                    t,
                    agent,
                    i
                );
                prop_assert!(
                    valid.is_disjoint(&forgotten) && known.keys().all(|k| !forgotten.contains(k))
                );
                // The search path (index candidates, and under known-at the
                // memories whose text changed since) agrees with the list.
                let word = WORDS[(t / STEP_MS) as usize % WORDS.len()];
                let known_at = TimeQuery {
                    known_at_ms: Some(t),
                    ..TimeQuery::default()
                };
                let found = node_search(n, agent, word, known_at);
                // By meaning too (hybrid): everything the words found, and
                // nothing the agent could not see on record then.
                let hybrid = node_search_in(n, agent, word, known_at, RecallMode::Hybrid);
                prop_assert!(found.is_subset(&hybrid), "hybrid lost a word match");
                prop_assert!(
                    hybrid.iter().all(|id| want_known.contains_key(id)),
                    "hybrid found a memory not on record for {} at {}",
                    agent,
                    t
                );
                let want: BTreeSet<MemoryId> = want_known
                    .iter()
                    .filter(|(_, text)| text.split(' ').any(|w| w == word))
                    .map(|(id, _)| *id)
                    .collect();
                prop_assert_eq!(
                    found,
                    want,
                    "search {:?} known-at {} as {} on node {}",
                    word,
                    t,
                    agent,
                    i
                );
                let found = node_search(
                    n,
                    agent,
                    "memo",
                    TimeQuery {
                        valid_at_ms: Some(t),
                        ..TimeQuery::default()
                    },
                );
                prop_assert_eq!(
                    &found,
                    &want_valid,
                    "search valid-at {} as {} on node {}",
                    t,
                    agent,
                    i
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(16),
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn valid_at_and_known_at_agree_on_every_node_with_the_model(
        ops in prop::collection::vec(arb_op(), 1..28)
    ) {
        check(&ops)?;
    }
}

/// A superseder the requester cannot see changes nothing for them, in
/// `--valid-at`, in ranking and in the timeline; the owner of the
/// superseder sees the supersession.
#[test]
fn a_hidden_superseder_changes_nothing_for_who_cannot_see_it() {
    let mut mesh = Mesh::new();
    let now = mesh.tick();
    let n = &mut mesh.nodes[0];
    let alice = n.requester("alice").unwrap();
    let bob = n.requester("bob").unwrap();
    let mut old = NewMemory::new("the deploy port is 8080");
    old.share = vec!["team:apollo".parse().unwrap()];
    let old = n.add(&alice, old).unwrap();
    // Bob replaces it in a memory only he can see.
    let mut new = NewMemory::new("the deploy port is 9090");
    new.supersedes = Some(old);
    new.validity = Validity {
        from_ms: Some(now + 5 * STEP_MS),
        to_ms: None,
    };
    let new = n.add(&bob, new).unwrap();
    let later = now + 10 * STEP_MS;
    assert!(node_valid_at(n, "alice", later).contains(&old));
    assert!(!node_valid_at(n, "bob", later).contains(&old));
    assert!(node_valid_at(n, "bob", later).contains(&new));
    // Ranking: not down-weighted for alice, down-weighted for bob.
    let explain = |n: &mut Node, agent: &str| {
        let who = n.requester(agent).unwrap();
        let opts = RecallOptions {
            note_recall: false,
            ..RecallOptions::default()
        };
        n.search_with(&who, "deploy port", &opts)
            .unwrap()
            .into_iter()
            .find(|h| h.memory.id() == old)
            .map(|h| h.explain.superseded_by.clone())
            .unwrap()
    };
    mesh.tick();
    mesh.clock.0.fetch_add(10 * STEP_MS, Ordering::SeqCst);
    let n = &mut mesh.nodes[0];
    assert_eq!(explain(n, "alice"), None);
    assert_eq!(explain(n, "bob"), Some(new.to_string()));
    let events = |n: &Node, agent: &str| {
        n.timeline(&n.requester(agent).unwrap(), None, None, None, 100)
            .unwrap()
            .into_iter()
            .filter(|e| e.by.is_some())
            .count()
    };
    assert_eq!(events(n, "alice"), 0);
    assert_eq!(events(n, "bob"), 1);
    // And the same on a replica.
    mesh.converge();
    assert!(node_valid_at(&mesh.nodes[2], "alice", later).contains(&old));
    assert!(!node_valid_at(&mesh.nodes[2], "bob", later).contains(&old));
}

/// Concurrent supersessions on two nodes resolve the same way on every
/// node, whatever order the facts came in: the earliest start ends the
/// replaced memory. (A cycle cannot be made through the API — a memory
/// names what it replaces when it is made — and needs no rule of its own:
/// each end is computed from the others' starts.)
#[test]
fn concurrent_supersessions_and_cycles_resolve_the_same_everywhere() {
    let mut mesh = Mesh::new();
    let now = mesh.tick();
    let alice0 = mesh.nodes[0].requester("alice").unwrap();
    let mut x = NewMemory::new("memo x");
    x.share = vec![Scope::Global];
    let x = mesh.nodes[0].add(&alice0, x).unwrap();
    mesh.converge();
    // Two nodes replace x at once, with different starts.
    let mut a = NewMemory::new("memo a");
    a.share = vec![Scope::Global];
    a.supersedes = Some(x);
    a.validity.from_ms = Some(now + 7 * STEP_MS);
    let a = mesh.nodes[0].add(&alice0, a).unwrap();
    let alice1 = mesh.nodes[1].requester("alice").unwrap();
    let mut b = NewMemory::new("memo b");
    b.share = vec![Scope::Global];
    b.supersedes = Some(x);
    b.validity.from_ms = Some(now + 4 * STEP_MS);
    let b = mesh.nodes[1].add(&alice1, b).unwrap();
    mesh.sync(1, 2, 7);
    mesh.sync(0, 2, 3);
    mesh.converge();
    for n in &mesh.nodes {
        let at = |t| node_valid_at(n, "carol", t);
        assert!(at(now + 3 * STEP_MS).contains(&x));
        // b's start (the earlier) ends x, not a's.
        assert!(!at(now + 4 * STEP_MS).contains(&x));
        assert!(at(now + 4 * STEP_MS).contains(&b));
        assert!(at(now + 8 * STEP_MS).contains(&a));
        let tl = n
            .timeline(&n.requester("carol").unwrap(), None, None, None, 100)
            .unwrap();
        let superseded: Vec<_> = tl.iter().filter(|e| e.by.is_some()).collect();
        assert_eq!(superseded.len(), 1);
        assert_eq!(superseded[0].by.as_deref(), Some(b.to_string().as_str()));
    }
}

// ---------------------------------------------------------------- the CLI

use crate::common::Home as CliHome;

/// `amos add/supersede/update/search/list/timeline` with valid time, as a
/// user types them, and bad input refused with nothing changed.
#[test]
fn the_cli_speaks_valid_time_and_refuses_bad_times() {
    let h = CliHome::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "eve"]);
    let old = h
        .ok(&[
            "add",
            "the deploy port is 8080",
            "--as",
            "alice",
            "--share",
            "team:apollo",
            "--valid-from",
            "2026-01-01",
        ])
        .stdout
        .trim()
        .to_owned();
    let new = h
        .ok(&[
            "supersede",
            &old,
            "the deploy port is 9090",
            "--as",
            "alice",
            "--valid-from",
            "2026-06-01",
        ])
        .stdout
        .trim()
        .to_owned();
    // The new memory took the old one's grants (alice owns it).
    assert_eq!(
        h.json(&["get", &new, "--as", "bob"])["visibility"],
        serde_json::json!(["team:apollo"])
    );
    let at = |when: &str| h.search_ids_with("bob", "deploy port", &["--valid-at", when]);
    assert_eq!(at("2025-12-31"), Vec::<String>::new());
    assert_eq!(at("2026-03-01"), vec![old.clone()]);
    assert_eq!(at("2026-06-01"), vec![new.clone()]);
    // Today: both, the replaced one down-weighted and explained.
    let hits = h.json(&["search", "deploy port", "--as", "bob", "--explain"]);
    let hits = hits["hits"].as_array().unwrap();
    assert_eq!(hits[0]["id"], new.as_str());
    assert_eq!(hits[1]["id"], old.as_str());
    assert_eq!(hits[1]["explain"]["superseded_by"], new.as_str());
    let text = h
        .ok(&["search", "deploy port", "--as", "bob", "--explain"])
        .stdout;
    assert!(
        text.contains(&format!("superseded 0.5 (by {new})")),
        "{text}"
    );
    // list: valid-time fields, and --since/--until on the start.
    let listed = h.json(&["list", "--as", "bob", "--until", "2026-02-01"]);
    let listed = listed["memories"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], old.as_str());
    assert_eq!(listed[0]["valid_from"], "2026-01-01T00:00:00.000Z");
    assert_eq!(listed[0]["valid_until"], "2026-06-01T00:00:00.000Z");
    assert_eq!(listed[0]["superseded_by"], new.as_str());
    let since = h.json(&["list", "--as", "bob", "--since", "2026-05-01"]);
    assert_eq!(since["memories"].as_array().unwrap().len(), 1);
    // The timeline, text and JSON.
    let tl = h.ok(&["timeline", "--as", "bob"]).stdout;
    let lines: Vec<&str> = tl.lines().collect();
    assert_eq!(lines.len(), 3, "{tl}");
    assert!(lines[0].starts_with("2026-01-01T00:00:00.000Z  starts") && lines[0].contains(&old));
    assert!(lines[2].contains("superseded") && lines[2].contains(&format!("(by {new})")));
    let tl = h.json(&["timeline", "--as", "eve"]);
    assert_eq!(tl["events"], serde_json::json!([]), "eve sees none of it");
    // update --valid-to alone ends the new one.
    h.ok(&["update", &new, "--as", "alice", "--valid-to", "2026-09-01"]);
    assert_eq!(at("2026-10-01"), Vec::<String>::new());
    assert_eq!(
        h.json(&["get", &new, "--as", "bob"])["content"],
        "the deploy port is 9090"
    );

    // Bad input: one line, exit 2, nothing changed.
    let before = h.fingerprint();
    for args in [
        vec!["search", "deploy", "--as", "bob", "--valid-at", "someday"],
        vec![
            "list",
            "--as",
            "bob",
            "--since",
            "2026-05-01",
            "--until",
            "2026-04-01",
        ],
        vec![
            "add",
            "x",
            "--as",
            "alice",
            "--valid-from",
            "2026-03-02",
            "--valid-to",
            "2026-03-01",
        ],
        vec!["add", "x", "--as", "alice", "--valid-to", "2020-01-01"],
        vec!["add", "x", "--as", "alice", "--supersedes", "not-an-id"],
        vec!["update", &new, "--as", "alice", "--valid-to", "2026-05-01"],
        vec!["update", &new, "--as", "alice"],
        vec!["timeline", "--as", "bob", "--scope", "teem:x"],
    ] {
        let r = h.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stderr.trim().lines().count(), 1, "{args:?}: {r:?}");
    }
    // Replacing a memory one cannot see: as missing as any other.
    let private = h.add("alice", "alice's private port note", &[]);
    let r = h.run(&["supersede", &private, "bob's take", "--as", "bob"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no such memory"), "{r:?}");
    let r = h.run(&["add", "bob's take", "--as", "bob", "--supersedes", &private]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(
        h.fingerprint()["memories"],
        before["memories"].as_u64().unwrap() + 1
    );
}

/// `--known-at`: an edited memory reads as it stood then, and is found by
/// the words it had then (the index holds only today's text).
#[test]
fn known_at_reads_an_edited_memory_as_it_stood() {
    let h = CliHome::apollo();
    let id = h.add("alice", "the cache is redis", &[]);
    let created = h.json(&["get", &id, "--as", "alice"])["created"]
        .as_str()
        .unwrap()
        .to_owned();
    h.ok(&["update", &id, "the cache is memcached", "--as", "alice"]);
    assert_eq!(h.search_ids("alice", "redis", 5), Vec::<String>::new());
    assert_eq!(
        h.search_ids_with("alice", "redis", &["--known-at", &created]),
        vec![id.clone()]
    );
    assert_eq!(
        h.search_ids_with("alice", "memcached", &["--known-at", &created]),
        Vec::<String>::new()
    );
    let then = h.json(&["list", "--as", "alice", "--known-at", &created]);
    assert_eq!(then["memories"][0]["content"], "the cache is redis");
    let now = h.json(&["list", "--as", "alice", "--known-at", "now"]);
    assert_eq!(now["memories"][0]["content"], "the cache is memcached");
    // Before it was made, it was not on record.
    let before = h.json(&["list", "--as", "alice", "--known-at", "2020-01-01"]);
    assert_eq!(before["memories"], serde_json::json!([]));
    // A forget is never undone by looking back.
    h.ok(&["forget", &id, "--as", "alice"]);
    let then = h.json(&["list", "--as", "alice", "--known-at", &created]);
    assert_eq!(then["memories"], serde_json::json!([]));
    assert_eq!(
        h.search_ids_with("alice", "redis", &["--known-at", &created]),
        Vec::<String>::new()
    );
}
