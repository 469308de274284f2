//! No edit is ever lost, end to end (docs/design.md §4, "Concurrent content
//! edits"): real `amos` processes, real QUIC on 127.0.0.1.
//!
//! * Two `full` peers edit the same memory while they do not sync; after a
//!   sync both edits are in the text on both nodes, in the same order, the
//!   digests agree and `amos history` lists both edits with their authors.
//! * A node whose peer is scoped cannot edit that peer's memory (the origin
//!   rule holds for edits too).
//! * A long history is compacted by the origin and still converges.

use crate::common::Home;
use crate::common::server::{Server, id, pair};
use serde_json::Value;

fn text_of(h: &Home, mem: &str) -> String {
    h.json(&["get", mem, "--as", "alice"])["content"]
        .as_str()
        .expect("content")
        .to_owned()
}

fn history(h: &Home, mem: &str) -> Vec<Value> {
    h.json(&["history", mem, "--as", "alice"])["edits"]
        .as_array()
        .expect("edits")
        .clone()
}

/// Two full peers, `a` serving; both know alice (agents flow between full
/// peers). Returns (a, b, server).
fn full_pair() -> (Home, Home, Server) {
    let a = Home::apollo();
    let b = Home::new();
    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    (a, b, server)
}

fn synced(b: &Home, server: &Server) {
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert_eq!(peers[0]["result"], "ok", "{peers:?}");
}

#[test]
fn two_full_peers_edit_apart_and_both_edits_survive() {
    let (a, b, server) = full_pair();
    let base = "deploy runbook\n1. build the release\n";
    let mem = a.add("alice", base, &["team:apollo"]);
    synced(&b, &server);
    assert_eq!(text_of(&b, &mem), base);

    // Apart: each appends its own step.
    let on_a = format!("{base}2. restart the api on a\n");
    let on_b = format!("{base}2. rotate the logs on b\n");
    a.ok(&["update", &mem, &on_a, "--as", "alice"]);
    b.ok(&["update", &mem, &on_b, "--as", "alice"]);
    assert_eq!(text_of(&a, &mem), on_a);
    assert_eq!(text_of(&b, &mem), on_b);

    synced(&b, &server);
    let merged = text_of(&a, &mem);
    assert_eq!(text_of(&b, &mem), merged, "byte-identical on both nodes");
    assert!(merged.starts_with(base), "{merged:?}");
    assert!(merged.contains("2. restart the api on a\n"), "{merged:?}");
    assert!(merged.contains("2. rotate the logs on b\n"), "{merged:?}");
    assert_eq!(a.digest("team:apollo"), b.digest("team:apollo"));
    assert_eq!(a.json(&["digest"])["digest"], b.json(&["digest"])["digest"]);

    // Search finds the merged text on both (it is what is indexed).
    for h in [&a, &b] {
        assert_eq!(h.search_ids("alice", "rotate logs", 5), vec![mem.clone()]);
        assert_eq!(h.search_ids("alice", "restart api", 5), vec![mem.clone()]);
    }

    // History: the base and both edits, each with its author, on both nodes.
    let (ida, idb) = (id(&a), id(&b));
    for h in [&a, &b] {
        let edits = history(h, &mem);
        let kinds: Vec<&str> = edits.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["created", "edit", "edit"], "{edits:?}");
        let authors: Vec<&str> = edits[1..]
            .iter()
            .map(|e| e["author"].as_str().unwrap())
            .collect();
        assert!(
            authors.contains(&ida.as_str()) && authors.contains(&idb.as_str()),
            "{edits:?}"
        );
        assert_eq!(edits[0]["author"], ida.as_str());
    }

    // A further edit on b (on top of the merge) travels as one small change.
    let next = format!("{merged}3. announce\n");
    b.ok(&["update", &mem, &next, "--as", "alice"]);
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0);
    assert_eq!(peers[0]["facts_out"], 1, "only the edit travels: {peers:?}");
    assert_eq!(text_of(&a, &mem), next);
}

#[test]
fn a_scoped_peer_cannot_edit_and_a_replica_of_it_stays_read_only() {
    // apollo is a's team; c learns it (and alice's place in it) by sync.
    let a = Home::apollo();
    let c = Home::new();
    c.ok(&["agent", "add", "alice"]);
    let server = Server::start(a.path());
    pair(&a, &c, &server, "team:apollo");
    let mem = a.add("alice", "the shared plan", &["team:apollo"]);
    synced(&c, &server);
    assert_eq!(text_of(&c, &mem), "the shared plan");
    let before = c.fingerprint();
    let r = c.run(&[
        "update",
        &mem,
        "the shared plan, changed on c",
        "--as",
        "alice",
    ]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("not a full peer"), "{}", r.stderr);
    assert_eq!(c.fingerprint(), before, "nothing written");
    synced(&c, &server);
    assert_eq!(text_of(&a, &mem), "the shared plan");
}

#[test]
fn the_origin_compacts_a_long_history_and_peers_converge_on_it() {
    let (a, b, server) = full_pair();
    let mut text = String::from("log of the week\n");
    let mem = a.add("alice", &text, &["team:apollo"]);
    synced(&b, &server);
    // Small budget: compaction after a few edits.
    for i in 0..12 {
        text.push_str(&format!("entry {i} on a\n"));
        a.ok(&[
            "update",
            &mem,
            &text,
            "--as",
            "alice",
            "--compact-at",
            "1500",
        ]);
    }
    // b edits concurrently, before it sees the snapshot.
    let on_b = format!("{}b was here\n", text_of(&b, &mem));
    b.ok(&["update", &mem, &on_b, "--as", "alice"]);
    synced(&b, &server);
    let merged = text_of(&a, &mem);
    assert_eq!(text_of(&b, &mem), merged);
    assert!(
        merged.contains("entry 11 on a\n") && merged.contains("b was here\n"),
        "{merged:?}"
    );
    assert_eq!(a.json(&["digest"])["digest"], b.json(&["digest"])["digest"]);
    let kinds: Vec<String> = history(&a, &mem)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.contains(&"snapshot".to_owned()), "{kinds:?}");
    assert!(
        kinds.len() < 12,
        "compacted edits are not listed one by one: {kinds:?}"
    );
    assert_eq!(history(&b, &mem).len(), kinds.len());
}
