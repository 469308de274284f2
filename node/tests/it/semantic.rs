//! Semantic and hybrid recall (docs/recall.md, "Modes"): the gate holds for
//! semantic candidates in every mode, through the CLI and MCP; the vector
//! index is disposable (deleted, it is rebuilt and answers the same); the
//! built-in model needs no network; the approximate path past the
//! rescoring bound (sign codes choose what is scored) honours the scope
//! filter.

use std::collections::HashSet;
use std::process::Command;

use amos_embed::{StaticModel, cosine};
use amos_node::recall::{RecallMode, RecallOptions};
use amos_node::{NewMemory, Node};
use amos_protocol::Scope;
use serde_json::{Value, json};

use crate::common::Home;

const MODES: [&str; 3] = ["hybrid", "lexical", "semantic"];

const QUERY: &str = "where are the database passwords kept";

/// Shared with everyone: a spread of topics, one of them close to the query.
const VISIBLE: &[&str] = &[
    "Rotate API keys every 90 days with the rotation job",
    "Deploys go out through the release pipeline on weekdays",
    "The on-call engineer is paged when the error budget burns",
    "Database backups run nightly and are kept for thirty days",
    "Frontend builds use the shared design system components",
];

/// Nearest the query in words and in meaning; only alice may see it.
const HIDDEN: &str = "The database passwords are kept in the vault under secret/db";

/// `amos --json search` as `agent` in `mode`: ids and scores, best first.
fn search(h: &Home, agent: &str, mode: &str, query: &str) -> Vec<(String, f64)> {
    h.json(&["search", query, "--as", agent, "--mode", mode, "-k", "10"])["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|x| {
            (
                x["id"].as_str().expect("id").to_owned(),
                x["score"].as_f64().expect("score"),
            )
        })
        .collect()
}

fn ids(hits: &[(String, f64)]) -> Vec<String> {
    hits.iter().map(|h| h.0.clone()).collect()
}

fn gate_home() -> (Home, Vec<String>) {
    let h = Home::new();
    for a in ["alice", "bob"] {
        h.ok(&["agent", "add", a]);
    }
    let visible = VISIBLE
        .iter()
        .map(|t| h.add("alice", t, &["global"]))
        .collect();
    (h, visible)
}

/// The attack: a memory bob may not see is the nearest to his question, in
/// words and in meaning. In every mode it never appears for him, and his
/// answer — which memories, in which order, with which scores — is exactly
/// the answer he gets once it is gone. For alice (who may see it) it ranks
/// first, so the test has teeth. MCP answers bob as the CLI does.
#[test]
fn a_hidden_memory_nearest_the_query_never_appears_nor_moves_a_rank() {
    let (h, visible) = gate_home();
    let hidden = h.add("alice", HIDDEN, &[]);
    let team_hidden = {
        h.ok(&["team", "create", "secops"]);
        h.ok(&["team", "add", "secops", "alice"]);
        h.add("alice", HIDDEN, &["team:secops"])
    };
    for mode in MODES {
        let top = search(&h, "alice", mode, QUERY);
        assert!(
            top[..2].iter().any(|(id, _)| *id == hidden),
            "{mode}: alice's nearest memory should lead her results: {top:?}"
        );
    }
    let semantic_alice = h.json(&[
        "search",
        QUERY,
        "--as",
        "alice",
        "--mode",
        "semantic",
        "--explain",
    ]);
    let cos: Vec<f64> = semantic_alice["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["explain"]["semantic"].as_f64().unwrap())
        .collect();
    assert!(
        cos[0] > cos[2..].iter().copied().fold(f64::MIN, f64::max),
        "the hidden memory is more similar than every visible one: {cos:?}"
    );

    let mut with_hidden = Vec::new();
    for mode in MODES {
        let bob = search(&h, "bob", mode, QUERY);
        assert!(!bob.is_empty(), "{mode}: bob sees shared memories");
        for (id, _) in &bob {
            assert!(id != &hidden && id != &team_hidden, "{mode}: leaked {id}");
            assert!(visible.contains(id), "{mode}: {id} is not a shared memory");
        }
        with_hidden.push(bob);
    }

    // MCP: the same answers, and nothing hidden.
    let mut mcp = crate::mcp::Client::start(&h, "bob");
    for (mode, cli) in MODES.iter().zip(&with_hidden) {
        let r = mcp.ok("memory_search", json!({"query": QUERY, "mode": mode}));
        let got: Vec<String> = r["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(got, ids(cli), "{mode}: MCP answers as the CLI");
    }
    drop(mcp);

    // Gone: bob's answers keep their order in every mode; by meaning alone
    // (a cosine owes nothing to other documents) not even a score moves.
    // (BM25's corpus statistics count every live document, so lexical
    // scores may shift by the statistics of the forgotten ones.)
    h.ok(&["forget", &hidden, "--as", "alice"]);
    h.ok(&["forget", &team_hidden, "--as", "alice"]);
    for (mode, before) in MODES.iter().zip(&with_hidden) {
        let after = search(&h, "bob", mode, QUERY);
        assert_eq!(ids(&after), ids(before), "{mode}: ranks moved");
        if *mode == "semantic" {
            assert_eq!(&after, before, "{mode}: scores moved");
        }
    }
}

/// When the nearest vectors all fall to a filter after the gate (here
/// `--valid-at`: they ended days ago), the semantic search widens until it
/// finds what is valid, as the lexical one does.
#[test]
fn a_semantic_search_widens_past_candidates_a_filter_drops() {
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    for i in 0..30 {
        h.ok(&[
            "add",
            &format!("The database password {i} is kept in the vault"),
            "--as",
            "bob",
            "--valid-from",
            "-10d",
            "--valid-to",
            "-5d",
        ]);
    }
    let valid = h.add(
        "bob",
        "Credentials for the staging server live with the platform team",
        &[],
    );
    let hits = h.json(&[
        "search",
        "where is the database password kept",
        "--as",
        "bob",
        "--mode",
        "semantic",
        "--valid-at",
        "now",
        "-k",
        "5",
    ])["hits"]
        .clone();
    let ids: Vec<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![valid.as_str()], "{hits}");
}

/// A bad mode or model is one line on stderr, exit 2, nothing printed.
#[test]
fn a_bad_mode_or_model_is_refused() {
    let (h, _) = gate_home();
    let r = h.run(&["search", QUERY, "--as", "bob", "--mode", "fuzzy"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let r = h.run(&[
        "--model",
        dir.path().to_str().unwrap(),
        "search",
        QUERY,
        "--as",
        "bob",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
    assert_eq!(r.stderr.trim().lines().count(), 1, "{r:?}");
    assert!(r.stderr.contains("model"), "{r:?}");
    // Lexical recall does not need the model at all.
    let r = h.run(&[
        "--model",
        dir.path().to_str().unwrap(),
        "search",
        "backups",
        "--as",
        "bob",
        "--mode",
        "lexical",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut mcp = crate::mcp::Client::start(&h, "bob");
    let r = mcp.call("memory_search", json!({"query": QUERY, "mode": "fuzzy"}));
    assert_eq!(r["isError"], true, "{r}");
}

/// The vector index is disposable: deleted with the full-text index, or
/// torn, it is rebuilt by the next search (the encoder's vectors by a
/// catch-up), which answers exactly as before (ids, order and scores, in
/// every mode) and writes the same file; `amos index rebuild` does the same.
#[test]
fn deleted_indexes_are_rebuilt_and_answer_the_same() {
    let (h, _) = gate_home();
    h.add("alice", HIDDEN, &["global"]);
    let edited = h.add(
        "alice",
        "Staging credentials are rotated monthly",
        &["global"],
    );
    h.ok(&[
        "update",
        &edited,
        "Staging passwords are rotated monthly by the platform team",
        "--as",
        "alice",
    ]);
    // The update left its memory pending for the encoder: encode it, so
    // that `before` is the answer of a caught-up index.
    h.ok(&["index", "catch-up"]);
    let before: Vec<_> = MODES.iter().map(|m| search(&h, "bob", m, QUERY)).collect();
    assert!(h.path().join("vectors").is_dir());
    assert!(
        ids(&before[2]).contains(&edited),
        "an update is found by meaning: {:?}",
        before[2]
    );
    std::fs::remove_dir_all(h.path().join("index")).unwrap();
    std::fs::remove_dir_all(h.path().join("vectors")).unwrap();
    // The encoder's vectors come back by a catch-up (a search meanwhile
    // finds the memories by their static vectors, docs/recall.md).
    let caught = h.json(&["index", "catch-up"]);
    assert!(caught["encoded"].as_u64().unwrap() >= 7, "{caught}");
    let after: Vec<_> = MODES.iter().map(|m| search(&h, "bob", m, QUERY)).collect();
    same(&after, &before);
    // A torn file (a crash mid-write without fsync) is rebuilt, not trusted.
    let file = h.path().join("vectors").join("index.amv");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let torn: Vec<_> = MODES.iter().map(|m| search(&h, "bob", m, QUERY)).collect();
    same(&torn, &before);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        bytes,
        "rewritten byte for byte"
    );
    let r = h.json(&["index", "rebuild"]);
    assert!(r["vectors"].as_u64().unwrap() >= 7, "{r}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        bytes,
        "a rebuild writes the same file"
    );
    h.ok(&["index", "catch-up"]);
    let again: Vec<_> = MODES.iter().map(|m| search(&h, "bob", m, QUERY)).collect();
    same(&again, &before);
}

/// The same ids in the same order, with the same scores to 1e-5: the
/// encoder's batched and single passes multiply in different orders, so a
/// memory encoded in a batch may differ from itself encoded alone in the
/// last float bits.
fn same(a: &[Vec<(String, f64)>], b: &[Vec<(String, f64)>]) {
    let ids = |v: &[Vec<(String, f64)>]| -> Vec<Vec<String>> {
        v.iter()
            .map(|l| l.iter().map(|x| x.0.clone()).collect())
            .collect()
    };
    assert_eq!(ids(a), ids(b));
    for (la, lb) in a.iter().zip(b) {
        for (x, y) in la.iter().zip(lb) {
            assert!((x.1 - y.1).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }
}

/// The built-in model loads with no network at all: a search by meaning in
/// a network namespace of its own (no interfaces but a downed loopback)
/// finds a memory that shares no word with the query.
#[test]
fn the_built_in_model_needs_no_network() {
    let unshare = Command::new("unshare").args(["-n", "true"]).status();
    if !unshare.is_ok_and(|s| s.success()) {
        eprintln!("SKIP the_built_in_model_needs_no_network: `unshare -n` is not available here");
        return;
    }
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    let vault = h.add(
        "bob",
        "Secrets live in Vault; never put credentials in environment files",
        &[],
    );
    h.add(
        "bob",
        "Lunch is ordered every Friday from the Thai place",
        &[],
    );
    let out = Command::new("unshare")
        .args(["-n", "--"])
        .arg(crate::common::amos_bin())
        .args(["--home", h.path().to_str().unwrap(), "--json", "search"])
        .args([
            "where are passwords and keys stored",
            "--as",
            "bob",
            "--mode",
            "semantic",
        ])
        .env_remove("AMOS_MODEL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hits"][0]["id"], vault.as_str(), "{v}");
}

/// Past the rescoring bound (bob's 2,100 visible vectors are more than the
/// 256 scored by their rows) the sign codes choose the candidates, and the
/// scope filter still holds: bob sees none of the 300 private memories
/// placed nearer his question, and the top 10 are (nearly) the exact top 10
/// over what he may see. In-process, on the
/// real SQLite store.
#[test]
fn nearest_vectors_past_the_exact_threshold_honour_the_scope() {
    let h = Home::new();
    h.ok(&["agent", "add", "alice"]);
    h.ok(&["agent", "add", "bob"]);
    let home = amos_node::Home::new(h.path());
    let mut node = Node::open(&home).unwrap();
    let alice = node.requester("alice").unwrap();
    let bob = node.requester("bob").unwrap();
    let topics = [
        "deploy",
        "backup",
        "password",
        "alert",
        "invoice",
        "review",
        "cache",
        "login",
        "schema",
        "budget",
        "laptop",
        "holiday",
        "latency",
        "certificate",
        "queue",
    ];
    let mut shared = Vec::new();
    for i in 0..2100 {
        let t = topics[i % topics.len()];
        let u = topics[(i * 7 + 3) % topics.len()];
        let mut m = NewMemory::new(format!(
            "note {i} about the {t} and the {u} of service {}",
            i % 37
        ));
        m.share = vec![Scope::Global];
        shared.push(m);
    }
    let mut private = Vec::new();
    for i in 0..300 {
        private.push(NewMemory::new(format!(
            "the database password {i} is kept in the vault"
        )));
    }
    let texts: Vec<String> = shared.iter().map(|m| m.text.clone()).collect();
    let shared_ids = node
        .add_many(shared.into_iter().map(|m| (&alice, m)).collect())
        .unwrap();
    let private_ids: HashSet<_> = node
        .add_many(private.into_iter().map(|m| (&alice, m)).collect())
        .unwrap()
        .into_iter()
        .collect();
    let query = "where is the database password kept";
    let opts = RecallOptions {
        k: 10,
        mode: RecallMode::Semantic,
        note_recall: false,
        resonance: amos_node::recall::ResonanceConfig {
            seeds: 0,
            ..Default::default()
        },
        ..RecallOptions::default()
    };
    let hits = node.search_with(&bob, query, &opts).unwrap();
    assert_eq!(hits.len(), 10);
    for hit in &hits {
        assert!(
            !private_ids.contains(&hit.memory.id()),
            "leaked a private memory"
        );
    }
    // Alice's nearest are the private ones: they are nearer than any shared.
    let alice_hits = node.search_with(&alice, query, &opts).unwrap();
    assert!(private_ids.contains(&alice_hits[0].memory.id()));

    // The exact top 10 among bob's memories, by the same model. The
    // generated notes tie often, so a hit counts when it is as near as the
    // exact 10th (any of the tied ones is a right answer).
    let model = StaticModel::default_model();
    let q = model.embed(query);
    let cosine_of: std::collections::HashMap<_, f32> = shared_ids
        .iter()
        .zip(&texts)
        // What the index embeds: content, tags (none) and type.
        .map(|(id, t)| (*id, cosine(&model.embed(&format!("{t}  note")), &q)))
        .collect();
    let mut exact: Vec<f32> = cosine_of.values().copied().collect();
    exact.sort_by(|a, b| b.total_cmp(a));
    let tenth = exact[9];
    let found = hits
        .iter()
        .filter(|h| cosine_of[&h.memory.id()] >= tenth - 1e-4)
        .count();
    assert!(
        found >= 9,
        "the sign codes let {found} of the exact top 10 through"
    );
}
