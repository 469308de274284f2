//! Nothing a requester cannot see moves what it gets (docs/design.md §9,
//! "Statistics"): every score, rank and count a recall returns is a function
//! of the requester's visible memories alone.
//!
//! The property runs on the real store through the library (a fixed clock,
//! so a score is comparable bit for bit): a requester's searches and packs
//! in every mode, before and after other agents add, expire, forget and link
//! memories it cannot see, must render to the same JSON. The corpora are
//! small, so the vector search scores every allowed vector by its row and
//! its answer is exact: the semantic half must agree bit for bit too.
//! The reproduction from the security review then runs through the real
//! binary (CLI) and MCP.

use std::sync::Arc;

use crate::common::Home;
use amos_node::clock::FixedClock;
use amos_node::front::{hit_json, pack_json};
use amos_node::recall::PackOptions;
use amos_node::recall::{RecallMode, RecallOptions};
use amos_node::{NewMemory, Node};
use amos_protocol::Scope;
use proptest::prelude::*;
use serde_json::{Value, json};

const T0: u64 = 1_780_000_000_000;
/// Searches run here: ten minutes on, past every hidden expiry.
const T1: u64 = T0 + 600_000;

const WORDS: &[&str] = &[
    "zebra", "kiwi", "project", "notes", "payroll", "badge", "deploy", "budget", "the", "to",
    "server", "churn",
];

fn open_at(h: &Home, now_ms: u64) -> Node {
    Node::open_with_clock(
        &amos_node::Home::new(h.path()),
        Arc::new(FixedClock(now_ms)),
    )
    .expect("open node")
}

fn memory(words: &[usize], share: &[&str]) -> NewMemory {
    let text: Vec<&str> = words.iter().map(|w| WORDS[*w % WORDS.len()]).collect();
    let mut m = NewMemory::new(text.join(" "));
    m.share = share
        .iter()
        .map(|s| s.parse::<Scope>().expect("scope"))
        .collect();
    m
}

/// What bob gets for each query in every mode, as the front ends render it.
fn what_bob_gets(h: &Home, queries: &[Vec<usize>]) -> Vec<Value> {
    let mut node = open_at(h, T1);
    let bob = node.requester("bob").expect("bob");
    let mut out = Vec::new();
    for q in queries {
        let query: Vec<&str> = q.iter().map(|w| WORDS[*w % WORDS.len()]).collect();
        let query = query.join(" ");
        for mode in [
            RecallMode::Lexical,
            RecallMode::Hybrid,
            RecallMode::Semantic,
        ] {
            let recall = RecallOptions {
                mode,
                note_recall: false,
                ..RecallOptions::top(8)
            };
            let hits = node.search_with(&bob, &query, &recall).expect("search");
            let pack = node
                .pack_with(
                    &bob,
                    &query,
                    &PackOptions {
                        recall,
                        ..PackOptions::new(60)
                    },
                )
                .expect("pack");
            out.push(json!({
                "query": query,
                "mode": format!("{mode:?}"),
                "hits": hits.iter().map(hit_json).collect::<Vec<_>>(),
                "pack": pack_json(&pack, true),
            }));
        }
    }
    out
}

/// A home where bob sees his own memories, team `red`'s and global ones.
fn mesh_of_three() -> Home {
    let h = Home::new();
    let mut node = open_at(&h, T0);
    node.team_create("red", None).expect("red");
    node.team_create("blue", None).expect("blue");
    node.agent_add("bob", "agent", &["red".into()])
        .expect("bob");
    node.agent_add("alice", "agent", &["red".into(), "blue".into()])
        .expect("alice");
    node.agent_add("carol", "agent", &["blue".into()])
        .expect("carol");
    h
}

/// Who writes a visible memory, and where.
const SEEN: &[(&str, &[&str])] = &[
    ("bob", &[]),
    ("alice", &["team:red"]),
    ("carol", &["global"]),
];

/// The hidden changes: alice's private memory, blue's, red memories that
/// expired by `T1` or were forgotten, and links from hidden memories to
/// visible ones.
#[derive(Debug, Clone)]
enum Hidden {
    Private(Vec<usize>),
    OtherTeam(Vec<usize>),
    Expired(Vec<usize>),
    Forgotten(Vec<usize>),
    /// Alice's private memory, linked to the visible memory at this index.
    LinkedTo(Vec<usize>, usize),
}

fn words() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..WORDS.len(), 1..7)
}

fn hidden() -> impl Strategy<Value = Hidden> {
    prop_oneof![
        words().prop_map(Hidden::Private),
        words().prop_map(Hidden::OtherTeam),
        words().prop_map(Hidden::Expired),
        words().prop_map(Hidden::Forgotten),
        (words(), 0..64usize).prop_map(|(w, i)| Hidden::LinkedTo(w, i)),
    ]
}

fn apply(h: &Home, seen: &[String], change: &Hidden) {
    let mut node = open_at(h, T0 + 1_000);
    let alice = node.requester("alice").expect("alice");
    let carol = node.requester("carol").expect("carol");
    match change {
        Hidden::Private(w) => {
            node.add(&alice, memory(w, &[])).expect("add");
        }
        Hidden::OtherTeam(w) => {
            node.add(&carol, memory(w, &["team:blue"])).expect("add");
        }
        Hidden::Expired(w) => {
            let mut m = memory(w, &["team:red"]);
            m.expires_ms = Some(T0 + 2_000);
            node.add(&alice, m).expect("add");
        }
        Hidden::Forgotten(w) => {
            let id = node.add(&alice, memory(w, &["team:red"])).expect("add");
            node.forget(&alice, &id.to_string()).expect("forget");
        }
        Hidden::LinkedTo(w, i) => {
            let id = node.add(&alice, memory(w, &[])).expect("add");
            let to = &seen[i % seen.len()];
            // Alice may link only what she can see; bob's private ones are
            // not hers to link, so such a change is just a private memory.
            let _ = node.link(&alice, &id.to_string(), to, None, 1.0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    /// Any change to memories bob cannot see leaves every score, rank and
    /// count bob gets bit for bit as it was, in every mode, for searches
    /// and packs.
    #[test]
    fn hidden_changes_move_no_score_rank_or_count(
        visible in prop::collection::vec((words(), 0..SEEN.len()), 2..10),
        changes in prop::collection::vec(hidden(), 1..8),
        queries in prop::collection::vec(prop::collection::vec(0..WORDS.len(), 1..4), 1..4),
    ) {
        let h = mesh_of_three();
        let mut seen = Vec::new();
        {
            let mut node = open_at(&h, T0);
            for (w, who) in &visible {
                let (agent, share) = SEEN[*who];
                let r = node.requester(agent).expect("requester");
                seen.push(node.add(&r, memory(w, share)).expect("add").to_string());
            }
        }
        let before = what_bob_gets(&h, &queries);
        for change in &changes {
            apply(&h, &seen, change);
        }
        let after = what_bob_gets(&h, &queries);
        prop_assert_eq!(before, after);
    }
}

// ------------------------------------------- the review's reproduction, by hand

/// bob's memories, then three private "zebra" memories of alice: the
/// review read "3 hidden, 11 in all" off the change in bob's BM25 score.
fn zebra_home() -> Home {
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    h.ok(&["agent", "add", "alice"]);
    h.add("bob", "project zebra notes", &[]);
    h.add("bob", "project kiwi notes", &[]);
    for i in 1..=6 {
        h.add("bob", &format!("filler note number {i} about apples"), &[]);
    }
    h
}

/// Each hit's id and BM25, as `amos --json search … --mode lexical` prints it.
fn cli_bm25(h: &Home, query: &str) -> Vec<(String, f64)> {
    h.json(&["search", query, "--as", "bob", "--mode", "lexical"])["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| {
            (
                hit["id"].as_str().expect("id").to_owned(),
                hit["explain"]["bm25"].as_f64().expect("bm25"),
            )
        })
        .collect()
}

#[test]
fn cli_scores_ignore_another_agents_private_memories() {
    let h = zebra_home();
    let before = [cli_bm25(&h, "zebra"), cli_bm25(&h, "kiwi")];
    for i in 1..=3 {
        h.add("alice", &format!("zebra private {i}"), &[]);
    }
    let after = [cli_bm25(&h, "zebra"), cli_bm25(&h, "kiwi")];
    assert_eq!(before, after, "alice's private memories moved bob's scores");
    assert_eq!(before[0].len(), 1);
}

#[test]
fn mcp_scores_ignore_another_agents_private_memories() {
    let h = zebra_home();
    // The default mode's scores include freshness, which moves with the
    // clock between two calls: compare what the indexes decide.
    let search = |h: &Home| -> Vec<Value> {
        let mut mcp = crate::mcp::Client::start(h, "bob");
        let found = mcp.ok("memory_search", json!({"query": "zebra kiwi"}));
        found["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| {
                json!({"id": h["id"], "bm25": h["explain"]["bm25"],
                    "lexical_rank": h["explain"]["lexical_rank"],
                    "semantic": h["explain"]["semantic"]})
            })
            .collect()
    };
    let before = search(&h);
    assert_eq!(before.len(), 2, "{before:?}");
    for i in 1..=3 {
        h.add("alice", &format!("zebra private {i}"), &[]);
    }
    assert_eq!(
        before,
        search(&h),
        "alice's private memories moved bob's scores"
    );
}

/// Expired memories still sit in both indexes (an expiry touches no row):
/// they must take no candidate place. Thirty expired team memories nearer
/// the query than anything bob sees would otherwise fill the vector
/// search's first candidates, push out the memory that matches bob's
/// question by meaning alone, and hand him the weaker word match instead.
#[test]
fn expired_memories_take_no_candidate_place() {
    let h = Home::new();
    {
        let mut node = open_at(&h, T0);
        node.team_create("red", None).expect("red");
        node.agent_add("bob", "agent", &["red".into()])
            .expect("bob");
        node.agent_add("alice", "agent", &["red".into()])
            .expect("alice");
        let bob = node.requester("bob").expect("bob");
        node.add(&bob, NewMemory::new("salary wages paycheck compensation"))
            .expect("add");
        node.add(
            &bob,
            NewMemory::new("payroll zebra giraffe volcano kiwi tractor umbrella"),
        )
        .expect("add");
    }
    let top = |h: &Home| -> Vec<Value> {
        let mut node = open_at(h, T1);
        let bob = node.requester("bob").expect("bob");
        let opts = RecallOptions {
            note_recall: false,
            ..RecallOptions::top(1)
        };
        node.search_with(&bob, "payroll", &opts)
            .expect("search")
            .iter()
            .map(hit_json)
            .collect()
    };
    let before = top(&h);
    assert_eq!(
        before[0]["content"], "salary wages paycheck compensation",
        "the scenario needs the meaning-only match first (pick other texts if the model changed)"
    );
    {
        let mut node = open_at(&h, T0 + 1_000);
        let alice = node.requester("alice").expect("alice");
        for i in 0..30 {
            let mut m = memory(&[], &["team:red"]);
            m.text = format!("payroll payroll {i}");
            m.expires_ms = Some(T0 + 2_000);
            node.add(&alice, m).expect("add");
        }
    }
    assert_eq!(before, top(&h), "expired memories moved bob's answer");
}

/// Each row of a console memories page: its id and the score cell (the
/// table's last cell on a search page).
fn console_rows(page: &str) -> Vec<(String, String)> {
    page.split("<tr data-id=\"")
        .skip(1)
        .map(|row| {
            let row = &row[..row.find("</tr>").expect("row end")];
            let id = row[..row.find('"').expect("id end")].to_owned();
            let last = row.rfind("<td>").expect("a cell") + "<td>".len();
            let score =
                row[last..row[last..].find("</td>").map_or(row.len(), |e| last + e)].to_owned();
            (id, score)
        })
        .collect()
}

#[test]
fn console_scores_ignore_another_agents_private_memories() {
    let h = zebra_home();
    let c = crate::common::console::Console::start(h.path());
    let before = c.get("/memories?as=bob&q=zebra+kiwi");
    assert_eq!(before.status, 200, "{before:?}");
    let before = console_rows(&before.body);
    assert_eq!(before.len(), 2, "{before:?}");
    for i in 1..=3 {
        h.add("alice", &format!("zebra private {i}"), &[]);
    }
    let after = c.get("/memories?as=bob&q=zebra+kiwi");
    assert_eq!(
        before,
        console_rows(&after.body),
        "alice's private memories moved bob's scores"
    );
}
