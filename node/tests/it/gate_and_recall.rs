//! The gate (docs/design.md §5) and recall (§9), end to end: through the real
//! `amos` binary (one process per command, so every check is cross-process)
//! and through the library API (for injected clocks, long-lived nodes and
//! fast bulk loads).
//!
//! Every test here fails if the property it names breaks. Where an index must
//! be *stale* on purpose, a copy of the index directory taken earlier is put
//! back and made to claim it is current (its commit payload gets the store's
//! present watermark), so the next search trusts it and does not catch up.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::path::Path;
use std::sync::Arc;

use crate::common::{Home, Run};
use amos_node::clock::FixedClock;
use amos_node::recall::Hit;
use amos_node::{NewMemory, Node, NodeError};
use amos_protocol::{FactBody, Hlc, MemoryId, Scope, SignedFact};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

// ------------------------------------------------------------------ helpers

/// The library's view of a harness home.
fn lib_home(h: &Home) -> amos_node::Home {
    amos_node::Home::new(h.path())
}

fn open(h: &Home) -> Node {
    Node::open(&lib_home(h)).expect("open node")
}

fn open_at(h: &Home, now_ms: u64) -> Node {
    Node::open_with_clock(&lib_home(h), Arc::new(FixedClock(now_ms))).expect("open node")
}

fn new_mem(text: &str, share: &[&str]) -> NewMemory {
    let mut m = NewMemory::new(text);
    m.share = share
        .iter()
        .map(|s| s.parse::<Scope>().expect("scope"))
        .collect();
    m
}

/// A word probe through the library: lexical recall of `query`, top `k`
/// (hybrid recall, which also finds by meaning, is tested in `semantic.rs`).
fn probe(
    node: &mut Node,
    who: &amos_acl::AuthorizedScopes,
    query: &str,
    k: usize,
) -> amos_node::Result<Vec<Hit>> {
    let opts = amos_node::recall::RecallOptions {
        mode: amos_node::recall::RecallMode::Lexical,
        ..amos_node::recall::RecallOptions::top(k)
    };
    node.search_with(who, query, &opts)
}

fn hit_ids(hits: &[Hit]) -> Vec<String> {
    hits.iter().map(|h| h.memory.id().to_string()).collect()
}

fn set(ids: &[&String]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).clone()).collect()
}

fn to_set(ids: Vec<String>) -> BTreeSet<String> {
    ids.into_iter().collect()
}

/// Ids of `amos --json list --as AGENT`.
fn list_ids(h: &Home, agent: &str) -> BTreeSet<String> {
    h.json(&["list", "--as", agent, "--limit", "1000"])["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect()
}

fn search_set(h: &Home, agent: &str, q: &str) -> BTreeSet<String> {
    to_set(h.search_ids(agent, q, 100))
}

/// Require a refusal with `code` whose stderr mentions `needle`.
fn refused(r: &Run, code: i32, needle: &str) {
    assert_eq!(r.code, code, "expected exit {code}: {r:?}");
    assert!(
        r.stderr.contains(needle),
        "stderr should mention {needle:?}: {r:?}"
    );
    assert!(
        r.stdout.trim().is_empty(),
        "a refusal prints nothing on stdout: {r:?}"
    );
}

fn get_refused(h: &Home, agent: &str, id: &str) {
    refused(&h.run(&["get", id, "--as", agent]), 2, "no such memory");
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            fs::copy(e.path(), dst).expect("copy");
        }
    }
}

/// A copy of the home's index directory as it is now.
fn snapshot_index(h: &Home) -> tempfile::TempDir {
    let snap = tempfile::tempdir().expect("tempdir");
    copy_dir(&h.path().join("index"), &snap.path().join("index"));
    snap
}

/// Put an old index back and make it claim it has seen every change in the
/// store, so the next search uses it as it is (no catch-up).
fn install_stale_index(h: &Home, snap: &tempfile::TempDir) {
    let idx = h.path().join("index");
    fs::remove_dir_all(&idx).expect("rm index");
    copy_dir(&snap.path().join("index"), &idx);
    let st = h.json(&["status"]);
    let (epoch, seq) = (
        st["epoch"].as_str().expect("epoch"),
        st["seq"].as_i64().expect("seq"),
    );
    let meta_path = idx.join("meta.json");
    let mut meta: Value =
        serde_json::from_str(&fs::read_to_string(&meta_path).expect("meta")).expect("meta json");
    meta["payload"] = Value::String(format!("amos-index v1 {epoch} {seq}"));
    fs::write(&meta_path, meta.to_string()).expect("write meta");
    assert_eq!(
        h.json(&["status"])["index_lag"],
        0,
        "the stale index must claim to be current, or the test proves nothing"
    );
}

fn ro_db(h: &Home) -> Connection {
    Connection::open_with_flags(h.path().join("amos.db"), OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open amos.db read-only")
}

/// Every (table, column) whose value, as text or bytes, contains `needle`.
fn db_mentions(h: &Home, needle: &str) -> Vec<String> {
    let conn = ro_db(h);
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("tables");
    assert!(tables.iter().any(|t| t == "memories"), "{tables:?}");
    let needle = needle.as_bytes();
    let mut found = Vec::new();
    for t in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{t}\""))
            .expect("select");
        let cols: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let mut rows = stmt.query([]).expect("rows");
        while let Some(row) = rows.next().expect("row") {
            for (i, c) in cols.iter().enumerate() {
                let bytes: &[u8] = match row.get_ref(i).expect("value") {
                    ValueRef::Text(b) | ValueRef::Blob(b) => b,
                    _ => continue,
                };
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(format!("{t}.{c}"));
                }
            }
        }
    }
    found
}

/// team apollo = alice, bob; carol and dave are in no team.
fn basic_org(h: &Home) {
    h.ok(&["team", "create", "apollo"]);
    h.ok(&["agent", "add", "alice", "--team", "apollo"]);
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "carol"]);
    h.ok(&["agent", "add", "dave"]);
}

/// A memory made by a node whose clock read 2001, expiring a second later:
/// long expired by the time any `amos` process (system clock) reads it.
fn add_expired(h: &Home, agent: &str, text: &str, share: &[&str]) -> String {
    let t: u64 = 1_000_000_000_000;
    let mut node = open_at(h, t);
    let who = node.requester(agent).expect("requester");
    let mut m = new_mem(text, share);
    m.expires_ms = Some(t + 1_000);
    node.add(&who, m).expect("add").to_string()
}

fn add_expiring(h: &Home, agent: &str, text: &str, share: &str, expires: &str) -> String {
    h.json(&[
        "add",
        text,
        "--as",
        agent,
        "--share",
        share,
        "--expires",
        expires,
    ])["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

// ------------------------------------------------- invariant 1: rows, not index

/// The index is made to lie (an old copy that still lists revoked, forgotten
/// and archived memories under their old access terms, and claims to be
/// current). The gate re-reads every row from SQLite, so none of them comes
/// back.
#[test]
fn a_stale_index_never_brings_back_what_the_store_hides() {
    let h = Home::new();
    basic_org(&h);
    let kept = h.add("alice", "quokka kept for everyone", &["global"]);
    let unshared = h.add("alice", "quokka later unshared", &["global"]);
    let moved = h.add(
        "alice",
        "quokka moved from the team to carol",
        &["team:apollo"],
    );
    let forgotten = h.add("alice", "quokka later forgotten", &["global"]);
    let archived = h.add("alice", "quokka later archived", &["global"]);
    let all = set(&[&kept, &unshared, &moved, &forgotten, &archived]);
    assert_eq!(search_set(&h, "bob", "quokka"), all);
    let snap = snapshot_index(&h);

    h.ok(&["unshare", &unshared, "global", "--as", "alice"]);
    h.ok(&["share", &moved, "agent:carol", "--as", "alice"]);
    h.ok(&["unshare", &moved, "team:apollo", "--as", "alice"]);
    h.ok(&["forget", &forgotten, "--as", "alice"]);
    {
        let mut node = open(&h);
        let alice = node.requester("alice").expect("alice");
        assert!(node.set_archived(&alice, &archived, true).expect("archive"));
    }
    install_stale_index(&h, &snap);
    // `list`'s SQL pre-filter (the denormalised grant table) is made to lie too.
    {
        let conn = Connection::open(h.path().join("amos.db")).expect("open db");
        for id in [&unshared, &moved, &archived] {
            let mid: MemoryId = id.parse().expect("id");
            conn.execute(
                "INSERT OR IGNORE INTO memory_grants(memory, scope) VALUES (?1, 'global')",
                [&mid.0[..]],
            )
            .expect("insert");
        }
    }

    // The stale index still offers all five to bob; only `kept` survives the gate.
    assert_eq!(search_set(&h, "bob", "quokka"), set(&[&kept]));
    assert_eq!(list_ids(&h, "bob"), set(&[&kept]));
    assert_eq!(list_ids(&h, "dave"), set(&[&kept]));
    assert_eq!(search_set(&h, "dave", "quokka"), set(&[&kept]));
    assert_eq!(
        search_set(&h, "alice", "quokka"),
        set(&[&kept, &unshared, &moved])
    );
    let pack = h.json(&[
        "pack", "quokka", "--as", "bob", "--budget", "10000", "--report",
    ]);
    let packed: BTreeSet<String> = pack["report"]
        .as_array()
        .expect("report")
        .iter()
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(packed, set(&[&kept]), "{pack}");
    for id in [&unshared, &moved, &forgotten] {
        get_refused(&h, "bob", id);
    }
    get_refused(&h, "alice", &forgotten);
    // The stale index was really used: it still claimed to be current.
    assert_eq!(h.json(&["status"])["index_lag"], 0);
    // Rebuilt from the store, it agrees with the gate.
    h.ok(&["index", "rebuild"]);
    assert_eq!(search_set(&h, "bob", "quokka"), set(&[&kept]));
    assert_eq!(search_set(&h, "carol", "quokka"), set(&[&kept, &moved]));
}

/// Two long-lived nodes on one home: the first holds an index reader opened
/// before the second revoked and forgot memories (and brought the on-disk
/// index up to date itself). The first node's next query must not return them,
/// whether its reader reloads or (as before the index learnt to reload a
/// reader another process left behind) it still serves the old commit.
#[test]
fn an_index_held_open_across_changes_by_another_node_is_not_trusted() {
    let h = Home::new();
    basic_org(&h);
    let kept = h.add("alice", "wombat kept", &["team:apollo"]);
    let revoked = h.add("alice", "wombat revoked", &["team:apollo"]);
    let forgotten = h.add("alice", "wombat forgotten", &["global"]);

    let mut first = open(&h);
    let bob = first.requester("bob").expect("bob");
    let before = to_set(hit_ids(&first.search(&bob, "wombat", 10).expect("search")));
    assert_eq!(before, set(&[&kept, &revoked, &forgotten]));

    // `amos index rebuild` in another process, then the changes.
    h.ok(&["index", "rebuild"]);
    let mut second = open(&h);
    let alice = second.requester("alice").expect("alice");
    second
        .set_grant(&alice, &revoked, "team:apollo", false)
        .expect("unshare");
    second.forget(&alice, &forgotten).expect("forget");
    let bob2 = second.requester("bob").expect("bob");
    assert_eq!(
        hit_ids(&second.search(&bob2, "wombat", 10).expect("search")),
        vec![kept.clone()]
    );

    // `first` still holds its old reader; its gate is what decides.
    let after = hit_ids(&first.search(&bob, "wombat", 10).expect("search"));
    assert_eq!(after, vec![kept.clone()]);
    assert!(matches!(
        first.get(&bob, &revoked),
        Err(NodeError::NoSuchMemory(_))
    ));
    assert!(matches!(
        first.get(&bob, &forgotten),
        Err(NodeError::NoSuchMemory(_))
    ));
    // And via the CLI.
    assert_eq!(h.search_ids("bob", "wombat", 10), vec![kept]);
}

// -------------------------------------------- invariant 2: nothing invisible out

#[test]
fn nothing_invisible_reaches_search_pack_list_get_or_feedback() {
    let h = Home::new();
    basic_org(&h);
    h.ok(&["team", "create", "hermes"]);
    h.ok(&["team", "add", "hermes", "carol"]);
    h.ok(&["project", "create", "ui", "--team", "apollo"]);
    h.ok(&["project", "add", "ui", "alice"]);

    // Visible to bob.
    let v = [
        h.add("alice", "harbor vkiwione for the team", &["team:apollo"]),
        h.add("alice", "harbor vkiwitwo for bob", &["agent:bob"]),
        h.add("carol", "harbor vkiwithree for everyone", &["global"]),
        h.add("bob", "harbor vkiwifour of his own", &[]),
    ];
    // Invisible to bob; most match the query far better than the visible ones.
    let hot = "harbor harbor harbor harbor";
    let inv = [
        (
            h.add("alice", &format!("{hot} ikiwione private"), &[]),
            "ikiwione",
        ),
        (
            h.add("alice", &format!("{hot} ikiwitwo project"), &["project:ui"]),
            "ikiwitwo",
        ),
        (
            h.add(
                "carol",
                &format!("{hot} ikiwithree hermes"),
                &["team:hermes"],
            ),
            "ikiwithree",
        ),
        (
            h.add(
                "alice",
                &format!("{hot} ikiwifour for carol"),
                &["agent:carol"],
            ),
            "ikiwifour",
        ),
        (
            add_expired(
                &h,
                "alice",
                &format!("{hot} ikiwifive expired"),
                &["global"],
            ),
            "ikiwifive",
        ),
        (
            h.add("alice", &format!("{hot} ikiwisix forgotten"), &["global"]),
            "ikiwisix",
        ),
        (
            h.add("dave", &format!("{hot} ikiwiseven private"), &[]),
            "ikiwiseven",
        ),
    ];
    h.ok(&["forget", &inv[5].0, "--as", "alice"]);
    // Positive control: the hidden ones exist and match for their owners.
    assert!(h.search_ids("alice", "ikiwione", 5).contains(&inv[0].0));
    assert!(h.search_ids("carol", "ikiwithree", 5).contains(&inv[2].0));
    assert!(h.search_ids("carol", "ikiwifour", 5).contains(&inv[3].0));

    let visible: BTreeSet<String> = v.iter().cloned().collect();
    let mut out = String::new();

    let s = h.ok(&["--json", "search", "harbor", "--as", "bob", "-k", "100"]);
    assert_eq!(to_set(h.search_ids("bob", "harbor", 100)), visible);
    out += &s.stdout;
    out += &h
        .ok(&["search", "harbor", "--as", "bob", "-k", "100"])
        .stdout;

    for (id, word) in &inv {
        // By words, nothing; by meaning (hybrid, semantic) only memories bob
        // may see, however alike the hidden one is.
        for mode in ["lexical", "hybrid", "semantic"] {
            let r = h.ok(&["--json", "search", word, "--as", "bob", "--mode", mode]);
            let hits: BTreeSet<String> = r.json()["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .map(|x| x["id"].as_str().expect("id").to_owned())
                .collect();
            match mode {
                "lexical" => assert!(hits.is_empty(), "{word}: {r:?}"),
                _ => assert!(hits.is_subset(&visible), "{mode} {word}: {r:?}"),
            }
            out += &r.stdout;
        }
        let r = h.run(&["--json", "get", id, "--as", "bob"]);
        refused(&r, 2, "no such memory");
        assert!(!r.stderr.contains(word), "{r:?}");
        let r = h.run(&["feedback", id, "--helpful", "--as", "bob"]);
        refused(&r, 2, "no such memory");
        let r = h.run(&["link", &v[0], id, "--as", "bob"]);
        refused(&r, 2, "no such memory");
    }
    for id in &v {
        out += &h.ok(&["--json", "get", id, "--as", "bob"]).stdout;
    }

    // Packs, with a budget that holds everything and one that holds little.
    for budget in ["100000", "20"] {
        let r = h.ok(&[
            "--json", "pack", "harbor", "--as", "bob", "--budget", budget, "--report",
        ]);
        let p = r.json();
        let report = p["report"].as_array().expect("report");
        let reported: BTreeSet<String> = report
            .iter()
            .map(|d| d["id"].as_str().expect("id").to_owned())
            .collect();
        assert_eq!(
            reported, visible,
            "every report entry is a visible memory: {p}"
        );
        let items: BTreeSet<String> = p["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["id"].as_str().expect("id").to_owned())
            .collect();
        assert!(items.is_subset(&visible), "{p}");
        let counted: u64 = report
            .iter()
            .filter(|d| d["included"] == true)
            .map(|d| d["tokens"].as_u64().expect("tokens"))
            .sum();
        assert_eq!(
            p["tokens"].as_u64(),
            Some(counted),
            "tokens count only included items: {p}"
        );
        for d in report {
            let reason = d["reason"].as_str().expect("reason");
            for (id, _) in &inv {
                assert!(!reason.contains(id.as_str()), "{reason}");
            }
        }
        out += &r.stdout;
        out += &h
            .ok(&[
                "pack", "harbor", "--as", "bob", "--budget", budget, "--report",
            ])
            .stdout;
    }

    assert_eq!(list_ids(&h, "bob"), visible);
    out += &h
        .ok(&["--json", "list", "--as", "bob", "--limit", "1000"])
        .stdout;
    out += &h.ok(&["list", "--as", "bob", "--limit", "1000"]).stdout;

    for (id, word) in &inv {
        assert!(
            !out.contains(id.as_str()),
            "invisible id {id} leaked:\n{out}"
        );
        assert!(
            !out.contains(word),
            "invisible content {word} leaked:\n{out}"
        );
    }
    for w in ["vkiwione", "vkiwitwo", "vkiwithree", "vkiwifour"] {
        assert!(out.contains(w), "positive control: {w} should be shown");
    }
}

// ------------------------------------------------ invariant 3: links never bridge

#[test]
fn links_never_grant_visibility_and_cannot_be_made_through_the_invisible() {
    let h = Home::new();
    basic_org(&h);
    let a = h.add("alice", "lynx anchorword shared", &["global"]);
    let b = h.add("alice", "lynx bridgeword secret", &[]);
    let c = h.add("alice", "cheetah farword shared", &["global"]);
    h.ok(&["link", &a, &b, "--as", "alice"]);
    h.ok(&["link", &b, &c, "--as", "alice", "--relation", "related"]);

    let before = h.fingerprint();
    for (x, y) in [(&a, &b), (&b, &a), (&c, &b)] {
        let r = h.run(&["link", x, y, "--as", "bob"]);
        refused(&r, 2, "no such memory");
    }
    assert_eq!(h.fingerprint(), before, "a refused link changes nothing");
    assert_eq!(
        ro_db(&h)
            .query_row("SELECT count(*) FROM links", [], |r| r.get::<_, i64>(0))
            .expect("count"),
        2
    );

    // The owner's links make b visible to nobody else, and b does not bridge a and c.
    for agent in ["bob", "carol"] {
        assert_eq!(h.search_ids(agent, "lynx", 10), vec![a.clone()]);
        assert_eq!(h.search_ids(agent, "anchorword", 10), vec![a.clone()]);
        assert!(h.search_ids(agent, "bridgeword", 10).is_empty());
        get_refused(&h, agent, &b);
        assert_eq!(list_ids(&h, agent), set(&[&a, &c]));
    }
    // alice sees b, so for her resonance reaches c through it.
    assert_eq!(search_set(&h, "alice", "lynx"), set(&[&a, &b, &c]));
    // A visible pair can still be linked by a non-owner who sees both.
    h.ok(&["link", &a, &c, "--as", "bob"]);
}

// ---------------------------- invariant 4: changes apply on the very next query

#[test]
fn membership_and_visibility_changes_take_effect_on_the_next_query() {
    let h = Home::new();
    basic_org(&h);
    h.ok(&["project", "create", "ui", "--team", "apollo"]);
    h.ok(&["project", "add", "ui", "alice"]);
    h.ok(&["project", "add", "ui", "bob"]);
    let t = h.add("alice", "ferret teamword", &["team:apollo"]);
    let p = h.add("alice", "ferret projword", &["project:ui"]);
    let a = h.add("alice", "ferret agentword", &["agent:bob"]);
    h.ok(&["index", "rebuild"]);
    let sees = |want: &[&String]| {
        assert_eq!(search_set(&h, "bob", "ferret"), set(want));
        assert_eq!(list_ids(&h, "bob"), set(want));
    };
    sees(&[&t, &p, &a]);

    h.ok(&["project", "remove", "ui", "bob"]);
    sees(&[&t, &a]);
    get_refused(&h, "bob", &p);
    h.ok(&["project", "add", "ui", "bob"]);
    sees(&[&t, &p, &a]);

    h.ok(&["team", "remove", "apollo", "bob"]);
    sees(&[&a]); // the project needs the team too
    get_refused(&h, "bob", &t);
    get_refused(&h, "bob", &p);
    h.ok(&["team", "add", "apollo", "bob"]);
    sees(&[&t, &p, &a]);

    h.ok(&["project", "delete", "ui"]);
    sees(&[&t, &a]);

    // Unshare while the index is stale (an old copy claiming to be current).
    let snap = snapshot_index(&h);
    h.ok(&["unshare", &a, "agent:bob", "--as", "alice"]);
    install_stale_index(&h, &snap);
    sees(&[&t]);
    get_refused(&h, "bob", &a);
    h.ok(&["share", &a, "agent:bob", "--as", "alice"]);
    sees(&[&t, &a]);

    h.ok(&["team", "delete", "apollo"]);
    sees(&[&a]);
    assert_eq!(
        search_set(&h, "alice", "ferret"),
        set(&[&t, &p, &a]),
        "the owner keeps hers"
    );

    // The reverse: joining a team shows its memories at once.
    h.ok(&["team", "create", "hermes"]);
    let m = h.add("carol", "ferret hermesword", &["team:hermes"]);
    assert!(search_set(&h, "dave", "ferret").is_empty());
    h.ok(&["team", "add", "hermes", "dave"]);
    assert_eq!(search_set(&h, "dave", "ferret"), set(&[&m]));
    assert_eq!(h.json(&["get", &m, "--as", "dave"])["id"], m.as_str());
}

/// The same, in process: a node that searched (so holds an index and a
/// reader) sees a membership change made by another node on its next query.
#[test]
fn membership_change_by_another_node_applies_to_a_long_lived_node() {
    let h = Home::new();
    basic_org(&h);
    let t = h.add("alice", "badger teamword", &["team:apollo"]);
    let mut node = open(&h);
    let bob = node.requester("bob").expect("bob");
    assert_eq!(
        hit_ids(&node.search(&bob, "badger", 5).expect("search")),
        vec![t.clone()]
    );
    h.ok(&["team", "remove", "apollo", "bob"]);
    // A requester is built per query from the org graph as stored now.
    let bob = node.requester("bob").expect("bob");
    assert!(node.search(&bob, "badger", 5).expect("search").is_empty());
    assert!(node.list(&bob, None, 10).expect("list").is_empty());
    h.ok(&["team", "add", "apollo", "bob"]);
    let bob = node.requester("bob").expect("bob");
    assert_eq!(
        hit_ids(&node.search(&bob, "badger", 5).expect("search")),
        vec![t]
    );
}

// ------------------------------------------------- invariant 5: no implicit admin

#[test]
fn there_is_no_implicit_requester() {
    let h = Home::new();
    basic_org(&h);
    let id = h.add("alice", "okapi note", &["global"]);
    let before = h.fingerprint();
    let queries: Vec<Vec<&str>> = vec![
        vec!["search", "okapi"],
        vec!["get", &id],
        vec!["list"],
        vec!["pack", "okapi", "--budget", "100"],
        vec!["add", "okapi again"],
        vec!["feedback", &id, "--helpful"],
        vec!["share", &id, "agent:bob"],
        vec!["unshare", &id, "global"],
        vec!["update", &id, "changed"],
        vec!["forget", &id],
        vec!["restore-memory", &id],
    ];
    for q in &queries {
        let r = h.run(q);
        refused(&r, 2, "no requester");
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(q);
        refused(&h.run(&with_json), 2, "no requester");
        // An empty AMOS_AGENT is no requester either.
        let o = h
            .cmd()
            .env("AMOS_AGENT", "")
            .args(q)
            .output()
            .expect("spawn");
        assert_eq!(
            o.status.code(),
            Some(2),
            "{q:?} with AMOS_AGENT=\"\": {o:?}"
        );
        // An unknown agent is refused, not treated as anyone.
        let mut ghost = q.clone();
        ghost.extend_from_slice(&["--as", "ghost"]);
        refused(&h.run(&ghost), 2, "unknown agent ghost");
        let o = h
            .cmd()
            .env("AMOS_AGENT", "ghost")
            .args(q)
            .output()
            .expect("spawn");
        assert_eq!(o.status.code(), Some(2), "{q:?} as ghost: {o:?}");
        assert!(o.stdout.is_empty());
    }
    assert_eq!(h.fingerprint(), before, "refused commands change nothing");

    // Positive control: AMOS_AGENT names the requester.
    let o = h
        .cmd()
        .env("AMOS_AGENT", "bob")
        .args(["--json", "search", "okapi"])
        .output()
        .expect("spawn");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains(&id));

    let node = open(&h);
    assert!(matches!(
        node.requester("ghost"),
        Err(NodeError::Unknown {
            kind: amos_node::UnknownKind::Agent,
            ..
        })
    ));
    assert!(matches!(node.requester(""), Err(NodeError::BadInput(_))));
}

// ------------------------------------------ project access needs team membership

#[test]
fn project_access_requires_membership_of_the_projects_team() {
    let h = Home::new();
    basic_org(&h);
    h.ok(&["team", "create", "hermes"]);
    h.ok(&["team", "add", "hermes", "carol"]);
    h.ok(&["project", "create", "ui", "--team", "apollo"]);
    h.ok(&["project", "add", "ui", "alice"]);
    let p = h.add("alice", "pelican projonly", &["project:ui"]);

    // A project member must be a member of the project's team.
    let before = h.fingerprint();
    refused(
        &h.run(&["project", "add", "ui", "carol"]),
        2,
        "not a member of team apollo",
    );
    refused(
        &h.run(&["project", "add", "ui", "dave"]),
        2,
        "not a member of team apollo",
    );
    refused(
        &h.run(&["add", "x", "--as", "alice", "--share", "project:nope"]),
        2,
        "unknown project nope",
    );
    assert_eq!(h.fingerprint(), before);

    // Team membership alone is not project membership.
    for agent in ["bob", "carol", "dave"] {
        assert!(search_set(&h, agent, "pelican").is_empty(), "{agent}");
        get_refused(&h, agent, &p);
    }
    h.ok(&["project", "add", "ui", "bob"]);
    assert_eq!(search_set(&h, "bob", "pelican"), set(&[&p]));
    assert_eq!(list_ids(&h, "bob"), set(&[&p]));

    // Leaving the team takes the project with it, though the project
    // membership itself is still on record.
    h.ok(&["team", "remove", "apollo", "bob"]);
    let projects = h.json(&["project", "list"]).to_string();
    assert!(projects.contains("bob"), "{projects}");
    assert!(search_set(&h, "bob", "pelican").is_empty());
    assert!(list_ids(&h, "bob").is_empty());
    get_refused(&h, "bob", &p);
    h.ok(&["team", "add", "apollo", "bob"]);
    assert_eq!(search_set(&h, "bob", "pelican"), set(&[&p]));

    // Carol joins the team, then the project.
    h.ok(&["team", "add", "apollo", "carol"]);
    assert!(search_set(&h, "carol", "pelican").is_empty());
    h.ok(&["project", "add", "ui", "carol"]);
    assert_eq!(search_set(&h, "carol", "pelican"), set(&[&p]));

    // A deleted team takes its projects' visibility with it.
    h.ok(&["team", "delete", "apollo"]);
    for agent in ["bob", "carol"] {
        assert!(search_set(&h, agent, "pelican").is_empty(), "{agent}");
        get_refused(&h, agent, &p);
    }
    assert_eq!(search_set(&h, "alice", "pelican"), set(&[&p]));
}

// ------------------------------------------------------------- read your writes

#[test]
fn read_your_writes_across_processes() {
    let h = Home::new();
    basic_org(&h);
    let mut mine: Vec<(String, String)> = Vec::new();
    for round in 0..20 {
        let (me, other) = if round % 2 == 0 {
            ("alice", "carol")
        } else {
            ("carol", "alice")
        };
        // The round's letter inside the word: as a last letter, the stemmer
        // folds some together (`rywworde` and `rywwords` are both `rywword`).
        let word = format!("ryw{}word", (b'a' + round as u8) as char);
        let id = h.add(me, &format!("round {round}: {word} common"), &[]);
        assert_eq!(
            h.search_ids(me, &word, 5),
            vec![id.clone()],
            "round {round}"
        );
        assert!(
            h.search_ids(other, &word, 5).is_empty(),
            "round {round}: private"
        );
        mine.push((me.to_owned(), id));
        let expect: BTreeSet<String> = mine
            .iter()
            .filter(|(o, _)| o == me)
            .map(|(_, i)| i.clone())
            .collect();
        assert_eq!(search_set(&h, me, "common"), expect, "round {round}");
    }
}

/// Two long-lived nodes: what one writes, the other's next search finds, even
/// when the first already brought the shared on-disk index up to date.
#[test]
fn read_your_writes_between_long_lived_nodes() {
    let h = Home::new();
    basic_org(&h);
    h.add("alice", "an early note so the index exists", &["global"]);
    let mut reader = open(&h);
    let bob = reader.requester("bob").expect("bob");
    assert_eq!(
        probe(&mut reader, &bob, "early", 5).expect("search").len(),
        1
    );

    let mut writer = open(&h);
    let alice = writer.requester("alice").expect("alice");
    for round in 0..5 {
        let word = format!("seal{}", (b'a' + round as u8) as char);
        let id = writer
            .add(
                &alice,
                new_mem(&format!("{word} written by the other node"), &["global"]),
            )
            .expect("add")
            .to_string();
        if round % 2 == 0 {
            // The writer catches the on-disk index up before the reader asks.
            assert_eq!(
                hit_ids(&probe(&mut writer, &alice, &word, 5).expect("search")),
                vec![id.clone()]
            );
        }
        assert_eq!(
            hit_ids(&probe(&mut reader, &bob, &word, 5).expect("search")),
            vec![id],
            "round {round}"
        );
    }
}

// ------------------------------------------------------- the index is disposable

#[test]
fn the_index_is_disposable_and_results_are_the_same_after_losing_it() {
    let h = Home::new();
    basic_org(&h);
    const WORDS: [&str; 12] = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma",
        "omega", "rho",
    ];
    let mut ids = Vec::new();
    {
        let mut node = open(&h);
        let agents = ["alice", "bob", "carol"];
        let shares: [&[&str]; 5] = [
            &[],
            &["team:apollo"],
            &["global"],
            &["agent:carol"],
            &["agent:bob"],
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200 {
            let who = node.requester(agents[i % 3]).expect("requester");
            if i % 20 == 0 {
                // Build the index incrementally, as normal use does.
                node.search(&who, "alpha", 1).expect("search");
            }
            let n = 3 + (next() % 12) as usize;
            let text: Vec<&str> = (0..n).map(|_| WORDS[(next() % 12) as usize]).collect();
            let mut m = new_mem(
                &format!("{} item{i}", text.join(" ")),
                shares[(next() % 5) as usize],
            );
            m.importance = 0.1 + (next() % 9) as f32 / 10.0;
            ids.push((agents[i % 3], node.add(&who, m).expect("add").to_string()));
        }
    }
    // Churn through the CLI so the index holds replaced and deleted documents.
    for (owner, id) in ids.iter().step_by(17) {
        h.ok(&["update", id, "alpha omega replaced text", "--as", owner]);
    }
    for (owner, id) in ids.iter().skip(5).step_by(23) {
        h.ok(&["share", id, "global", "--as", owner]);
    }
    for (owner, id) in ids.iter().skip(3).step_by(29) {
        h.ok(&["forget", id, "--as", owner]);
    }
    let queries = ["alpha", "beta gamma", "omega", "delta kappa sigma"];
    let agents = ["alice", "bob", "carol", "dave"];
    let results = || -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for q in queries {
            for a in agents {
                out.push(h.search_ids(a, q, 25));
            }
        }
        out
    };
    let baseline = results();
    // The baseline is right, judged without the index: each agent gets
    // min(k, n) of the n visible memories (per `list`) holding a query word.
    let mut i = 0;
    for q in queries {
        for a in agents {
            let matching: BTreeSet<String> =
                h.json(&["list", "--as", a, "--limit", "1000"])["memories"]
                    .as_array()
                    .expect("memories")
                    .iter()
                    .filter(|m| {
                        let c = m["content"].as_str().expect("content");
                        c.split_whitespace()
                            .any(|w| q.split_whitespace().any(|t| t == w))
                    })
                    .map(|m| m["id"].as_str().expect("id").to_owned())
                    .collect();
            let got = &baseline[i];
            i += 1;
            assert_eq!(got.len(), matching.len().min(25), "{a} {q}: {got:?}");
            assert!(
                got.iter().all(|id| matching.contains(id)),
                "{a} {q}: {got:?}"
            );
        }
    }
    assert!(
        baseline.iter().filter(|r| r.len() == 25).count() >= 8,
        "{baseline:?}"
    );

    fs::remove_dir_all(h.path().join("index")).expect("rm -rf index");
    assert_eq!(results(), baseline, "after deleting the index");

    let r = h.json(&["index", "rebuild"]);
    assert_eq!(results(), baseline, "after `amos index rebuild`: {r}");

    let check = h.json(&["check"]);
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["index_docs"], check["memories"], "{check}");
    assert_eq!(
        check["memories"].as_u64(),
        Some(200 - ids.iter().skip(3).step_by(29).count() as u64)
    );
}

// ---------------------------------------- best visible hits, not global top k

#[test]
fn a_requester_who_sees_two_percent_still_gets_k_best_visible_hits() {
    let h = Home::new();
    h.ok(&["agent", "add", "seeker"]);
    for i in 0..5 {
        h.ok(&["agent", "add", &format!("other{i}")]);
    }
    let mut visible = BTreeSet::new();
    {
        let mut node = open(&h);
        let others: Vec<_> = (0..5)
            .map(|i| node.requester(&format!("other{i}")).expect("other"))
            .collect();
        let seeker = node.requester("seeker").expect("seeker");
        for i in 0..1000 {
            let m = new_mem(
                &format!("needle needle needle needle needle hidden{i}"),
                &[],
            );
            node.add(&others[i % 5], m).expect("add");
        }
        let weak = "a long and rambling note that mentions the needle exactly once among a great \
                    many other words about unrelated things such as weather and lunch";
        for i in 0..20 {
            let (who, share): (&_, &[&str]) = match i % 3 {
                0 => (&seeker, &[]),
                1 => (&others[i % 5], &["global"]),
                _ => (&others[i % 5], &["agent:seeker"]),
            };
            let id = node
                .add(who, new_mem(&format!("{weak} seen{i}"), share))
                .expect("add");
            visible.insert(id.to_string());
        }
        let hits = node.search(&seeker, "needle", 10).expect("search");
        assert_eq!(hits.len(), 10, "exactly k hits");
        assert!(
            hit_ids(&hits).iter().all(|id| visible.contains(id)),
            "{:?}",
            hit_ids(&hits)
        );
        let hits = node.search(&seeker, "needle", 50).expect("search");
        assert_eq!(
            to_set(hit_ids(&hits)),
            visible,
            "all 20 visible, nothing else"
        );
        // An owner of hidden memories gets their own strong ones first.
        let hits = node.search(&others[0], "needle", 10).expect("search");
        assert_eq!(hits.len(), 10);
        assert!(
            hits.iter()
                .all(|h| h.memory.content().starts_with("needle needle"))
        );
    }
    let ids = h.search_ids("seeker", "needle", 10);
    assert_eq!(ids.len(), 10);
    assert!(ids.iter().all(|id| visible.contains(id)), "{ids:?}");
    let listed = h.json(&["list", "--as", "seeker", "--limit", "10"])["memories"]
        .as_array()
        .expect("memories")
        .len();
    assert_eq!(listed, 10, "list fills its limit with visible memories too");
}

// --------------------------------------------------------------------- forget

#[test]
fn forget_removes_a_memory_for_everyone_and_erases_its_content() {
    let h = Home::new();
    basic_org(&h);
    let secret = "plughxyzzy";
    let id = h.json(&[
        "add",
        &format!("gannet {secret} the launch code"),
        "--as",
        "alice",
        "--share",
        "global",
        "--tag",
        "tagplughxyzzy",
    ])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let other = h.add("alice", "gannet kept", &["global"]);
    h.ok(&["link", &id, &other, "--as", "alice"]);
    h.ok(&[
        "update",
        &id,
        &format!("gannet {secret} the launch code, revised"),
        "--as",
        "alice",
    ]);
    // `other` comes along by resonance over the link.
    assert_eq!(search_set(&h, "bob", secret), set(&[&id, &other]));
    assert!(!db_mentions(&h, secret).is_empty(), "positive control");

    refused(&h.run(&["forget", &id, "--as", "bob"]), 3, "only the owner");
    assert_eq!(search_set(&h, "bob", secret), set(&[&id, &other]));
    h.ok(&["forget", &id, "--as", "alice"]);

    for agent in ["alice", "bob", "carol"] {
        get_refused(&h, agent, &id);
        assert!(search_set(&h, agent, secret).is_empty(), "{agent}");
        assert_eq!(search_set(&h, agent, "gannet"), set(&[&other]), "{agent}");
        assert!(!list_ids(&h, agent).contains(&id), "{agent}");
    }
    refused(
        &h.run(&["forget", &id, "--as", "alice"]),
        2,
        "no such memory",
    );
    refused(
        &h.run(&["update", &id, "back again", "--as", "alice"]),
        2,
        "no such memory",
    );
    refused(
        &h.run(&["share", &id, "agent:bob", "--as", "alice"]),
        2,
        "no such memory",
    );
    refused(
        &h.run(&["restore-memory", &id, "--as", "alice"]),
        2,
        "no such memory",
    );
    let admin = h.ok(&["--json", "search", secret, "--admin"]);
    assert_eq!(admin.json()["hits"], serde_json::json!([]), "{admin:?}");

    // Erased from every column of every row, after an index rebuild too.
    h.ok(&["index", "rebuild"]);
    assert_eq!(db_mentions(&h, secret), Vec::<String>::new());
    assert_eq!(db_mentions(&h, "launch code"), Vec::<String>::new());
    let conn = ro_db(&h);
    let mid: MemoryId = id.parse().expect("id");
    let (tomb, content_fact): (Option<Vec<u8>>, Option<Vec<u8>>) = conn
        .query_row(
            "SELECT tombstone_fact, content_fact FROM memories WHERE id = ?1",
            [&mid.0[..]],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("row");
    assert!(content_fact.is_none());
    let tomb = SignedFact::decode_verified(&tomb.expect("tombstone kept")).expect("verifies");
    assert!(matches!(&tomb.fact.body, FactBody::MemoryTombstone(t) if t.id == mid));
    let check = h.json(&["check"]);
    assert_eq!(check["ok"], true, "{check}");
}

// ----------------------------------------------------------------- expiry

#[test]
fn expired_memories_vanish_even_for_their_owner() {
    let h = Home::new();
    basic_org(&h);
    let t0: u64 = 1_900_000_000_000;
    let (expiring, lasting) = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let mut m = new_mem("mayfly shortlived note", &["global"]);
        m.expires_ms = Some(t0 + 60_000);
        let e = node.add(&alice, m).expect("add").to_string();
        let l = node
            .add(&alice, new_mem("mayfly lasting note", &["global"]))
            .expect("add")
            .to_string();
        for who in ["alice", "bob"] {
            let r = node.requester(who).expect("requester");
            assert_eq!(
                to_set(hit_ids(&node.search(&r, "mayfly", 10).expect("search"))),
                set(&[&e, &l])
            );
        }
        (e, l)
    };
    // One millisecond before expiry it is still there; at expiry it is gone.
    for (now, want) in [
        (t0 + 59_999, vec![&expiring, &lasting]),
        (t0 + 60_000, vec![&lasting]),
        (t0 + 86_400_000, vec![&lasting]),
    ] {
        let mut node = open_at(&h, now);
        for who in ["alice", "bob"] {
            let r = node.requester(who).expect("requester");
            let hits = hit_ids(&node.search(&r, "mayfly", 10).expect("search"));
            assert_eq!(to_set(hits), set(&want), "{who} at {now}");
            let listed: Vec<String> = node
                .list(&r, None, 10)
                .expect("list")
                .iter()
                .map(|m| m.id().to_string())
                .collect();
            assert_eq!(to_set(listed), set(&want), "{who} at {now}");
            let got = node.get(&r, &expiring);
            if want.len() == 2 {
                assert!(got.is_ok());
            } else {
                assert!(
                    matches!(got, Err(NodeError::NoSuchMemory(_))),
                    "{who} at {now}"
                );
                let pack = node.pack(&r, "mayfly", 10_000).expect("pack");
                assert!(pack.report.iter().all(|d| d.id != expiring));
            }
        }
    }
    // Through the CLI (system clock, years before t0), it is current.
    assert_eq!(
        search_set(&h, "alice", "mayfly"),
        set(&[&expiring, &lasting])
    );

    // A memory that expired in the past never shows, for anyone.
    let past = add_expired(&h, "alice", "dodo bygone note", &["global"]);
    let soon = add_expiring(&h, "alice", "dodo future note", "global", "30d");
    for agent in ["alice", "bob"] {
        assert_eq!(search_set(&h, agent, "dodo"), set(&[&soon]), "{agent}");
        get_refused(&h, agent, &past);
        assert!(!list_ids(&h, agent).contains(&past));
    }
}

// ---------------------------------------------------------------- archiving

#[test]
fn archived_memories_leave_recall_until_restored() {
    let h = Home::new();
    basic_org(&h);
    let keep = h.add("alice", "heron duplicate note", &["global"]);
    let dup = h.add("alice", "heron   DUPLICATE note", &["global"]);
    let dry = h.json(&["consolidate"]);
    assert_eq!(dry["applied"], false);
    assert_eq!(
        search_set(&h, "bob", "heron"),
        set(&[&keep, &dup]),
        "a dry run changes nothing"
    );
    let done = h.json(&["consolidate", "--apply"]);
    assert_eq!(done["actions"][0]["id"], dup.as_str(), "{done}");
    for agent in ["alice", "bob"] {
        assert_eq!(search_set(&h, agent, "heron"), set(&[&keep]), "{agent}");
        assert_eq!(list_ids(&h, agent), set(&[&keep]), "{agent}");
    }
    refused(
        &h.run(&["restore-memory", &dup, "--as", "bob"]),
        3,
        "only the owner",
    );
    refused(
        &h.run(&["restore-memory", &dup, "--as", "carol"]),
        3,
        "only the owner",
    );
    assert_eq!(
        h.json(&["restore-memory", &dup, "--as", "alice"])["restored"],
        true
    );
    for agent in ["alice", "bob"] {
        assert_eq!(
            search_set(&h, agent, "heron"),
            set(&[&keep, &dup]),
            "{agent}"
        );
        assert_eq!(list_ids(&h, agent), set(&[&keep, &dup]), "{agent}");
    }

    // Retention archives what expired (by the injected clock).
    let t0: u64 = 1_900_000_000_000;
    let egret = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let mut m = new_mem("egret seasonal note", &["global"]);
        m.expires_ms = Some(t0 + 1_000);
        let id = node.add(&alice, m).expect("add").to_string();
        let mut pinned = new_mem("egret pinned note", &["global"]);
        pinned.expires_ms = Some(t0 + 1_000);
        pinned.pinned = true;
        node.add(&alice, pinned).expect("add");
        id
    };
    {
        let mut node = open_at(&h, t0 + 5_000);
        let dry = node.retention(false).expect("dry run");
        assert_eq!(
            dry.actions.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
            vec![egret.clone()]
        );
        node.retention(true).expect("apply");
        assert!(node.retention(false).expect("again").actions.is_empty());
    }
    {
        // Back before the expiry: only the archived flag keeps it out.
        let mut node = open_at(&h, t0);
        let bob = node.requester("bob").expect("bob");
        let alice = node.requester("alice").expect("alice");
        for who in [&alice, &bob] {
            let hits = hit_ids(&node.search(who, "egret", 10).expect("search"));
            assert!(!hits.contains(&egret));
            assert_eq!(hits.len(), 1);
            assert!(
                node.list(who, None, 100)
                    .expect("list")
                    .iter()
                    .all(|m| m.id().to_string() != egret)
            );
        }
        assert!(node.set_archived(&alice, &egret, false).expect("restore"));
        for who in [&alice, &bob] {
            assert!(hit_ids(&node.search(who, "egret", 10).expect("search")).contains(&egret));
        }
    }
}

// ----------------------------------------------------------------- clocks

#[test]
fn the_node_clock_never_goes_backwards_across_restarts() {
    let h = Home::new();
    let first = {
        let mut node = open_at(&h, 1_000_000);
        node.agent_add("alice", "agent", &[]).expect("agent");
        let alice = node.requester("alice").expect("alice");
        node.add(&alice, new_mem("written at a million", &[]))
            .expect("add")
    };
    let state = open_at(&h, 5).store().hlc_state().expect("hlc");
    let second = {
        // The physical clock went backwards.
        let mut node = open_at(&h, 5);
        let alice = node.requester("alice").expect("alice");
        node.add(&alice, new_mem("written at five", &[]))
            .expect("add")
    };
    let third = {
        let mut node = open_at(&h, 5);
        let alice = node.requester("alice").expect("alice");
        node.team_create("later", None).expect("team");
        node.add(&alice, new_mem("written at five again", &[]))
            .expect("add")
    };
    let conn = ro_db(&h);
    let clocks = |id: &MemoryId| -> (Hlc, Hlc) {
        let (c, a): (Vec<u8>, Vec<u8>) = conn
            .query_row(
                "SELECT content_fact, acl_fact FROM memories WHERE id = ?1",
                [&id.0[..]],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("row");
        let c = SignedFact::decode_verified(&c)
            .expect("content verifies")
            .fact
            .clock;
        let a = SignedFact::decode_verified(&a)
            .expect("acl verifies")
            .fact
            .clock;
        (c, a)
    };
    let (c1, a1) = clocks(&first);
    let (c2, a2) = clocks(&second);
    let (c3, a3) = clocks(&third);
    assert_eq!(c1.wall_ms, 1_000_000);
    assert!(
        c1 < a1 && a1 < c2 && c2 < a2 && a2 < c3 && c3 < a3,
        "{c1:?} {a1:?} {c2:?} {a2:?} {c3:?} {a3:?}"
    );
    assert!(
        c2.wall_ms >= 1_000_000,
        "the clock did not follow the physical clock back: {c2:?}"
    );
    assert!(
        (state.wall_ms, state.logical) >= (a1.wall_ms, a1.logical),
        "the state persisted: {state:?}"
    );
    let end = open_at(&h, 5).store().hlc_state().expect("hlc");
    assert_eq!((end.wall_ms, end.logical), (a3.wall_ms, a3.logical));
}

// ------------------------------------------------- every stored fact verifies

#[test]
fn every_stored_fact_verifies_and_is_authored_here() {
    let h = Home::new();
    basic_org(&h);
    h.ok(&["team", "create", "hermes", "--name", "Hermes"]);
    h.ok(&["project", "create", "ui", "--team", "apollo"]);
    h.ok(&["project", "add", "ui", "alice"]);
    h.ok(&["project", "create", "gone", "--team", "hermes"]);
    let a = h.add("alice", "fact one", &["team:apollo", "agent:carol"]);
    let b = h.add("bob", "fact two", &["project:ui"]);
    let c = h.add("carol", "fact three", &[]);
    h.ok(&["update", &a, "fact one revised", "--as", "alice"]);
    h.ok(&["share", &c, "global", "--as", "carol"]);
    h.ok(&["unshare", &a, "agent:carol", "--as", "alice"]);
    h.ok(&[
        "link",
        &a,
        &c,
        "--as",
        "alice",
        "--relation",
        "related",
        "--weight",
        "0.5",
    ]);
    h.ok(&["forget", &b, "--as", "bob"]);
    h.ok(&["team", "remove", "apollo", "bob"]);
    h.ok(&["project", "delete", "gone"]);
    h.ok(&["team", "delete", "hermes"]);
    let node_id = h.json(&["id"])["node_id"]
        .as_str()
        .expect("node_id")
        .to_owned();

    let conn = ro_db(&h);
    let columns = [
        ("memories", "content_fact", Some("v")),
        ("memories", "acl_fact", Some("acl_v")),
        ("memories", "tombstone_fact", None),
        ("links", "fact", Some("v")),
        ("teams", "fact", Some("v")),
        ("projects", "fact", Some("v")),
        ("memberships", "fact", Some("v")),
        ("agents", "fact", Some("v")),
        ("profiles", "fact", Some("v")),
    ];
    let mut seen = Vec::new();
    let mut clocks = HashSet::new();
    for (table, col, clock_col) in columns {
        let clock_sql = clock_col.unwrap_or("NULL");
        let sql = format!("SELECT {col}, {clock_sql} FROM {table} WHERE {col} IS NOT NULL");
        let rows: Vec<(Vec<u8>, Option<Vec<u8>>)> = conn
            .prepare(&sql)
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        for (blob, clock) in &rows {
            let f = SignedFact::decode_verified(blob)
                .unwrap_or_else(|e| panic!("{table}.{col} does not verify: {e}"));
            assert_eq!(f.fact.author().to_string(), node_id, "{table}.{col}");
            if let Some(clock) = clock {
                assert_eq!(
                    &f.fact.clock.sort_key()[..],
                    &clock[..],
                    "{table}.{col}: stored clock"
                );
            }
            let kind_ok = matches!(
                (table, col, &f.fact.body),
                ("memories", "content_fact", FactBody::MemoryContent(_))
                    | ("memories", "acl_fact", FactBody::MemoryAcl(_))
                    | ("memories", "tombstone_fact", FactBody::MemoryTombstone(_))
                    | ("links", _, FactBody::Link(_))
                    | ("teams", _, FactBody::Team(_))
                    | ("projects", _, FactBody::Project(_))
                    | ("memberships", _, FactBody::Membership(_))
                    | ("agents", _, FactBody::Agent(_))
                    | ("profiles", _, FactBody::Profile(_))
            );
            assert!(kind_ok, "{table}.{col} holds {:?}", f.fact.body);
            assert!(
                clocks.insert(f.fact.clock),
                "two facts share a clock: {:?}",
                f.fact.clock
            );
        }
        seen.push((table, col, rows.len()));
    }
    let count = |t: &str, c: &str| seen.iter().find(|s| s.0 == t && s.1 == c).map(|s| s.2);
    assert_eq!(count("memories", "content_fact"), Some(2));
    assert_eq!(count("memories", "acl_fact"), Some(2));
    assert_eq!(count("memories", "tombstone_fact"), Some(1));
    assert_eq!(count("links", "fact"), Some(1));
    assert_eq!(count("teams", "fact"), Some(2));
    assert_eq!(count("projects", "fact"), Some(2));
    assert_eq!(count("agents", "fact"), Some(4));
    assert_eq!(count("memberships", "fact"), Some(3), "{seen:?}");
}

/// Issue 37 item 8: the id a memory supersedes is an id of another memory;
/// bob, who sees alice's superseder but not the private memory it
/// replaces, never reads that id — not by `get`, `list`, `search` or a
/// timeline on the CLI, not through MCP, not on the console's page —
/// while alice, who sees both, does.
#[test]
fn the_id_of_a_hidden_superseded_memory_never_reaches_another_agent() {
    let h = Home::new();
    h.ok(&["agent", "add", "alice"]);
    h.ok(&["agent", "add", "bob"]);
    let private = h.add("alice", "the vault code is 4711", &[]);
    let shared = h.json(&[
        "add",
        "the vault code changed this week",
        "--as",
        "alice",
        "--supersedes",
        &private,
        "--share",
        "agent:bob",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // alice sees both: the id is hers to read.
    let mine = h.json(&["get", &shared, "--as", "alice"]);
    assert_eq!(mine["supersedes"], private.as_str(), "{mine}");
    // bob sees the superseder, not what it replaces.
    let his = h.json(&["get", &shared, "--as", "bob"]);
    assert_eq!(his["content"], "the vault code changed this week");
    assert_eq!(his["supersedes"], Value::Null, "{his}");
    for args in [
        vec!["get", &shared, "--as", "bob"],
        vec!["list", "--as", "bob"],
        vec!["list", "--as", "bob", "--since", "2000-01-01"],
        vec!["search", "vault code", "--as", "bob"],
        vec!["timeline", "--as", "bob"],
    ] {
        let mut a = vec!["--json"];
        a.extend(args.iter().copied());
        let r = h.ok(&a);
        assert!(!r.stdout.contains(&private), "{args:?}: {}", r.stdout);
    }
    // MCP: the same memory object.
    let mut bob = crate::mcp::Client::start(&h, "bob");
    for (tool, args) in [
        ("memory_get", serde_json::json!({"id": shared})),
        ("memory_search", serde_json::json!({"query": "vault code"})),
        ("memory_timeline", serde_json::json!({})),
    ] {
        let got = bob.ok(tool, args).to_string();
        assert!(got.contains(&shared), "{tool}: {got}");
        assert!(!got.contains(&private), "{tool}: {got}");
    }
    let mut alice = crate::mcp::Client::start(&h, "alice");
    assert_eq!(
        alice.ok("memory_get", serde_json::json!({"id": shared}))["supersedes"],
        private.as_str()
    );
    // The console's page of the memory shows no supersession at all; it
    // must not start leaking one.
    let c = crate::common::console::Console::start(h.path());
    let page = c.get(&format!("/memories/{shared}?as=bob"));
    assert_eq!(page.status, 200);
    assert!(!page.body.contains(&private), "{}", page.body);
}
