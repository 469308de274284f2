//! Pairing by code between real `amos` processes on 127.0.0.1
//! (docs/design.md §7): `amos team invite` on a serving node, `amos join CODE` on
//! another. Three nodes pair and converge, relaying through the inviter;
//! mistyped, expired, reused and forged codes are refused with exit 2 and
//! nothing recorded on either side; a stranger let in to pair cannot sync;
//! `amos join --offline` pairs for bundles, and the inviter accepts the
//! joiner from its first, signed bundle exactly once. A joiner that serves
//! only after joining is dialled by its inviter once it synced (its hello
//! says where it serves); `amos join --as AGENT` makes the joiner's agent a
//! member of the invite's team, never one of the inviter's own agents.

use crate::common::Home;
use crate::common::server::{Server, free_port, id};
use amos_protocol::pairing::PairingCode;
use serde_json::Value;

fn invite(h: &Home, args: &[&str]) -> String {
    let mut a = vec!["team", "invite", "apollo"];
    a.extend_from_slice(args);
    h.json(&a)["code"].as_str().expect("code").to_owned()
}

fn peers(h: &Home) -> Vec<Value> {
    h.json(&["peers", "list"])["peers"]
        .as_array()
        .expect("peers")
        .clone()
}

fn peer_ids(h: &Home) -> Vec<String> {
    peers(h)
        .iter()
        .map(|p| p["node_id"].as_str().expect("node_id").to_owned())
        .collect()
}

fn digest(h: &Home, scope: &str) -> String {
    h.digest(scope)
}

/// A node with team `apollo` and agent `alice` in it.
fn inviter() -> Home {
    Home::apollo()
}

/// Re-encode a real code with one change (a valid checksum: not a typo).
fn forge(code: &str, change: impl FnOnce(&mut PairingCode)) -> String {
    let mut c = PairingCode::decode(code).expect("a real code decodes");
    change(&mut c);
    c.encode()
}

#[test]
fn three_nodes_pair_by_code_converge_and_relay_through_the_inviter() {
    let a = inviter();
    a.ok(&["mesh", "key", "generate"]);
    let secret_of_a = a.add("alice", "alice keeps the deploy key offline", &[]);
    let team_note = a.add("alice", "standup moves to 10:30", &["team:apollo"]);
    let server = Server::start(a.path());

    // b joins; the first sync brings the team, its members and its memory.
    let b = Home::new();
    let code_b = invite(&a, &[]);
    let joined = b.json(&["join", &code_b]);
    assert_eq!(joined["peer"], id(&a));
    assert_eq!(joined["policy"], "team:apollo");
    assert_eq!(joined["mesh_key"], "adopted");
    assert_eq!(joined["first_sync"]["result"], "ok", "{joined}");
    assert_eq!(
        b.json(&["mesh", "key", "show"]),
        a.json(&["mesh", "key", "show"])
    );
    // Both sides recorded each other, with the invite's policy.
    let on_a = peers(&a);
    assert_eq!(on_a.len(), 1);
    assert_eq!(on_a[0]["node_id"], id(&b));
    assert_eq!(on_a[0]["policy"], "team:apollo");
    assert_eq!(peer_ids(&b), vec![id(&a)]);
    // b's bob joins apollo by its origin, a (b may not change a's roster).
    b.ok(&["agent", "add", "bob"]);
    assert_eq!(b.run(&["team", "add", "apollo", "bob"]).code, 3);
    a.ok(&["agent", "add", "bob", "--team", "apollo"]);
    let (code, outcomes) = b.sync(&["now"]);
    assert_eq!(code, 0, "{outcomes:?}");
    assert_eq!(b.search_ids("bob", "standup", 5), vec![team_note.clone()]);
    // The invite's policy held: a's private memory never left a.
    assert!(b.run(&["get", &secret_of_a, "--as", "bob"]).code == 2);

    // The code is spent: a second node cannot use it.
    let c = Home::new();
    let reused = c.run(&["join", &code_b]);
    assert_eq!(reused.code, 2, "{reused:?}");
    assert!(reused.stderr.contains("used"), "{reused:?}");
    assert!(peers(&c).is_empty());
    assert_eq!(peer_ids(&a), vec![id(&b)]);

    // c joins with its own code; then b writes, and c receives it through a.
    // c's carol joins apollo as part of pairing (a, apollo's origin, adds her).
    let code_c = invite(&a, &["--ttl", "5m"]);
    c.ok(&["agent", "add", "carol"]);
    c.ok(&["join", &code_c, "--as", "carol"]);
    let from_b = b.add(
        "bob",
        "the release train leaves on fridays",
        &["team:apollo"],
    );
    for _ in 0..3 {
        b.ok(&["sync", "now"]);
        c.ok(&["sync", "now"]);
        if digest(&a, "team:apollo") == digest(&b, "team:apollo")
            && digest(&b, "team:apollo") == digest(&c, "team:apollo")
        {
            break;
        }
    }
    assert_eq!(digest(&a, "team:apollo"), digest(&b, "team:apollo"));
    assert_eq!(digest(&b, "team:apollo"), digest(&c, "team:apollo"));
    assert_eq!(c.search_ids("carol", "release train", 5), vec![from_b]);
    assert!(server.log().contains("paired with"), "{}", server.log());
}

#[test]
fn bad_codes_are_refused_with_exit_2_and_record_nothing_anywhere() {
    let a = inviter();
    let _server = Server::start(a.path());
    let b = Home::new();
    let code = invite(&a, &[]);
    let before_a = (peers(&a).len(), a.fingerprint());
    let before_b = b.fingerprint();

    let refused = |code: &str, why: &str| {
        let r = b.run(&["join", code]);
        assert_eq!(r.code, 2, "{why}: {r:?}");
        assert!(r.stderr.contains(why), "{why}: {r:?}");
        assert_eq!(r.stderr.trim().lines().count(), 1, "one line: {r:?}");
        assert!(peers(&b).is_empty(), "{why}: b recorded a peer");
        assert_eq!(b.fingerprint(), before_b, "{why}: b changed");
        assert_eq!(
            (peers(&a).len(), a.fingerprint()),
            before_a,
            "{why}: a changed"
        );
    };
    // Mistyped: one character changed (caught by the checksum, nothing dialled).
    let pos = code.len() / 2;
    let typo: String = code
        .char_indices()
        .map(|(i, ch)| {
            if i == pos {
                if ch == 'a' { 'b' } else { 'a' }
            } else {
                ch
            }
        })
        .collect();
    refused(&typo, "bad pairing code");
    refused("amos1-", "bad pairing code");
    // Expired (the joiner checks before dialling).
    refused(&forge(&code, |c| c.expires_ms = 1_000), "expired");
    // Forged: the right inviter, a guessed secret. The inviter refuses, and
    // says no more than "unknown".
    refused(&forge(&code, |c| c.secret[0] ^= 1), "unknown pairing code");
    // Forged: another inviter's name on this address. The key check fails.
    let other = Home::new();
    let other_id: amos_protocol::NodeId = id(&other).parse().expect("node id");
    refused(&forge(&code, |c| c.inviter = other_id), "not the inviter");
    // A wider policy written into the code proves nothing: the proof covers
    // the policy, checked against the invite the inviter stored.
    refused(
        &forge(&code, |c| c.policy = "full".into()),
        "unknown pairing code",
    );

    // None of that spent the invite: the real code still pairs.
    let ok = b.json(&["join", &code]);
    assert_eq!(ok["policy"], "team:apollo");
    assert_eq!(peer_ids(&a), vec![id(&b)]);
}

#[test]
fn an_unreachable_inviter_is_a_failure_not_bad_input() {
    let a = inviter();
    let dead = format!("127.0.0.1:{}", free_port());
    let code = invite(&a, &["--addr", &dead]);
    let b = Home::new();
    let r = b.run(&["join", &code]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("cannot reach the inviter"), "{r:?}");
    assert!(peers(&b).is_empty());
}

#[test]
fn a_stranger_let_in_to_pair_cannot_sync() {
    let a = inviter();
    a.add("alice", "the team's only memory", &["team:apollo"]);
    let server = Server::start(a.path());
    // A pending invite makes the server accept unknown keys — to pair only.
    let _pending = invite(&a, &[]);
    let before = a.fingerprint();
    let stranger = Home::new();
    stranger.ok(&["peers", "add", &id(&a), &server.addr, "--policy", "full"]);
    stranger.ok(&["agent", "add", "mallory"]);
    stranger.add("mallory", "planted by a stranger", &["global"]);
    let stranger_before = stranger.fingerprint();
    let r = stranger.run(&["--json", "sync", "now"]);
    assert_ne!(r.code, 0, "{r:?}");
    let result = &r.json()["peers"][0];
    assert_ne!(result["result"], "ok", "{r:?}");
    assert_eq!(result["facts_in"], 0);
    assert_eq!(a.fingerprint(), before, "nothing from the stranger applied");
    assert!(peers(&a).is_empty());
    assert_eq!(
        stranger.fingerprint(),
        stranger_before,
        "nothing of a's left a"
    );
}

#[test]
fn offline_join_pairs_through_the_first_signed_bundle_once() {
    let a = inviter();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str| dir.path().join(name).display().to_string();
    // No server: the code's address is only a hint for later.
    let code = invite(&a, &["--addr", "127.0.0.1:4747"]);

    let b = Home::new();
    let joined = b.json(&["join", &code, "--offline"]);
    assert_eq!(joined["peer"], id(&a));
    assert_eq!(joined["policy"], "team:apollo");
    assert!(joined["first_sync"].is_null());
    assert!(
        peers(&a).is_empty(),
        "offline: the inviter knows nothing yet"
    );
    // The inviter hands over the team on the same air gap (with b's bob in
    // it: a, the team's origin, adds him).
    a.ok(&["agent", "add", "bob", "--team", "apollo"]);
    a.ok(&[
        "bundle",
        "export",
        &file("team.amosb"),
        "--scope",
        "team:apollo",
    ]);
    b.ok(&["bundle", "import", &file("team.amosb")]);
    b.ok(&["agent", "add", "bob"]);
    let from_b = b.add(
        "bob",
        "the air-gapped site rotates keys monthly",
        &["team:apollo"],
    );
    b.ok(&["bundle", "export", &file("b1.amosb"), "--for", &id(&a)]);

    // The inviter accepts b from its first bundle, with the invite's policy.
    a.ok(&["bundle", "import", &file("b1.amosb")]);
    let on_a = peers(&a);
    assert_eq!(on_a.len(), 1);
    assert_eq!(on_a[0]["node_id"], id(&b));
    assert_eq!(on_a[0]["policy"], "team:apollo");
    assert_eq!(a.search_ids("alice", "air-gapped", 5), vec![from_b]);
    // Importing it again is a no-op.
    a.ok(&["bundle", "import", &file("b1.amosb")]);
    assert_eq!(peers(&a).len(), 1);

    // And back: a's bundle for b carries the team.
    a.add("alice", "site visits need two badges", &["team:apollo"]);
    a.ok(&["bundle", "export", &file("a1.amosb"), "--for", &id(&b)]);
    b.ok(&["bundle", "import", &file("a1.amosb")]);
    assert_eq!(b.search_ids("bob", "badges", 5).len(), 1);

    // The spent code pairs no one else, and a guessed secret pairs no one.
    for (who, code) in [
        ("reused", code.clone()),
        ("forged", forge(&code, |c| c.secret[3] ^= 0x40)),
    ] {
        let c = Home::new();
        c.ok(&["join", &code, "--offline"]);
        let f = file(&format!("{who}.amosb"));
        c.ok(&["bundle", "export", &f, "--for", &id(&a)]);
        let before = a.fingerprint();
        let r = a.run(&["bundle", "import", &f]);
        assert_eq!(r.code, 1, "{who}: {r:?}");
        assert!(
            r.stderr.contains("pairing proof was refused"),
            "{who}: {r:?}"
        );
        assert_eq!(peers(&a).len(), 1, "{who}: a recorded a peer");
        assert_eq!(a.fingerprint(), before, "{who}: a changed");
    }
}

fn team_members(h: &Home, team: &str) -> Vec<String> {
    h.json(&["team", "list"])["teams"]
        .as_array()
        .expect("teams")
        .iter()
        .find(|t| t["id"] == team)
        .map(|t| {
            t["members"]
                .as_array()
                .expect("members")
                .iter()
                .map(|m| m.as_str().expect("member").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_joiner_that_serves_only_after_joining_is_dialled_by_its_inviter() {
    let a = inviter();
    let server_a = Server::start(a.path());
    let b = Home::new();
    // b has never served: the join tells a no port, a records no address.
    b.ok(&["join", &invite(&a, &[])]);
    let on_a = peers(&a);
    assert_eq!(on_a.len(), 1);
    assert!(on_a[0]["addr"].is_null(), "{on_a:?}");
    let (code, outcomes) = a.sync(&["auto"]);
    assert_eq!(code, 0);
    assert!(outcomes.is_empty(), "no address to dial yet: {outcomes:?}");

    // b serves now, on the wildcard address (as `amos serve` does by default).
    let port = free_port();
    let _server_b = Server::start_with(b.path(), None, &format!("0.0.0.0:{port}"), &["--no-mdns"]);
    // One sync b dials: its hello says where it serves, a records it as the
    // address b came from (loopback here) with b's port.
    let (code, outcomes) = b.sync(&["now"]);
    assert_eq!(code, 0, "{outcomes:?}");
    assert_eq!(outcomes[0]["result"], "ok", "{outcomes:?}");
    let on_a = peers(&a);
    assert_eq!(on_a[0]["node_id"], id(&b));
    assert_eq!(on_a[0]["addr"], format!("127.0.0.1:{port}"), "{on_a:?}");
    // Learning an address changed nothing else: same peer, same policy.
    assert_eq!(on_a.len(), 1);
    assert_eq!(on_a[0]["policy"], "team:apollo");
    assert!(server_a.log().contains("serves at"), "{}", server_a.log());

    // Now a dials b: `sync auto` reaches it and pulls what b wrote since.
    b.ok(&["agent", "add", "bob"]);
    let from_b = b.add(
        "bob",
        "the joiner's late note on rollbacks",
        &["team:apollo"],
    );
    let (code, outcomes) = a.sync(&["auto"]);
    assert_eq!(code, 0, "{outcomes:?}");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0]["peer"], id(&b));
    assert_eq!(outcomes[0]["result"], "ok", "{outcomes:?}");
    assert_eq!(a.search_ids("alice", "rollbacks", 5), vec![from_b]);
}

#[test]
fn join_as_an_agent_makes_it_a_member_of_the_invites_team() {
    let a = inviter();
    let note = a.add(
        "alice",
        "apollo freezes deploys on fridays",
        &["team:apollo"],
    );
    let _server = Server::start(a.path());

    // b, a fresh joiner with no agent at all, pairs as bob: `--as bob`
    // registers bob on b, the inviter adds bob to apollo in the accepting
    // transaction, and the membership (authored by a) reaches b with the
    // first sync under the team:apollo policy. (An agent registered
    // before: first_hour::join_as_keeps_a_registered_agent_and_registers_offline.)
    let b = Home::new();
    let joined = b.json(&["join", &invite(&a, &[]), "--as", "bob"]);
    assert_eq!(joined["first_sync"]["result"], "ok", "{joined}");
    assert_eq!(joined["agent"], "bob");
    assert_eq!(joined["registered"], "bob", "{joined}");
    assert_eq!(joined["member_of"], serde_json::json!(["team:apollo"]));
    let agents = b.json(&["agent", "list"])["agents"].clone();
    assert_eq!(agents[0]["id"], "bob", "{agents}");
    assert_eq!(
        agents[0]["teams"],
        serde_json::json!(["apollo"]),
        "{agents}"
    );
    assert_eq!(team_members(&a, "apollo"), vec!["alice", "bob"]);
    assert_eq!(team_members(&b, "apollo"), vec!["alice", "bob"]);
    assert_eq!(
        b.search_ids("bob", "deploys fridays", 5),
        vec![note.clone()]
    );
    // The inviter did not register b's agent as one of its own.
    let agents_a = a.json(&["agent", "list"]).to_string();
    assert!(!agents_a.contains("\"bob\""), "{agents_a}");

    // Control: a joiner that names no agent adds nobody.
    let c = Home::new();
    c.ok(&["agent", "add", "carol"]);
    let joined = c.json(&["join", &invite(&a, &[])]);
    assert!(joined["member_of"].is_null(), "{joined}");
    assert!(c.search_ids("carol", "deploys fridays", 5).is_empty());
    assert_eq!(team_members(&a, "apollo"), vec!["alice", "bob"]);

    // The agent must be a well-formed id (a join registers it on the
    // joiner when it is not yet: see the fresh joiner b above).
    let d = Home::new();
    let code = invite(&a, &[]);
    let r = d.run(&["join", &code, "--as", "No Body"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(peers(&d).is_empty());

    // Attack: a joiner names one of the inviter's own agents (eve is not in
    // apollo). Refused, nothing recorded on either side, the invite unspent.
    // eve is not registered on d either: a refused join registers nothing.
    a.ok(&["agent", "add", "eve"]);
    let before = (peers(&a).len(), a.fingerprint());
    let r = d.run(&["join", &code, "--as", "eve"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("inviter's own agents"), "{r:?}");
    assert_eq!((peers(&a).len(), a.fingerprint()), before);
    assert_eq!(team_members(&a, "apollo"), vec!["alice", "bob"]);
    assert!(peers(&d).is_empty());
    assert_eq!(d.json(&["agent", "list"])["agents"], serde_json::json!([]));
    d.ok(&["join", &code]);
    assert_eq!(peer_ids(&d), vec![id(&a)]);

    // A `full` invite names no team: --as is ignored, with a note.
    let e = Home::new();
    e.ok(&["agent", "add", "erin"]);
    let r = e.ok(&["join", &invite(&a, &["--policy", "full"]), "--as", "erin"]);
    assert!(r.stderr.contains("ignored"), "{r:?}");
    assert!(!team_members(&a, "apollo").contains(&"erin".to_owned()));
}
