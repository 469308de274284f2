//! The recall engine (docs/design.md §9, issue 3): ranking with freshness and its
//! explanation, resonance over links (and its ACL bridge rule), feedback,
//! profiles, context packs, retention, consolidation, backup and check.
//!
//! Through the real `amos` binary where the CLI is the contract, and through
//! the library with an injected clock where time must move.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::common::Home;
use amos_node::api::RetentionPolicy;
use amos_node::clock::FixedClock;
use amos_node::recall::{DAY_MS, RecallOptions};
use amos_node::{NewMemory, Node};
use amos_protocol::Scope;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

fn lib_home(h: &Home) -> amos_node::Home {
    amos_node::Home::new(h.path())
}

fn open_at(h: &Home, now_ms: u64) -> Node {
    Node::open_with_clock(&lib_home(h), Arc::new(FixedClock(now_ms))).expect("open node")
}

fn ro_db(h: &Home) -> Connection {
    Connection::open_with_flags(h.path().join("amos.db"), OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open db")
}

fn org(h: &Home) {
    for a in ["alice", "bob", "carol"] {
        h.ok(&["agent", "add", a]);
    }
}

fn ids_of(v: &Value, field: &str) -> Vec<String> {
    v[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {v}"))
        .iter()
        .map(|h| h["id"].as_str().expect("id").to_owned())
        .collect()
}

fn hit<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .find(|h| h["id"] == id)
        .unwrap_or_else(|| panic!("{id} not among {v}"))
}

fn digest(h: &Home) -> Value {
    h.json(&["digest"])
}

fn new_mem(text: &str, share: &[&str]) -> NewMemory {
    let mut m = NewMemory::new(text);
    m.share = share
        .iter()
        .map(|s| s.parse::<Scope>().expect("scope"))
        .collect();
    m
}

// ------------------------------------------------- resonance and the gate

#[test]
fn resonance_never_bridges_through_an_invisible_memory() {
    let h = Home::new();
    org(&h);
    // A (visible to bob) — X (alice's private) — B (visible, no query term).
    let a = h.add("alice", "quokka anchor observation", &["global"]);
    let x = h.add("alice", "zzhiddenbridge private musings", &[]);
    let b = h.add("alice", "wombat burrow depth measured", &["global"]);
    h.ok(&["link", &a, &x, "--as", "alice"]);
    h.ok(&["link", &x, &b, "--as", "alice"]);

    // Positive control: alice sees X, so resonance reaches X and, through it, B.
    let alice = h.json(&["search", "quokka", "--as", "alice"]);
    let got: BTreeSet<String> = ids_of(&alice, "hits").into_iter().collect();
    assert_eq!(got, [a.clone(), x.clone(), b.clone()].into(), "{alice}");
    assert_eq!(hit(&alice, &b)["explain"]["resonance"]["via"], x.as_str());
    assert_eq!(hit(&alice, &b)["explain"]["resonance"]["hops"], 2);
    assert_eq!(hit(&alice, &b)["explain"]["bm25"], 0.0);

    // bob: X is invisible, so it neither shows nor bridges to B.
    let mut out = String::new();
    let bob = h.json(&[
        "search", "quokka", "--as", "bob", "-k", "50", "--mode", "lexical",
    ]);
    assert_eq!(ids_of(&bob, "hits"), vec![a.clone()], "{bob}");
    out += &bob.to_string();
    // By meaning too, neither X nor what only X links to.
    let hybrid = h.json(&["search", "quokka", "--as", "bob", "-k", "50"]);
    let got = ids_of(&hybrid, "hits");
    assert!(!got.contains(&x) && !got.contains(&b), "{hybrid}");
    out += &hybrid.to_string();
    out += &h
        .ok(&["search", "quokka", "--as", "bob", "--explain"])
        .stdout;
    let pack = h.json(&[
        "pack", "quokka", "--as", "bob", "--budget", "10000", "--report",
    ]);
    assert_eq!(ids_of(&pack, "items"), vec![a.clone()], "{pack}");
    assert_eq!(
        pack["report"].as_array().expect("report").len(),
        1,
        "{pack}"
    );
    out += &pack.to_string();
    out += &h
        .ok(&[
            "pack", "quokka", "--as", "bob", "--budget", "10000", "--report",
        ])
        .stdout;
    assert!(!out.contains(&x), "invisible id leaked:\n{out}");
    assert!(
        !out.contains("zzhiddenbridge"),
        "invisible content leaked:\n{out}"
    );
    assert!(!out.contains(&b), "B was bridged through X:\n{out}");

    // A direct link A — B pulls B in for bob, via A.
    h.ok(&["link", &a, &b, "--as", "bob", "--weight", "0.8"]);
    let bob = h.json(&["search", "quokka", "--as", "bob"]);
    assert_eq!(ids_of(&bob, "hits"), vec![a.clone(), b.clone()], "{bob}");
    let e = &hit(&bob, &b)["explain"];
    assert_eq!(e["resonance"]["via"], a.as_str(), "{e}");
    assert_eq!(e["resonance"]["hops"], 1, "{e}");
    assert!(!bob.to_string().contains(&x));
    let r = h
        .ok(&["search", "quokka", "--as", "bob", "--explain"])
        .stdout;
    assert!(r.contains(&format!("resonance via {a}")), "{r}");
    assert!(!r.contains(&x), "{r}");
}

#[test]
fn hidden_neighbours_take_no_fan_out_slot() {
    let h = Home::new();
    org(&h);
    let a = h.add("alice", "axolotl gills", &["global"]);
    // Ten strong links to memories bob cannot see, one weak link to one he can.
    for i in 0..10 {
        let x = h.add("alice", &format!("zzhidden number {i}"), &[]);
        h.ok(&["link", &a, &x, "--as", "alice", "--weight", "1"]);
    }
    let b = h.add("alice", "salamander eggs", &["global"]);
    h.ok(&["link", &a, &b, "--as", "alice", "--weight", "0.1"]);
    let bob = h.json(&["search", "axolotl", "--as", "bob", "-k", "50"]);
    assert_eq!(ids_of(&bob, "hits"), vec![a.clone(), b.clone()], "{bob}");
    assert!(!bob.to_string().contains("zzhidden"));
    // Positive control: alice reaches the hidden ones (at most 8: the fan-out).
    let alice = h.json(&["search", "axolotl", "--as", "alice", "-k", "50"]);
    assert_eq!(ids_of(&alice, "hits").len(), 1 + 8, "{alice}");
}

#[test]
fn resonance_skips_expired_and_archived_neighbours() {
    let h = Home::new();
    org(&h);
    let t0: u64 = 1_900_000_000_000;
    let (a, e, z) = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let a = node
            .add(&alice, new_mem("pangolin scales", &["global"]))
            .expect("add");
        let mut m = new_mem("short lived aardvark", &["global"]);
        m.expires_ms = Some(t0 + 1000);
        let e = node.add(&alice, m).expect("add");
        let z = node
            .add(&alice, new_mem("zebra stripes", &["global"]))
            .expect("add");
        node.link(&alice, &a.to_string(), &e.to_string(), None, 1.0)
            .expect("link");
        node.link(&alice, &e.to_string(), &z.to_string(), None, 1.0)
            .expect("link");
        (a, e, z)
    };
    let mut node = open_at(&h, t0 + 500);
    let bob = node.requester("bob").expect("bob");
    let ids = |hits: Vec<amos_node::recall::Hit>| -> Vec<_> {
        hits.iter().map(|h| h.memory.id()).collect()
    };
    assert_eq!(
        ids(node.search(&bob, "pangolin", 10).expect("search")),
        vec![a, e, z]
    );
    // After expiry, E is gone for everyone and bridges nothing.
    let mut node = open_at(&h, t0 + 2000);
    let alice = node.requester("alice").expect("alice");
    for who in [&alice, &bob] {
        assert_eq!(
            ids(node.search(who, "pangolin", 10).expect("search")),
            vec![a]
        );
    }
}

// ---------------------------------------------------------------- ranking

#[test]
fn explain_carries_every_factor_and_their_product_is_the_score() {
    let h = Home::new();
    org(&h);
    let id = h.add("alice", "narwhal tusk length", &[]);
    h.ok(&["profile", "set", "alice", "note=2"]);
    let v = h.json(&["search", "narwhal", "--as", "alice", "--half-life", "7d"]);
    let e = &hit(&v, &id)["explain"];
    let f = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k} in {e}"));
    let product = f("relevance")
        * f("importance")
        * f("confidence")
        * f("freshness")
        * f("reinforcement")
        * f("profile_weight");
    assert!(
        (product - f("score")).abs() < 1e-4 * f("score").max(1e-9),
        "{e}"
    );
    assert!((f("score") - hit(&v, &id)["score"].as_f64().expect("score")).abs() < 1e-6);
    assert_eq!(f("profile_weight"), 2.0);
    assert_eq!(f("half_life_days"), 7.0);
    // Hybrid (the default): relevance is the fused direct relevance, and
    // both parts are shown.
    assert!(f("bm25") > 0.0 && f("relevance") == f("direct"));
    assert_eq!(e["lexical_rank"], 1, "{e}");
    assert!(f("semantic") > 0.3 && e["semantic_rank"] == 1, "{e}");
    let lexical = h.json(&["search", "narwhal", "--as", "alice", "--mode", "lexical"]);
    let e = &hit(&lexical, &id)["explain"];
    assert!(
        e["bm25"].as_f64().expect("bm25") > 0.0 && e["relevance"] == e["bm25"],
        "{e}"
    );
    assert!(e.get("semantic").is_none(), "{e}");
    let text = h
        .ok(&["search", "narwhal", "--as", "alice", "--explain"])
        .stdout;
    for factor in [
        "relevance",
        "importance",
        "confidence",
        "freshness",
        "half-life 30.0d",
        "reinforcement",
        "profile 2.00",
        "lexical #1 bm25",
        "semantic #1 cosine",
    ] {
        assert!(text.contains(factor), "{factor} missing: {text}");
    }
    let bad = h.run(&["search", "narwhal", "--as", "alice", "--half-life", "soon"]);
    assert_eq!(bad.code, 2, "{bad:?}");
}

#[test]
fn freshness_decays_on_the_half_life_and_pinned_memories_never_decay() {
    let h = Home::new();
    org(&h);
    let t0: u64 = 1_900_000_000_000;
    let (pinned, plain) = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let mut p = new_mem("ibis alpha", &[]);
        p.pinned = true;
        let pinned = node.add(&alice, p).expect("add");
        let plain = node.add(&alice, new_mem("ibis gamma", &[])).expect("add");
        (pinned, plain)
    };
    let freshness = |now: u64, half_life_days: u64| {
        let mut node = open_at(&h, now);
        let alice = node.requester("alice").expect("alice");
        let opts = RecallOptions {
            half_life_ms: half_life_days * DAY_MS,
            ..RecallOptions::top(10)
        };
        let hits = node.search_with(&alice, "ibis", &opts).expect("search");
        let get = |id| {
            hits.iter()
                .find(|h| h.memory.id() == id)
                .map(|h| h.explain.freshness)
                .expect("hit")
        };
        (get(pinned), get(plain), hits[0].memory.id())
    };
    let (p, q, _) = freshness(t0, 30);
    assert_eq!((p, q), (1.0, 1.0));
    let (p, q, first) = freshness(t0 + 60 * DAY_MS, 30);
    assert_eq!(p, 1.0, "pinned never decays");
    assert!((q - 0.25).abs() < 1e-4, "two half-lives: {q}");
    assert_eq!(first, pinned, "the fresher (pinned) one ranks first");
    let (p, q, _) = freshness(t0 + 60 * DAY_MS, 60);
    assert_eq!(p, 1.0);
    assert!((q - 0.5).abs() < 1e-4, "the half-life is configurable: {q}");
    let (p, _, _) = freshness(t0 + 3650 * DAY_MS, 30);
    assert_eq!(p, 1.0);
}

#[test]
fn expired_memories_never_appear_whatever_their_score() {
    let h = Home::new();
    org(&h);
    let t0: u64 = 1_900_000_000_000;
    let gone = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let mut m = new_mem("mayfly mayfly mayfly", &["global"]);
        m.expires_ms = Some(t0 + 10);
        m.pinned = true;
        m.importance = 1.0;
        node.add(&alice, m).expect("add");
        node.add(&alice, new_mem("mayfly once", &["global"]))
            .expect("add")
    };
    let mut node = open_at(&h, t0 + 20);
    for agent in ["alice", "bob"] {
        let who = node.requester(agent).expect("who");
        let hits = node.search(&who, "mayfly", 10).expect("search");
        assert_eq!(
            hits.iter().map(|h| h.memory.id()).collect::<Vec<_>>(),
            vec![gone]
        );
        let pack = node.pack(&who, "mayfly", 1000).expect("pack");
        assert_eq!(
            pack.report.len(),
            1,
            "the expired pinned one is not even reported"
        );
    }
}

// --------------------------------------------------------------- profiles

#[test]
fn profile_weights_change_order_but_never_visibility() {
    let h = Home::new();
    org(&h);
    let proc_ = h.json(&[
        "add",
        "gecko alpha",
        "--as",
        "alice",
        "--type",
        "procedure",
        "--share",
        "global",
    ])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let note = h.json(&[
        "add",
        "gecko gamma",
        "--as",
        "alice",
        "--type",
        "note",
        "--share",
        "global",
    ])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let secret = h.json(&[
        "add",
        "gecko gecko gecko secret",
        "--as",
        "carol",
        "--type",
        "procedure",
    ])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let order = || h.search_ids("bob", "gecko", 10);

    let before = digest(&h);
    let set = h.json(&["profile", "set", "bob", "procedure=5", "note=0.2"]);
    assert_eq!(
        set["weights"],
        serde_json::json!({"procedure": 5.0, "note": 0.2})
    );
    assert_ne!(digest(&h), before, "a profile is a replicated fact");
    assert_eq!(order(), vec![proc_.clone(), note.clone()]);
    h.ok(&["profile", "set", "bob", "procedure=0.2", "note=5"]);
    assert_eq!(order(), vec![note.clone(), proc_.clone()]);
    // The heaviest weight on the hidden memory's type does not reveal it.
    h.ok(&["profile", "set", "bob", "procedure=10"]);
    assert!(!order().contains(&secret));
    assert_eq!(order().len(), 2);
    let pack = h.json(&[
        "pack", "gecko", "--as", "bob", "--budget", "1000", "--report",
    ]);
    assert!(!pack.to_string().contains(&secret), "{pack}");
    assert!(
        h.search_ids("carol", "gecko", 10).contains(&secret),
        "positive control"
    );

    let show = h.json(&["profile", "show", "bob"]);
    assert_eq!(
        show["weights"],
        serde_json::json!({"procedure": 10.0, "note": 5.0})
    );
    assert_eq!(
        h.json(&["profile", "show", "carol"])["weights"],
        serde_json::json!({})
    );
    // Bad input changes nothing.
    for args in [
        &["profile", "set", "bob", "procedure"][..],
        &["profile", "set", "bob", "note=11"],
        &["profile", "set", "nobody", "note=1.5"],
        &["profile", "show", "nobody"],
    ] {
        let d = digest(&h);
        assert_eq!(h.run(args).code, 2, "{args:?}");
        assert_eq!(digest(&h), d);
    }
}

// --------------------------------------------------------------- feedback

fn link_strength(h: &Home) -> f64 {
    ro_db(h)
        .query_row("SELECT strength FROM links", [], |r| r.get(0))
        .expect("strength")
}

fn link_fact(h: &Home) -> Vec<u8> {
    ro_db(h)
        .query_row("SELECT fact FROM links", [], |r| r.get(0))
        .expect("fact")
}

#[test]
fn feedback_is_local_and_never_moves_the_digest() {
    let h = Home::new();
    org(&h);
    let a = h.add("alice", "heron wading", &["global"]);
    let b = h.add("alice", "egret plumage", &["global"]);
    h.ok(&["link", &a, &b, "--as", "alice"]);
    let before = digest(&h);
    let fact = link_fact(&h);
    let reinforcement = |id: &str| {
        hit(&h.json(&["search", "heron", "--as", "bob"]), id)["explain"]["reinforcement"]
            .as_f64()
            .expect("r")
    };
    assert_eq!(reinforcement(&a), 1.0);

    let r = h.json(&["feedback", &a, &b, "--helpful", "--as", "bob"]);
    assert_eq!(
        (r["updated"].as_u64(), r["links"].as_u64()),
        (Some(2), Some(1)),
        "{r}"
    );
    assert!(reinforcement(&a) > 1.0);
    assert!(link_strength(&h) > 1.0);
    // A stronger link carries more relevance to b.
    assert_eq!(digest(&h), before, "helpful feedback moved the digest");
    assert_eq!(link_fact(&h), fact, "the signed link fact is untouched");

    for _ in 0..3 {
        h.ok(&["feedback", &a, &b, "--unhelpful", "--as", "bob"]);
    }
    assert!(reinforcement(&a) < 1.0);
    assert!(link_strength(&h) < 1.0);
    let pack = h.json(&[
        "pack",
        "heron",
        "--as",
        "bob",
        "--budget",
        "1000",
        "--reinforce",
    ]);
    assert_eq!(ids_of(&pack, "items").len(), 2, "{pack}");
    assert_eq!(digest(&h), before, "feedback and packs moved the digest");
    assert_eq!(link_fact(&h), fact);
}

#[test]
fn memories_found_helpful_together_become_associated_locally() {
    let h = Home::new();
    org(&h);
    let a = h.add("alice", "jackdaw caching habits", &["global"]);
    let b = h.add("alice", "rook nesting colony", &["global"]);
    let hidden = h.add("alice", "zzsecret roost", &[]);
    assert_eq!(h.search_ids("bob", "jackdaw", 10), vec![a.clone()]);
    let before = digest(&h);
    let r = h.json(&["feedback", &a, &b, "--helpful", "--as", "bob"]);
    assert_eq!(r["associations"], 1, "{r}");
    assert_eq!(digest(&h), before, "an association is not a fact");
    let v = h.json(&["search", "jackdaw", "--as", "bob"]);
    assert_eq!(ids_of(&v, "hits"), vec![a.clone(), b.clone()], "{v}");
    assert_eq!(hit(&v, &b)["explain"]["resonance"]["via"], a.as_str());
    // alice associates b with her hidden memory; bob still never reaches it.
    h.ok(&["feedback", &b, &hidden, "--helpful", "--as", "alice"]);
    let v = h.json(&["search", "jackdaw", "--as", "bob", "-k", "50"]);
    assert!(!v.to_string().contains(&hidden), "{v}");
    assert!(
        h.search_ids("alice", "jackdaw", 10).contains(&hidden),
        "positive control"
    );
    // Unhelpful feedback weakens the association (0.25 / 1.25^n) until it
    // falls below 0.1 and is dropped: the fifth time.
    for _ in 0..5 {
        h.ok(&["feedback", &a, &b, "--unhelpful", "--as", "bob"]);
    }
    assert_eq!(h.search_ids("bob", "jackdaw", 10), vec![a]);
    assert_eq!(digest(&h), before);
}

#[test]
fn stronger_links_carry_more_resonance() {
    let h = Home::new();
    org(&h);
    let a = h.add("alice", "ocelot sighting", &["global"]);
    let b = h.add("alice", "margay sighting", &["global"]);
    h.ok(&["link", &a, &b, "--as", "alice", "--weight", "0.5"]);
    let relevance = || {
        hit(&h.json(&["search", "ocelot", "--as", "bob"]), &b)["explain"]["relevance"]
            .as_f64()
            .expect("rel")
    };
    let weak = relevance();
    h.ok(&["feedback", &a, &b, "--helpful", "--as", "bob"]);
    assert!(relevance() > weak);
}

// ------------------------------------------------------------------ packs

#[test]
fn packs_reserve_pinned_room_suppress_near_duplicates_and_flag_conflicts() {
    let h = Home::new();
    org(&h);
    let core = h.json(&[
        "add",
        "house rule: always run the tests first",
        "--as",
        "bob",
        "--pin",
    ])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let first = h.add(
        "alice",
        "the deploy script lives in ops/deploy.sh on main",
        &["global"],
    );
    let near = h.add(
        "alice",
        "the deploy script lives in ops/deploy.sh on main branch",
        &["global"],
    );
    let p1 = h.add("alice", "deploy port: 8080", &["global"]);
    let p2 = h.add("alice", "deploy port: 9090", &["global"]);
    let big = h.add(
        "alice",
        // Long and about deploys throughout, so it passes the relevance
        // floor and is left out for its size alone.
        &format!(
            "deploy notes: {}",
            "the deploy runs from main after the tests pass. ".repeat(60)
        ),
        &["global"],
    );
    let hidden = h.add("carol", "deploy port: 7070 secret", &[]);

    let p = h.json(&[
        "pack", "deploy", "--as", "bob", "--budget", "300", "--report",
    ]);
    let items: BTreeSet<String> = ids_of(&p, "items").into_iter().collect();
    assert!(
        items.contains(&core),
        "pinned core memory gets reserved room: {p}"
    );
    assert!(items.contains(&p1) && items.contains(&p2), "{p}");
    assert_eq!(
        items.contains(&first) as u8 + items.contains(&near) as u8,
        1,
        "{p}"
    );
    assert!(!items.contains(&big), "over budget: {p}");
    let report = p["report"].as_array().expect("report");
    let decision = |id: &str| {
        report
            .iter()
            .find(|d| d["id"] == id)
            .unwrap_or_else(|| panic!("{id} not reported: {p}"))
            .clone()
    };
    assert_eq!(decision(&core)["decision"], "pinned");
    let dup = if items.contains(&first) {
        &near
    } else {
        &first
    };
    let d = decision(dup);
    assert_eq!(d["decision"], "near-duplicate", "{d}");
    assert_eq!(d["included"], false);
    assert_eq!(decision(&big)["decision"], "over-budget");
    for (x, y) in [(&p1, &p2), (&p2, &p1)] {
        let d = decision(x);
        assert!(
            d["reason"]
                .as_str()
                .expect("reason")
                .contains(&format!("CONFLICT with {y}")),
            "{d}"
        );
        assert_eq!(d["conflict_with"], serde_json::json!([y]));
    }
    assert_eq!(p["conflicts"].as_array().map(Vec::len), Some(1), "{p}");
    let tokens: u64 = report
        .iter()
        .filter(|d| d["included"] == true)
        .map(|d| d["tokens"].as_u64().expect("tokens"))
        .sum();
    assert_eq!(p["tokens"].as_u64(), Some(tokens));
    assert!(tokens <= 300);
    // Every report line is about a visible memory; the hidden one is never named.
    assert_eq!(report.len(), 6, "{p}");
    assert!(!p.to_string().contains(&hidden) && !p.to_string().contains("7070"));
    let text = h
        .ok(&[
            "pack", "deploy", "--as", "bob", "--budget", "300", "--report",
        ])
        .stdout;
    assert!(text.contains("CONFLICT"), "{text}");
    assert!(!text.contains(&hidden) && !text.contains("7070"), "{text}");

    // Exact duplicates (modulo case and whitespace) are suppressed too.
    let same = h.add(
        "alice",
        "THE deploy script lives in   ops/deploy.sh on main",
        &["global"],
    );
    let p = h.json(&[
        "pack", "deploy", "--as", "bob", "--budget", "100000", "--report",
    ]);
    let n = ids_of(&p, "items");
    assert_eq!(
        n.iter()
            .filter(|i| [&first, &near, &same].contains(i))
            .count(),
        1,
        "{p}"
    );
}

// --------------------------------------------------------------- lifecycle

#[test]
fn retention_archives_expired_and_idle_memories_but_never_pinned_ones() {
    let h = Home::new();
    org(&h);
    let t0: u64 = 1_900_000_000_000;
    let (idle, pinned, recalled, expiring) = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let idle = node
            .add(&alice, new_mem("okapi one", &["global"]))
            .expect("add");
        let mut p = new_mem("okapi two", &["global"]);
        p.pinned = true;
        let pinned = node.add(&alice, p).expect("add");
        let recalled = node
            .add(&alice, new_mem("okapi three", &["global"]))
            .expect("add");
        let mut e = new_mem("okapi four", &["global"]);
        e.expires_ms = Some(t0 + DAY_MS);
        let expiring = node.add(&alice, e).expect("add");
        (idle, pinned, recalled, expiring)
    };
    {
        let mut node = open_at(&h, t0 + 60 * DAY_MS);
        let bob = node.requester("bob").expect("bob");
        let words = amos_node::recall::RecallOptions {
            mode: amos_node::recall::RecallMode::Lexical,
            ..amos_node::recall::RecallOptions::top(5)
        };
        node.search_with(&bob, "three", &words).expect("search");
    }
    let mut node = open_at(&h, t0 + 100 * DAY_MS);
    let policy = RetentionPolicy::default();
    let dry = node.retention_with(&policy, false).expect("dry run");
    let acted: BTreeSet<String> = dry.actions.iter().map(|a| a.id.clone()).collect();
    assert_eq!(
        acted,
        [idle.to_string(), expiring.to_string()].into(),
        "{dry:?}"
    );
    assert!(!dry.applied);
    let bob = node.requester("bob").expect("bob");
    // (`list`, not `search`: a search is a recall and would end the idleness.)
    assert_eq!(
        node.list(&bob, None, 10).expect("list").len(),
        3,
        "a dry run changes nothing"
    );
    node.retention_with(&policy, true).expect("apply");
    let left: BTreeSet<_> = node
        .search(&bob, "okapi", 10)
        .expect("search")
        .iter()
        .map(|h| h.memory.id())
        .collect();
    assert_eq!(left, [pinned, recalled].into());
    assert!(
        node.retention_with(&policy, false)
            .expect("again")
            .actions
            .is_empty()
    );
    // Without an idle rule only expiry counts.
    let strict = node
        .retention_with(&RetentionPolicy { idle_ms: None }, false)
        .expect("dry");
    assert!(strict.actions.is_empty());
    drop(node);
    // Archived, not gone: the owner restores it.
    h.ok(&["restore-memory", &idle.to_string(), "--as", "alice"]);
    assert!(h.search_ids("bob", "okapi", 10).contains(&idle.to_string()));
    // The CLI is a dry run by default and names what it would do.
    let r = h.json(&["retention", "--idle", "off"]);
    assert_eq!(r["applied"], false);
    assert_eq!(h.run(&["retention", "--idle", "soon"]).code, 2);
}

#[test]
fn a_recall_notes_each_hit_at_most_once_an_hour() {
    let h = Home::new();
    org(&h);
    let t0: u64 = 1_900_000_000_000;
    let hour: u64 = 60 * 60 * 1000;
    let (seen, other) = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let seen = node
            .add(&alice, new_mem("quokka feeding schedule", &["global"]))
            .expect("add");
        // Unrelated in words and in meaning (a marsupial would be near
        // enough for the semantic half of the search to find it).
        let other = node
            .add(
                &alice,
                new_mem("invoice numbering for the Berlin office", &["global"]),
            )
            .expect("add");
        (seen, other)
    };
    let noted = |id: &amos_protocol::MemoryId| -> (i64, Option<i64>) {
        ro_db(&h)
            .query_row(
                "SELECT recall_count, last_access_ms FROM memories WHERE id = ?1",
                [&id.0[..]],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("row")
    };
    assert_eq!(noted(&seen), (0, None));
    // A search at t0 + 1 s notes it; a search and a pack up to an hour
    // later do not note it again; a pack more than an hour after does.
    let later = t0 + 2000 + hour;
    let rounds: [(u64, bool, bool, i64); 3] = [
        (t0 + 1000, true, false, 1),
        (t0 + 1000 + hour, true, true, 1),
        (later, false, true, 2),
    ];
    for (at, search, pack, want) in rounds {
        let mut node = open_at(&h, at);
        let bob = node.requester("bob").expect("bob");
        if search {
            node.search(&bob, "quokka", 5).expect("search");
        }
        if pack {
            node.pack(&bob, "quokka", 400).expect("pack");
        }
        drop(node);
        let (count, last) = noted(&seen);
        assert_eq!(count, want, "notes of the hit by {at}");
        let noted_at = if want == 1 { t0 + 1000 } else { later };
        assert_eq!(last, Some(noted_at as i64));
    }
    // A memory no recall found is never noted.
    assert_eq!(noted(&other), (0, None));
}

#[test]
fn a_pack_notes_what_it_holds_and_not_a_hit_it_leaves_out() {
    let h = Home::new();
    org(&h);
    let t0: u64 = 1_900_000_000_000;
    let (short, long) = {
        let mut node = open_at(&h, t0);
        let alice = node.requester("alice").expect("alice");
        let short = node
            .add(&alice, new_mem("quokka feeding schedule", &["global"]))
            .expect("add");
        let long = node
            .add(
                &alice,
                new_mem(
                    &format!(
                        "quokka enclosure notes: {}",
                        "the keepers log every visit. ".repeat(12)
                    ),
                    &["global"],
                ),
            )
            .expect("add");
        (short, long)
    };
    let noted = |id: &amos_protocol::MemoryId| -> Option<i64> {
        ro_db(&h)
            .query_row(
                "SELECT last_access_ms FROM memories WHERE id = ?1",
                [&id.0[..]],
                |r| r.get(0),
            )
            .expect("row")
    };
    let mut node = open_at(&h, t0 + 1000);
    let bob = node.requester("bob").expect("bob");
    // Room for the short memory, not for the long one (about 100 tokens).
    let pack = node.pack(&bob, "quokka", 40).expect("pack");
    let decided = |id: &amos_protocol::MemoryId| {
        let d = pack
            .report
            .iter()
            .find(|d| d.id == id.to_string())
            .expect("decided");
        (d.included, d.decision)
    };
    assert_eq!(decided(&short), (true, "relevant"));
    assert_eq!(decided(&long), (false, "over-budget"));
    drop(node);
    assert_eq!(noted(&short), Some((t0 + 1000) as i64), "included: noted");
    assert_eq!(noted(&long), None, "left out: not noted");
}

#[test]
fn consolidate_merges_near_duplicates_and_keeps_every_source_reachable() {
    let h = Home::new();
    org(&h);
    let keep = h.add(
        "alice",
        "the build cache lives in /var/cache/build on ci",
        &[],
    );
    let near = h.add(
        "alice",
        "the build cache lives in /var/cache/build on ci runners",
        &[],
    );
    let exact = h.add(
        "alice",
        "The build cache lives in /var/cache/build on CI",
        &[],
    );
    let other_grants = h.add(
        "alice",
        "the build cache lives in /var/cache/build on ci",
        &["global"],
    );
    let unrelated = h.add("alice", "lunch is at noon", &[]);
    let digest_before = digest(&h);

    let dry = h.json(&["consolidate"]);
    assert_eq!(dry["applied"], false);
    let actions = dry["actions"].as_array().expect("actions");
    let merged: BTreeSet<String> = actions
        .iter()
        .map(|a| a["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(merged, [near.clone(), exact.clone()].into(), "{dry}");
    assert!(actions.iter().all(|a| a["into"] == keep.as_str()), "{dry}");
    assert_eq!(digest(&h), digest_before, "a dry run changes nothing");
    assert_eq!(h.search_ids("alice", "cache", 10).len(), 4);

    h.json(&["consolidate", "--apply"]);
    let left: BTreeSet<String> = h.search_ids("alice", "cache", 10).into_iter().collect();
    assert_eq!(left, [keep.clone(), other_grants.clone()].into());
    assert!(h.search_ids("alice", "lunch", 10).contains(&unrelated));
    // Every source is still there: readable, linked from the survivor, not tombstoned.
    let db = ro_db(&h);
    for src in [&near, &exact] {
        assert_eq!(h.json(&["get", src, "--as", "alice"])["archived"], true);
        let mid: amos_protocol::MemoryId = src.parse().expect("id");
        let kid: amos_protocol::MemoryId = keep.parse().expect("id");
        let (links, tomb): (i64, i64) = db
            .query_row(
                "SELECT (SELECT count(*) FROM links WHERE from_id = ?1 AND to_id = ?2 AND relation = 'consolidates' AND present = 1),
                        (SELECT count(*) FROM memories WHERE id = ?2 AND tombstone_fact IS NOT NULL)",
                [&kid.0[..], &mid.0[..]],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("query");
        assert_eq!((links, tomb), (1, 0), "{src}");
    }
    assert!(
        h.json(&["consolidate"])["actions"]
            .as_array()
            .expect("a")
            .is_empty()
    );
    h.ok(&["restore-memory", &near, "--as", "alice"]);
    assert!(h.search_ids("alice", "runners", 10).contains(&near));
    let again = h.json(&["consolidate"]);
    assert!(
        again["actions"].as_array().expect("a").is_empty(),
        "a restored source stays: {again}"
    );
    assert_eq!(h.json(&["check"])["ok"], true);
}

// ----------------------------------------------------------- backup, check

#[test]
fn backups_rotate_and_a_restore_rebuilds_the_index() {
    let h = Home::new();
    org(&h);
    let id = h.add("alice", "capybara census", &["global"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("amos.bak");
    let file_s = file.display().to_string();
    let mut written = Vec::new();
    for _ in 0..4 {
        let r = h.json(&["backup", &file_s, "--keep", "2"]);
        written.push(r["file"].as_str().expect("file").to_owned());
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    for n in &names {
        let stamp = n.strip_prefix("amos.bak.").expect("named from FILE");
        assert!(
            stamp.len() == 19 && stamp.ends_with('Z') && stamp.as_bytes()[8] == b'T',
            "{n}"
        );
    }
    let newest = written.last().expect("newest").clone();
    assert!(
        newest.ends_with(names.last().expect("name")),
        "{newest} {names:?}"
    );
    assert_eq!(h.run(&["backup", &file_s, "--keep", "0"]).code, 2);

    // A plain backup writes FILE itself.
    h.ok(&["backup", &file_s]);
    assert!(file.is_file());

    let fresh = Home::new();
    assert_eq!(
        fresh.run(&["restore", &newest]).code,
        0,
        "an empty store needs no --force"
    );
    assert_eq!(fresh.search_ids("alice", "capybara", 5), vec![id.clone()]);
    h.add("alice", "capybara later", &["global"]);
    assert_eq!(
        h.run(&["restore", &newest]).code,
        3,
        "a store with memories needs --force"
    );
    h.ok(&["restore", &newest, "--force"]);
    assert_eq!(h.search_ids("alice", "capybara", 5), vec![id]);
    let check = h.json(&["check"]);
    assert_eq!(check["ok"], true, "{check}");
}

#[test]
fn check_reports_links_to_missing_memories() {
    let h = Home::new();
    org(&h);
    let a = h.add("alice", "tapir note", &[]);
    let b = h.add("alice", "tapir other", &[]);
    h.ok(&["link", &a, &b, "--as", "alice"]);
    assert_eq!(h.json(&["check"])["ok"], true);
    let mid: amos_protocol::MemoryId = b.parse().expect("id");
    {
        let db = Connection::open(h.path().join("amos.db")).expect("db");
        db.execute("PRAGMA foreign_keys = OFF", []).expect("fk");
        db.execute("DELETE FROM memory_grants WHERE memory = ?1", [&mid.0[..]])
            .expect("del");
        db.execute("DELETE FROM memories WHERE id = ?1", [&mid.0[..]])
            .expect("del");
    }
    let r = h.run(&["--json", "check"]);
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["ok"], false);
    assert_eq!(v["dangling_links"], 1);
    assert_eq!(v["dangling"][0]["to"], b.as_str(), "{v}");
    assert_eq!(v["dangling"][0]["from"], a.as_str(), "{v}");
}

#[test]
fn profiles_replicate_but_feedback_stays_local() {
    let a = Home::new();
    let b = Home::new();
    let id = |h: &Home| h.json(&["id"])["node_id"].as_str().expect("id").to_owned();
    a.ok(&["peers", "add", &id(&b), "--policy", "full"]);
    b.ok(&["peers", "add", &id(&a), "--policy", "full"]);
    org(&a);
    let m = a.add("alice", "kestrel hover", &["global"]);
    let n = a.add("alice", "falcon dive", &["global"]);
    a.ok(&["link", &m, &n, "--as", "alice"]);
    a.ok(&["profile", "set", "bob", "procedure=3"]);
    a.ok(&["feedback", &m, &n, "--helpful", "--as", "bob"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.amosb");
    a.ok(&["bundle", "export", &file.display().to_string()]);
    b.ok(&["bundle", "import", &file.display().to_string()]);
    assert_eq!(digest(&a)["digest"], digest(&b)["digest"]);
    assert_eq!(
        b.json(&["profile", "show", "bob"])["weights"],
        serde_json::json!({"procedure": 3.0})
    );
    // Reinforcement is this node's own: b starts neutral.
    let r = |h: &Home| {
        hit(&h.json(&["search", "kestrel", "--as", "bob"]), &m)["explain"]["reinforcement"]
            .as_f64()
            .expect("reinforcement")
    };
    assert!(r(&a) > 1.0);
    assert_eq!(r(&b), 1.0);
}

#[test]
fn pinned_core_memories_take_the_reserve_first_then_what_is_left() {
    let h = Home::new();
    org(&h);
    // 26 bytes → 7 + 8 = 15 tokens; the hit: 9 bytes → 3 + 8 = 11 tokens.
    let core = h.json(&["add", "core rule alpha beta gamma", "--as", "bob", "--pin"])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let hit = h.add("alice", "zebu herd", &["global"]);
    let decision = |budget: &str| {
        let p = h.json(&[
            "pack", "zebu", "--as", "bob", "--budget", budget, "--report",
        ]);
        assert!(ids_of(&p, "items").contains(&hit), "{p}");
        let d = p["report"]
            .as_array()
            .expect("report")
            .iter()
            .find(|d| d["id"] == core.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("core not reported: {p}"));
        (
            d["included"] == true,
            d["reason"].as_str().expect("reason").to_owned(),
        )
    };
    let (inn, why) = decision("100"); // reserve 25 ≥ 15
    assert!(inn && why.contains("reserved room"), "{why}");
    let (inn, why) = decision("30"); // reserve 7 < 15; 30 - 11 ≥ 15
    assert!(inn && why.contains("what the query left"), "{why}");
    let (inn, why) = decision("20"); // reserve 5; 20 - 11 < 15
    assert!(!inn && why.contains("full"), "{why}");
}
