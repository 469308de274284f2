//! The console dashboard's figures (`/` and `/api/dashboard?as=A`): for one
//! agent, how many memories it may see in all, per scope in force and per
//! type, how many of them were created and recalled on each of the last
//! days, the ones it recalls most; and beside them the node's own health —
//! index and encoder lag, and per peer its last session, whether the
//! digests agreed and the facts held back for it.
//!
//! Must never: count, name or show a memory the agent cannot see — every
//! memory figure is `crate::store::dashboard`'s, one aggregate over the
//! rows the read gate admits, and every memory shown went through the gate.
//! The node's health figures are the node's (what `amos status` and
//! `amos peers list` show the operator), never derived from memory rows.

use std::collections::BTreeMap;

use amos_acl::AuthorizedScopes;
use serde::Serialize;

use crate::api::node::Node;
use crate::clock::rfc3339;
use crate::error::{NodeError, Result};
use crate::store::dashboard::{self, DAY_MS};

/// Days of activity the dashboard shows by default.
pub const DASHBOARD_DAYS: u64 = 14;
/// Most-recalled memories it lists.
pub const MOST_RECALLED: usize = 10;

/// One day of activity over the memories the agent may see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayActivity {
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// Memories created that day.
    pub writes: u64,
    /// Recalls noted that day (a memory is noted at most once an hour).
    pub recalls: u64,
}

/// A memory the agent recalls often.
#[derive(Debug, Clone, Serialize)]
pub struct Recalled {
    /// Its id.
    pub id: String,
    /// Its text.
    pub content: String,
    /// Recalls noted on this node (local-only).
    pub recalls: u64,
}

/// A peer's sync health.
#[derive(Debug, Clone, Serialize)]
pub struct PeerHealth {
    /// The peer's NodeId (hex).
    pub node_id: String,
    /// The name it is registered by here.
    pub name: String,
    /// When its last session ended (RFC 3339; `None`: never).
    pub last_sync: Option<String>,
    /// How it ended (`ok`, `unreachable`, …; `None`: never).
    pub result: Option<String>,
    /// `agree`, `disagree` or `unknown` (never compared): the peer's
    /// session digest against ours over the scopes it gives us.
    pub digest: &'static str,
    /// Facts held back for it until its protocol has their feature.
    pub held_back: u64,
}

/// The node's own health, the same for every agent: what `amos status`
/// and `amos peers list` show the operator.
#[derive(Debug, Clone, Serialize)]
pub struct NodeHealth {
    /// Memory changes the full-text index has yet to catch up.
    pub index_lag: i64,
    /// Memories the sentence encoder has yet to encode (`None`: it is off).
    pub encoder_pending: Option<u64>,
    /// Each peer's sync health.
    pub peers: Vec<PeerHealth>,
}

/// The dashboard of one agent.
#[derive(Debug, Clone, Serialize)]
pub struct Dashboard {
    /// The agent whose gate every memory figure went through.
    pub agent: String,
    /// Memories it may see (archived ones included: the gate lets them
    /// through; recall leaves them out).
    pub visible: u64,
    /// Per scope in force (`private`: shared with no one; a memory shared
    /// with two scopes counts in both).
    pub by_scope: BTreeMap<String, u64>,
    /// Per memory type.
    pub by_type: BTreeMap<String, u64>,
    /// The days asked for, oldest first.
    pub per_day: Vec<DayActivity>,
    /// Most recalled first.
    pub most_recalled: Vec<Recalled>,
    /// The node's health beside them.
    #[serde(flatten)]
    pub health: NodeHealth,
}

impl Node {
    /// The dashboard of the agent `who` (an agent: the local admin has no
    /// dashboard), over the last `days` days (1 to 366).
    pub fn dashboard(&mut self, who: &AuthorizedScopes, days: u64) -> Result<Dashboard> {
        let agent = who
            .requester()
            .ok_or_else(|| NodeError::BadInput("the dashboard is an agent's: name one".into()))?
            .to_string();
        if !(1..=366).contains(&days) {
            return Err(NodeError::BadInput(format!(
                "days must be between 1 and 366, not {days}"
            )));
        }
        let now = self.now_ms();
        let (counts, days, recalled) = self.store.read(|r| {
            Ok((
                dashboard::visible_counts(r, who, now)?,
                dashboard::per_day(r, who, now, days)?,
                dashboard::most_recalled(r, who, now, MOST_RECALLED)?,
            ))
        })?;
        Ok(Dashboard {
            agent,
            visible: counts.total,
            // Shown as every front end shows a scope: its display name,
            // qualified only where two of one name are held.
            by_scope: counts
                .by_scope
                .into_iter()
                .map(|(k, n)| match k.parse::<amos_protocol::Scope>() {
                    Ok(scope) => (self.scope_label(&scope), n),
                    Err(_) => (k, n),
                })
                .collect(),
            by_type: counts.by_type.into_iter().collect(),
            per_day: days
                .into_iter()
                .map(|(day, writes, recalls)| DayActivity {
                    day: rfc3339(day * DAY_MS)[..10].to_owned(),
                    writes,
                    recalls,
                })
                .collect(),
            most_recalled: recalled
                .into_iter()
                .map(|(m, recalls)| Recalled {
                    id: m.id().to_string(),
                    content: m.content().to_owned(),
                    recalls,
                })
                .collect(),
            health: self.health()?,
        })
    }

    /// The node's [`NodeHealth`].
    pub fn health(&mut self) -> Result<NodeHealth> {
        let peers = self
            .peer_list()?
            .into_iter()
            .map(|p| PeerHealth {
                digest: match p.digest.as_ref().map(|d| d.agree) {
                    None => "unknown",
                    Some(true) => "agree",
                    Some(false) => "disagree",
                },
                last_sync: p.last_sync.map(rfc3339),
                result: p.last_result,
                held_back: p.held_back,
                node_id: p.node_id,
                name: p.name,
            })
            .collect();
        Ok(NodeHealth {
            index_lag: self.index_lag()?,
            encoder_pending: self.encoder_status()?.map(|e| e.progress.pending),
            peers,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use amos_protocol::{MemoryId, MemoryType, Scope};

    use crate::clock::MovingClock;
    use crate::recall::RecallOptions;
    use crate::{Home, NewMemory, Node};

    const T0: u64 = 1_780_000_000_000;

    /// The gate's own answer for `agent`: every memory ever made, read one
    /// by one through `Node::get`; counted as the dashboard counts.
    fn by_the_gate(
        node: &Node,
        agent: &str,
        made: &[MemoryId],
    ) -> (u64, BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let who = node.requester(agent).unwrap();
        let (mut total, mut scopes, mut types) = (0, BTreeMap::new(), BTreeMap::new());
        for id in made {
            let Ok(m) = node.gated(&who, &id.to_string()) else {
                continue;
            };
            total += 1;
            *types.entry(m.kind().as_str().to_owned()).or_insert(0) += 1;
            let granted: Vec<String> = m.effective().iter().map(|s| node.scope_label(s)).collect();
            if granted.is_empty() {
                *scopes.entry("private".to_owned()).or_insert(0) += 1;
            }
            for s in granted {
                *scopes.entry(s).or_insert(0) += 1;
            }
        }
        (total, scopes, types)
    }

    /// Every memory figure of every agent's dashboard is the gate's: the
    /// aggregate counts exactly the memories `get` lets the agent read —
    /// not another's private memory, not an expired, forgotten or
    /// project-only one it is not a member for — and the activity and
    /// most-recalled lists only count and name those.
    #[test]
    fn every_dashboard_figure_counts_only_what_the_gate_lets_through() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("home"));
        Node::init(&home, None).unwrap();
        let clock = Arc::new(MovingClock(T0.into()));
        let mut node = Node::open_with_clock(&home, clock.clone()).unwrap();
        node.team_create("apollo", None).unwrap();
        node.project_create("moon", "apollo", None).unwrap();
        for (a, teams) in [
            ("alice", vec!["apollo"]),
            ("bob", vec!["apollo"]),
            ("carol", vec![]),
        ] {
            let teams: Vec<String> = teams.into_iter().map(str::to_owned).collect();
            node.agent_add(a, "agent", &teams).unwrap();
        }
        node.project_member("moon", "alice", true).unwrap();
        let alice = node.requester("alice").unwrap();
        let carol = node.requester("carol").unwrap();
        let mut made = Vec::new();
        let mut add = |node: &mut Node, who, text: &str, share: Vec<Scope>, kind: &str| {
            let mut m = NewMemory::new(text);
            m.share = share;
            m.kind = MemoryType::parse(kind).unwrap();
            let id = node.add(who, m).unwrap();
            made.push(id);
            id
        };
        let team: Scope = "team:apollo".parse().unwrap();
        let shared = add(
            &mut node,
            &alice,
            "launch window tuesday",
            vec![team.clone()],
            "fact",
        );
        let private = add(
            &mut node,
            &alice,
            "alice keeps the launch codes",
            vec![],
            "note",
        );
        add(
            &mut node,
            &alice,
            "moon rover plan",
            vec!["project:moon".parse().unwrap()],
            "procedure",
        );
        add(
            &mut node,
            &carol,
            "carol plans the launch party",
            vec![],
            "note",
        );
        add(
            &mut node,
            &carol,
            "the launch is public",
            vec![Scope::Global],
            "fact",
        );
        let forgotten = add(
            &mut node,
            &alice,
            "launch draft",
            vec![team.clone()],
            "note",
        );
        node.forget(&alice, &forgotten.to_string()).unwrap();
        let mut brief = NewMemory::new("launch tent booked for today");
        brief.share = vec![team.clone()];
        brief.expires_ms = Some(T0 + 1_000);
        made.push(node.add(&alice, brief).unwrap());
        // Alice's recalls: her private memory among them; a day later, past
        // the expiry.
        let opts = RecallOptions::top(10);
        node.search_with(&alice, "launch", &opts).unwrap();
        clock.0.store(T0 + 86_400_000, Ordering::Relaxed);
        node.search_with(&alice, "launch", &opts).unwrap();

        for agent in ["alice", "bob", "carol"] {
            let who = node.requester(agent).unwrap();
            let d = node.dashboard(&who, 14).unwrap();
            let (total, scopes, types) = by_the_gate(&node, agent, &made);
            assert_eq!(d.visible, total, "{agent}");
            assert_eq!(d.by_scope, scopes, "{agent}");
            assert_eq!(d.by_type, types, "{agent}");
            assert_eq!(d.per_day.len(), 14);
            let writes: u64 = d.per_day.iter().map(|p| p.writes).sum();
            // Every memory was made on day T0; the expired one is gone.
            assert_eq!(writes, total, "{agent}");
            for r in &d.most_recalled {
                let id = r.id.parse::<MemoryId>().unwrap();
                assert!(
                    node.gated(&who, &id.to_string()).is_ok(),
                    "{agent}: {}",
                    r.content
                );
            }
            let recalls: u64 = d.per_day.iter().map(|p| p.recalls).sum();
            let listed: u64 = d.most_recalled.iter().map(|r| r.recalls).sum();
            assert_eq!(recalls, listed, "{agent}: per day and per memory agree");
        }
        let bob = node.requester("bob").unwrap();
        let d = node.dashboard(&bob, 14).unwrap();
        assert_eq!(d.visible, 2, "the team memory and carol's global one");
        assert!(d.most_recalled.iter().all(|r| r.id != private.to_string()));
        assert!(d.most_recalled.iter().any(|r| r.id == shared.to_string()));
        let a = node.dashboard(&alice, 14).unwrap();
        assert!(a.most_recalled.iter().any(|r| r.id == private.to_string()));
        assert!(
            a.per_day.iter().map(|p| p.recalls).sum::<u64>()
                > d.per_day.iter().map(|p| p.recalls).sum::<u64>()
        );
        assert_eq!(a.by_scope.get("project:moon"), Some(&1));
        assert_eq!(d.by_scope.get("project:moon"), None, "bob is not in moon");
        assert!(node.dashboard(&bob, 0).is_err());
    }
}

#[cfg(test)]
mod kept_figure_tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use amos_protocol::{MemoryType, Validity};

    use crate::clock::MovingClock;
    use crate::store::dashboard::{self, DAY_MS, scan};
    use crate::store::{figures, status};
    use crate::{Home, NewMemory, Node};

    use crate::api::node::TestRng;

    const AGENTS: [&str; 3] = ["carol", "dave", "erin"];

    /// The kept figures against the full scan, after `step`: the kept
    /// tables equal a recount of every row, `amos status`'s tally equals
    /// its scan, and every agent's counts and writes per day (over 60
    /// days) equal the aggregate over every row the gate admits.
    fn check(a: &Node, step: &str) {
        let now = a.now_ms();
        let (kept, recounted) = a.store.read(|r| figures::kept_and_recounted(r)).unwrap();
        assert_eq!(kept, recounted, "{step}: the kept tables");
        let (tally, scanned) = a
            .store
            .read(|r| Ok((status::memory_counts(r)?, status::memory_counts_scanned(r)?)))
            .unwrap();
        assert_eq!(tally, scanned, "{step}: the tally");
        for agent in AGENTS {
            let who = a.requester(agent).unwrap();
            let first = now / DAY_MS - 59;
            let (counts, full, days, full_writes, full_recalls) = a
                .store
                .read(|r| {
                    Ok((
                        dashboard::visible_counts(r, &who, now)?,
                        scan::visible_counts(r, &who, now)?,
                        dashboard::per_day(r, &who, now, 60)?,
                        scan::writes_per_day(r, &who, now, first)?,
                        scan::recalls_per_day(r, &who, now, first)?,
                    ))
                })
                .unwrap();
            assert_eq!(counts, full, "{step}: {agent}'s counts");
            let writes: Vec<(u64, u64)> = days
                .iter()
                .filter(|(_, w, _)| *w > 0)
                .map(|(d, w, _)| (*d, *w))
                .collect();
            assert_eq!(writes, full_writes, "{step}: {agent}'s writes per day");
            let recalls: Vec<(u64, u64)> = days
                .iter()
                .filter(|(_, _, n)| *n > 0)
                .map(|(d, _, n)| (*d, *n))
                .collect();
            assert_eq!(recalls, full_recalls, "{step}: {agent}'s recalls per day");
        }
    }

    /// The figures kept on write equal the full scan after every kind of
    /// change: local adds of every type, with and without an expiry,
    /// shares and revocations, tombstones, archiving and restoring, edits,
    /// supersessions, memberships (which move who sees what, not the kept
    /// rows), facts applied from a peer (new rows and changed ones), the
    /// peer's policy changing (its memories' standing re-judged), searches
    /// (recalls noted per day) and time passing expiries and days (old
    /// recall days dropped).
    #[test]
    fn kept_figures_equal_the_full_scan() {
        for seed in [11u64, 2026, 0x5eed_cafe] {
            one_run(seed, 80);
        }
    }

    /// A recall noted in the transaction that also changes the memory
    /// (before the change, or after it) counts once, under the standing
    /// the memory ends with; no front end does both in one transaction
    /// today, the keeper must not depend on it.
    #[test]
    fn a_recall_and_a_change_in_one_transaction_count_once() {
        let (_dir, _home, mut a, _) = crate::api::node::test_node("carol");
        for agent in ["dave", "erin"] {
            a.agent_add(agent, "agent", &[]).unwrap();
        }
        let who = a.requester("carol").unwrap();
        let ids: Vec<amos_protocol::MemoryId> = (0..2)
            .map(|i| a.add(&who, NewMemory::new(format!("note {i}"))).unwrap())
            .collect();
        let now = a.now_ms();
        a.store
            .write(|tx| {
                crate::store::memory::note_recalled(tx, &ids[..1], now)?;
                tx.set_archived(&ids[0], true)?;
                tx.set_archived(&ids[1], true)?;
                crate::store::memory::note_recalled(tx, &ids[1..], now)?;
                Ok(())
            })
            .unwrap();
        check(&a, "a recall and an archive in one transaction");
        let (kept, _) = a.store.read(|r| figures::kept_and_recounted(r)).unwrap();
        assert!(kept.iter().any(|k| k.starts_with("r|")), "{kept:?}");
    }

    fn one_run(seed: u64, steps: usize) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("a"));
        Node::init(&home, Some("a")).unwrap();
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let clock = Arc::new(MovingClock(start.into()));
        let mut a = Node::open_with_clock(&home, clock.clone()).unwrap();
        let home_b = Home::new(dir.path().join("b"));
        Node::init(&home_b, Some("b")).unwrap();
        let mut b = Node::open(&home_b).unwrap();
        for t in ["apollo", "zeus"] {
            a.team_create(t, None).unwrap();
        }
        a.agent_add("carol", "agent", &["apollo".into(), "zeus".into()])
            .unwrap();
        a.agent_add("dave", "agent", &["apollo".into()]).unwrap();
        a.agent_add("erin", "agent", &[]).unwrap();
        a.project_create("moon", "apollo", None).unwrap();
        a.project_member("moon", "carol", true).unwrap();
        b.agent_add("bob", "agent", &[]).unwrap();
        a.peer_add(&b.node_id().to_string(), None, "full").unwrap();
        b.peer_add(&a.node_id().to_string(), None, "full").unwrap();
        let shares: [&[&str]; 7] = [
            &[],
            &["team:apollo"],
            &["team:zeus"],
            &["global"],
            &["project:moon"],
            &["team:apollo", "team:zeus"],
            &["agent:erin"],
        ];
        let kinds = ["note", "fact", "decision", "procedure"];
        let scopes = ["team:apollo", "team:zeus", "global", "project:moon"];
        let mut rng = TestRng::new(seed);
        let mut mine: Vec<(String, String)> = Vec::new();
        let mut recalled: Vec<(String, String)> = Vec::new();
        let mut from_b: Vec<String> = Vec::new();
        let mut b_since = 0;
        check(&a, "the set-up");
        for step in 0..steps {
            let agent = AGENTS[rng.below(AGENTS.len())];
            let who = a.requester(agent).unwrap();
            let pick = |rng: &mut TestRng, v: &[(String, String)]| {
                let v = match rng.below(2) {
                    0 if !recalled.is_empty() => &recalled,
                    _ => v,
                };
                v.get(rng.below(v.len().max(1))).cloned()
            };
            let what = match rng.below(14) {
                12 => {
                    let opts = crate::recall::RecallOptions::top(6);
                    let words = ["note", "replaces", "edited", "from"];
                    let hits = a
                        .search_with(&who, words[rng.below(words.len())], &opts)
                        .unwrap();
                    // The next changes pick these often: a recalled
                    // memory's recalls move with its standing.
                    for h in hits {
                        let id = h.memory.id.to_string();
                        if let Some(m) = mine.iter().find(|(_, m)| *m == id) {
                            recalled.push(m.clone());
                        }
                    }
                    "a search (recalls noted)"
                }
                13 => {
                    // Far enough now and then to drop old recall days.
                    clock
                        .0
                        .fetch_add((20 + rng.below(30) as u64) * DAY_MS, Ordering::Relaxed);
                    "days passing"
                }
                0..=2 => {
                    let mut m = NewMemory::new(format!("note {step} of seed {seed}"));
                    m.share = shares[rng.below(shares.len())]
                        .iter()
                        .map(|s| s.parse().unwrap())
                        .collect();
                    m.kind = MemoryType::parse(kinds[rng.below(kinds.len())]).unwrap();
                    if rng.below(4) == 0 {
                        m.expires_ms = Some(a.now_ms() + 1 + rng.below(3) as u64 * DAY_MS / 2);
                    }
                    if let Ok(id) = a.add(&who, m) {
                        mine.push((agent.to_owned(), id.to_string()));
                    }
                    "an add"
                }
                3 => {
                    if let Some((owner, id)) = pick(&mut rng, &mine) {
                        let owner = a.requester(&owner).unwrap();
                        let scope = scopes[rng.below(scopes.len())];
                        let _ = a.set_grant(&owner, &id, scope, rng.below(2) == 0);
                    }
                    "a share or revocation"
                }
                4 => {
                    if let Some((owner, id)) = pick(&mut rng, &mine) {
                        let _ = a.forget(&a.requester(&owner).unwrap(), &id);
                    }
                    "a tombstone"
                }
                5 => {
                    if let Some((owner, id)) = pick(&mut rng, &mine) {
                        let owner = a.requester(&owner).unwrap();
                        let _ = a.set_archived(&owner, &id, rng.below(2) == 0);
                    }
                    "an archive or restore"
                }
                6 => {
                    if let Some((owner, id)) = pick(&mut rng, &mine) {
                        let _ = a.update(&a.requester(&owner).unwrap(), &id, "edited");
                    }
                    "an edit"
                }
                7 => {
                    if let Some((owner, id)) = pick(&mut rng, &mine) {
                        let o = a.requester(&owner).unwrap();
                        if let Ok(new) = a.supersede(
                            &o,
                            &id,
                            format!("replaces at {step}"),
                            None,
                            Validity::default(),
                        ) {
                            mine.push((owner, new.to_string()));
                        }
                    }
                    "a supersession"
                }
                8 => {
                    let agent = ["dave", "erin"][rng.below(2)];
                    let team = ["apollo", "zeus"][rng.below(2)];
                    let _ = a.team_member(team, agent, rng.below(3) != 0);
                    "a team membership"
                }
                9 => {
                    let bob = b.requester("bob").unwrap();
                    let mut m = NewMemory::new(format!("from b at step {step}"));
                    m.share = shares[rng.below(shares.len() - 1)]
                        .iter()
                        .map(|s| s.parse().unwrap())
                        .collect();
                    if let Ok(id) = b.add(&bob, m) {
                        from_b.push(id.to_string());
                    }
                    if rng.below(2) == 0
                        && let Some(id) = from_b.get(rng.below(from_b.len().max(1)))
                    {
                        let _ = b.forget(&bob, id);
                    }
                    b_since = crate::api::node::pass_facts(&b, &mut a, b_since);
                    "facts from b"
                }
                10 => {
                    let policy =
                        ["full", "team:apollo", "global", "team:zeus,global"][rng.below(4)];
                    a.peer_set_policy(&b.node_id().to_string(), policy).unwrap();
                    "b's policy changing"
                }
                _ => {
                    clock
                        .0
                        .fetch_add(1 + rng.below(3) as u64 * DAY_MS / 3, Ordering::Relaxed);
                    "time passing"
                }
            };
            check(&a, &format!("seed {seed}, step {step}: {what}"));
        }
    }
}
