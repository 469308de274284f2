//! The first hour of a new user (issue 44, items 1 and 5), through the real
//! binary: `amos join --as` on a fresh joiner registers its agent; `amos
//! mcp` with an unregistered agent refuses with the command that registers
//! it; on the second node of the air gap, an agent known only from a
//! roster, and a roster that belongs to another node, are explained with
//! the command that helps; an amos export imported into the node that made
//! it writes nothing, and into another keeps its supersession; and the
//! inviter of an offline join is told how to register the joiner.

use std::process::Stdio;

use crate::common::Home;
use crate::common::server::{Server, id};

/// `amos team invite apollo ARGS…` on `h`: the code.
fn invite(h: &Home, args: &[&str]) -> String {
    let mut a = vec!["team", "invite", "apollo"];
    a.extend_from_slice(args);
    h.json(&a)["code"].as_str().expect("code").to_owned()
}

#[test]
fn join_as_keeps_a_registered_agent_and_registers_offline() {
    // A fresh joiner's `--as` registering the agent and making it a member:
    // pairing::join_as_an_agent_makes_it_a_member_of_the_invites_team.
    let a = Home::apollo();
    let _server = Server::start(a.path());

    // Already registered: nothing to register, and the text says nothing of it.
    let c = Home::new();
    c.ok(&["agent", "add", "carol"]);
    let r = c.ok(&["join", &invite(&a, &[]), "--as", "carol"]);
    assert!(!r.stdout.contains("registered"), "{r:?}");
    assert!(
        r.stdout.contains("carol is a member of team:apollo"),
        "{r:?}"
    );

    // Offline: not carried, but registered here all the same.
    let d = Home::new();
    let r = d.ok(&["join", &invite(&a, &[]), "--offline", "--as", "dan"]);
    assert!(r.stdout.contains("agent dan registered"), "{r:?}");
    assert!(r.stderr.contains("amos agent add dan --team TEAM"), "{r:?}");
    assert_eq!(d.json(&["agent", "list"])["agents"][0]["id"], "dan");
}

#[test]
fn mcp_refuses_an_unregistered_agent_with_the_command_that_registers_it() {
    let h = Home::apollo();
    let before = h.fingerprint();
    let out = h
        .cmd()
        .env("AMOS_AGENT", "claude")
        .arg("mcp")
        .stdin(Stdio::piped())
        .output()
        .expect("spawn amos mcp");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "stdout is the protocol's alone");
    assert!(
        stderr.contains("amos mcp serves a registered agent and makes none")
            && stderr.contains("`amos agent add claude`"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert_eq!(h.fingerprint(), before, "no agent was made");

    // The command it names is the whole fix.
    h.ok(&["agent", "add", "claude", "--team", "apollo"]);
    let shared = h.add(
        "alice",
        "the release train leaves at noon",
        &["team:apollo"],
    );
    let mut claude = crate::mcp::Client::start(&h, "claude");
    let hits = claude.ok(
        "memory_search",
        serde_json::json!({"query": "release train"}),
    );
    assert_eq!(hits["hits"][0]["id"], shared.as_str(), "{hits}");
}

/// The README's air gap: laptop `a` (apollo: alice, bob) sends a bundle to
/// `s`, a scoped peer. On `s` the roster names alice and bob, who are not
/// agents of `s`.
fn air_gap() -> (Home, Home, String) {
    let a = Home::apollo();
    a.ok(&["agent", "add", "bob", "--team", "apollo"]);
    let m = a.add("alice", "release freeze starts on friday", &["team:apollo"]);
    let s = Home::new();
    s.ok(&["peers", "add", &id(&a), "--policy", "team:apollo"]);
    a.ok(&["peers", "add", &id(&s), "--policy", "team:apollo"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.bndl").display().to_string();
    a.ok(&["bundle", "export", &file, "--for", &id(&s)]);
    s.ok(&["bundle", "import", &file]);
    (a, s, m)
}

#[test]
fn the_second_node_of_the_air_gap_says_why_and_what_to_run() {
    let (a, s, m) = air_gap();
    let teams = s.json(&["team", "list"])["teams"].clone();
    assert_eq!(teams[0]["members"], serde_json::json!(["alice", "bob"]));
    assert_eq!(s.json(&["agent", "list"])["agents"], serde_json::json!([]));
    let short: String = id(&a).chars().take(10).collect();

    // bob is on the roster but not an agent here: the line says so, and
    // how to act as bob here.
    let r = s.run(&["search", "release freeze", "--as", "bob"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "bob is a member of team apollo (kept by node {short}) but not an agent of this node"
        )) && r
            .stderr
            .contains("run `amos agent add bob` here to act as bob"),
        "{r:?}"
    );
    // An agent on no roster: agents are local, and the command.
    let r = s.run(&["search", "release freeze", "--as", "zed"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("agents are local") && r.stderr.contains("`amos agent add zed`"),
        "{r:?}"
    );

    // The roster belongs to a: refused, naming the rule, where and what.
    let before = s.fingerprint();
    let r = s.run(&["agent", "add", "carol", "--team", "apollo"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("the org origin rule")
            && r.stderr.contains(&format!(
                "`amos agent add carol --team apollo` on node {short}"
            ))
            && r.stderr.contains("`amos agent add carol` here"),
        "{r:?}"
    );
    assert_eq!(s.fingerprint(), before, "refused: nothing changed");
    let r = s.run(&["team", "add", "apollo", "alice"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains(&format!("belongs to node {short}"))
            && r.stderr.contains("the org origin rule")
            && r.stderr
                .contains(&format!("run this on node {short} and sync")),
        "{r:?}"
    );

    // Doing what the line says works, and widens nothing: bob sees what
    // the roster gives him.
    s.ok(&["agent", "add", "bob"]);
    assert_eq!(s.search_ids("bob", "release freeze", 5), vec![m]);
}

#[test]
fn an_amos_export_reimported_is_held_and_keeps_its_supersession() {
    let h = Home::apollo();
    let old = h.add("alice", "we ship on fridays", &["team:apollo"]);
    let new = h.json(&["supersede", &old, "we ship on thursdays", "--as", "alice"])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("alice.jsonl").display().to_string();
    h.ok(&["export", "--agent", "alice", &file]);

    // Into the node that exported it: every memory is itself, held.
    let before = h.fingerprint();
    let r = h.json(&["import", "amos", &file, "--as", "alice"]);
    assert_eq!(
        (r["memories"].clone(), r["memories_held"].clone()),
        (0.into(), 2.into()),
        "{r}"
    );
    assert_eq!(r["facts"], 0, "{r}");
    assert_eq!(h.fingerprint(), before, "nothing written");
    assert_eq!(h.search_ids("alice", "ship", 10).len(), 2);

    // Into another node: the replacement still replaces.
    let g = Home::new();
    let r = g.json(&["import", "amos", &file]);
    assert_eq!(r["memories"], 2, "{r}");
    let ids = g.search_ids("alice", "ship", 10);
    let get = |i: &String| g.json(&["get", i, "--as", "alice"]);
    let (thursdays, fridays): (Vec<_>, Vec<_>) = ids
        .iter()
        .map(get)
        .partition(|m| m["content"] == "we ship on thursdays");
    assert_eq!((thursdays.len(), fridays.len()), (1, 1), "{ids:?}");
    assert_eq!(
        thursdays[0]["supersedes"], fridays[0]["id"],
        "{thursdays:?}"
    );
    assert_ne!(thursdays[0]["id"], new.as_str(), "g's own memory");
    // Only the replacement is valid now.
    let now = g.search_ids_with("alice", "ship", &["--valid-at", "now"]);
    assert_eq!(now, vec![thursdays[0]["id"].as_str().unwrap().to_owned()]);
    // And a second import there is held too.
    let again = g.json(&["import", "amos", &file]);
    assert_eq!(again["facts"], 0, "{again}");
}

#[test]
fn the_inviter_of_an_offline_join_is_told_how_to_register_the_joiner() {
    let a = Home::apollo();
    let code = invite(&a, &["--addr", "127.0.0.1:4747"]);
    let b = Home::new();
    b.ok(&["join", &code, "--offline"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("for-b.bndl").display().to_string();

    let r = a.run(&["bundle", "export", &file, "--for", &id(&b)]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("bundle export FILE --for {}", id(&a))),
        "the joiner's side: {r:?}"
    );
    let wanted = format!("`amos peers add {} --policy team:apollo`", id(&b));
    assert!(r.stderr.contains(&wanted), "{r:?}");
    // The printed command, run as printed, is the whole fix.
    let cmd = wanted.trim_matches('`');
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    a.ok(&args);
    a.ok(&["bundle", "export", &file, "--for", &id(&b)]);
}
