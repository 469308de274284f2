//! Issue 37, items 1 and 7: times past 9999-12-31T23:59:59.999Z (the
//! protocol's `MAX_TIME_MS`, docs/design.md §4) and time zones that are not
//! ASCII digits. Each front end that takes a time refuses one past the
//! bound with one line and changes nothing (CLI, MCP, console); a scoped
//! peer's signed fact carrying one is refused alone, in the audit log
//! under `time_out_of_bounds`, over QUIC between real processes, and the
//! readers it was aimed at keep working; importers leave such a time out
//! (and never panic on a crafted zone), and list/search work afterwards.

use serde_json::{Value, json};

use crate::common::console::Console;
use crate::common::server::{Server, id, pair};
use crate::common::{Home, import_mem0_to_apollo};
use crate::mcp::Client;

/// Every way `amos add` is given a time past the bound.
const LATE: [&[&str]; 5] = [
    &["--expires", "9000years"],
    &["--expires", "10000000years"],
    &["--valid-from", "+9000y"],
    &["--valid-to", "+9000y"],
    &["--valid-from", "-1d", "--valid-to", "+100000000d"],
];

#[test]
fn the_cli_refuses_a_time_past_9999_with_one_line_and_writes_nothing() {
    let h = Home::apollo();
    let before = h.fingerprint();
    for late in LATE {
        let mut args = vec!["add", "--as", "alice", "--share", "team:apollo"];
        args.extend_from_slice(late);
        args.push("far future");
        let r = h.run(&args);
        assert_eq!(r.code, 2, "{late:?}: {r:?}");
        assert!(r.stdout.is_empty(), "{late:?}: {r:?}");
        let err = r.stderr.trim();
        assert!(!err.contains('\n') && !err.contains("panicked"), "{r:?}");
        assert!(err.starts_with("amos: "), "{r:?}");
        assert!(
            err.contains("9999-12-31T23:59:59.999Z, the latest time amos keeps"),
            "{late:?}: {r:?}"
        );
        assert!(err.contains(late[late.len() - 2]), "names the flag: {r:?}");
    }
    // The time filters of recall too.
    for flag in ["--since", "--until", "--valid-at", "--known-at"] {
        let r = h.run(&["search", "x", "--as", "alice", flag, "+9000y"]);
        assert_eq!(r.code, 2, "{flag}: {r:?}");
        assert!(r.stderr.contains("latest time amos keeps"), "{r:?}");
    }
    assert_eq!(h.fingerprint(), before, "nothing was written");
    // The bound itself is a time amos keeps, and shows as itself.
    let m = h.ok(&[
        "add",
        "--as",
        "alice",
        "--expires",
        "9999-12-31T23:59:59.999Z",
        "at the bound",
    ]);
    let got = h.json(&["list", "--as", "alice"]);
    assert_eq!(
        got["memories"][0]["expires"], "9999-12-31T23:59:59.999Z",
        "{m:?} {got}"
    );
}

#[test]
fn mcp_memory_add_past_9999_is_a_tool_error_and_the_server_keeps_answering() {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    let mut alice = Client::start(&h, "alice");
    let before = h.fingerprint();
    for args in [
        json!({"content": "x", "share": ["team:apollo"], "valid_from": "+9000y"}),
        json!({"content": "x", "share": ["team:apollo"], "expires": "9000years"}),
        json!({"content": "x", "valid_to": "+9000y"}),
    ] {
        let r = alice.call("memory_add", args.clone());
        assert_eq!(r["isError"], true, "{args}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("latest time amos keeps"), "{args}: {r}");
    }
    assert_eq!(h.fingerprint(), before);
    // Still answering, and a team member's search answers too.
    alice.ok(
        "memory_add",
        json!({"content": "the deploy window is friday", "share": ["team:apollo"]}),
    );
    drop(alice);
    let mut bob = Client::start(&h, "bob");
    let hits = bob.ok("memory_search", json!({"query": "deploy window"}));
    assert!(hits.to_string().contains("deploy window"), "{hits}");
}

#[test]
fn the_console_refuses_a_memory_past_9999_and_writes_nothing() {
    let h = Home::apollo();
    let c = Console::start(h.path());
    let home = c.get("/");
    assert_eq!(home.status, 200, "{home:?}");
    let before = h.fingerprint();
    for (field, value) in [
        ("valid_from", "+9000y"),
        ("expires", "9000years"),
        ("valid_to", "+9000y"),
    ] {
        let r = c.post(
            "/memories",
            &[
                ("as", "alice"),
                ("content", "far future"),
                ("share", "team:apollo"),
                (field, value),
            ],
        );
        assert_eq!(r.status, 400, "{field}: {r:?}");
        assert!(r.body.contains("latest time amos keeps"), "{field}: {r:?}");
    }
    assert_eq!(h.fingerprint(), before);
    assert_eq!(c.get("/memories?as=alice").status, 200);
}

#[test]
fn mem0_times_past_9999_or_with_a_crafted_zone_are_left_out_without_panic() {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mem0.json");
    std::fs::write(
        &file,
        json!([
            {"id": "1", "memory": "far future seconds", "created_at": "1e12"},
            {"id": "2", "memory": "crafted zone", "created_at": "2025-03-01T10:00:00+aé1"},
            {"id": "3", "memory": "a number of seconds", "created_at": 1e12},
            {"id": "4", "memory": "an honest time", "created_at": "2025-03-01T10:00:00+01:00"},
        ])
        .to_string(),
    )
    .unwrap();
    let r = import_mem0_to_apollo(&h, &file);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("panicked"), "{r:?}");
    let report = r.json();
    assert_eq!(report["memories"], 4, "{report}");
    let unmapped = report["unmapped"].to_string();
    assert_eq!(
        report["unmapped"]
            .as_object()
            .map(|u| u.keys().filter(|k| k.contains("not a time")).count()),
        Some(3),
        "each bad time reported: {unmapped}"
    );
    for who in ["alice", "bob"] {
        let l = h.json(&["list", "--as", who]);
        let ms = l["memories"].as_array().expect("memories");
        assert_eq!(ms.len(), 4, "{l}");
        for m in ms {
            if m["content"] == "an honest time" {
                assert_eq!(m["valid_from"], "2025-03-01T09:00:00.000Z", "{m}");
            }
        }
        assert_eq!(h.search_ids(who, "crafted zone", 5).len(), 1);
    }
}

// ------------------------------------------------- a scoped peer's attack

/// The bytes an amos signature covers: the protocol's domain tag, then the
/// fact's canonical encoding (amos_protocol::sign, a wire constant).
fn signing_bytes(fact: &amos_protocol::Fact) -> Vec<u8> {
    let mut msg = b"amos-fact-v1\0".to_vec();
    msg.extend(amos_protocol::codec::encode(fact));
    msg
}

/// On `h` (the attacker, running altered software): rewrite the content
/// fact of its own memory `mid` with `change`, re-signed with `h`'s own key
/// but without the protocol's checks, in place in its store, as a row
/// its export sends verbatim.
fn forge_content(h: &Home, mid: &str, change: impl Fn(&mut amos_protocol::MemoryContent)) {
    use ed25519_dalek::Signer;
    let home = amos_node::Home::new(h.path());
    let identity = home.load_identity().expect("identity");
    let key = ed25519_dalek::SigningKey::from_bytes(&identity.secret());
    let conn = rusqlite::Connection::open(home.db_path()).expect("db");
    let id: amos_protocol::MemoryId = mid.parse().expect("memory id");
    let bytes: Vec<u8> = conn
        .query_row(
            "SELECT content_fact FROM memories WHERE id = ?1",
            [&id.0[..]],
            |r| r.get(0),
        )
        .expect("content fact");
    let mut signed = amos_protocol::codec::decode_signed(&bytes).expect("decodes");
    let amos_protocol::FactBody::MemoryContent(m) = &mut signed.fact.body else {
        panic!("not a content fact");
    };
    change(m);
    assert!(
        signed.fact.validate().is_err(),
        "the forgery is out of bounds"
    );
    signed.signature = key.sign(&signing_bytes(&signed.fact)).to_bytes();
    let n = conn
        .execute(
            "UPDATE memories SET content_fact = ?1 WHERE id = ?2",
            rusqlite::params![signed.to_bytes(), &id.0[..]],
        )
        .expect("update");
    assert_eq!(n, 1);
}

/// The victim gives the peer `team:a`; the peer plants memories shared
/// with team:a whose expiry and valid time are past 9999, signed with its
/// own key, beside an honest one, and syncs over QUIC. The victim refuses
/// each planted fact alone (audit: `time_out_of_bounds`), stores the
/// honest memory, and bob's list and search keep working.
#[test]
fn a_scoped_peers_fact_past_9999_is_refused_alone_and_readers_keep_working() {
    let victim = Home::new();
    victim.ok(&["team", "create", "a"]);
    victim.ok(&["agent", "add", "bob", "--team", "a"]);
    let eve = Home::new();
    eve.ok(&["agent", "add", "eve"]);
    let mut server = Server::start(victim.path());
    pair(&victim, &eve, &server, "team:a");
    // eve learns team a from the victim, its origin.
    let r = eve.run(&["--json", "sync", "now"]);
    assert_eq!(
        r.json()["peers"][0]["result"],
        "ok",
        "{r:?}\n{}",
        server.log()
    );

    let late_expiry = eve.add("eve", "planted expiry farword", &["team:a"]);
    let late_start = eve.add("eve", "planted validity farword", &["team:a"]);
    let honest = eve.add("eve", "honest farword note", &["team:a"]);
    let past = amos_protocol::MAX_TIME_MS + 1;
    forge_content(&eve, &late_expiry, |m| {
        m.expires_ms = Some(9_000 * 365 * 86_400_000 + past)
    });
    forge_content(&eve, &late_start, |m| m.validity.from_ms = Some(past));

    let r = eve.run(&["--json", "sync", "now"]);
    assert_eq!(r.code, 0, "{r:?}\n{}", server.log());
    assert_eq!(
        r.json()["peers"][0]["result"],
        "ok",
        "{r:?}\n{}",
        server.log()
    );

    // The victim's readers work, and see only the honest memory.
    let l = victim.run(&["--json", "list", "--as", "bob"]);
    assert_eq!(l.code, 0, "list: {l:?}");
    let listed: Vec<Value> = l.json()["memories"].as_array().cloned().unwrap_or_default();
    let ids: Vec<&str> = listed.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, vec![honest.as_str()], "{listed:?}");
    assert_eq!(
        victim.search_ids("bob", "farword", 10),
        vec![honest.clone()]
    );
    let mut bob = Client::start(&victim, "bob");
    let hits = bob.ok("memory_search", json!({"query": "farword"}));
    assert!(hits.to_string().contains("honest farword"), "{hits}");
    assert!(!hits.to_string().contains("planted"), "{hits}");
    drop(bob);

    // Each planted fact is in the audit log, with its code.
    let audit = victim.json(&["audit", "--limit", "100"]);
    let refused = audit["refused"].as_array().expect("refused");
    for planted in [&late_expiry, &late_start] {
        let e = refused
            .iter()
            .find(|e| e["register"] == format!("memory:{planted}/content"))
            .unwrap_or_else(|| panic!("no audit entry for {planted}: {audit}"));
        assert_eq!(e["code"], "time_out_of_bounds", "{e}");
        assert_eq!(e["peer"], id(&eve), "{e}");
    }
    // Nothing of the planted content reached the victim's store.
    assert!(
        crate::common::db_hits(&victim, "planted")
            .iter()
            .all(|t| t.starts_with("audit."))
    );
    // And the session goes on working: a second sync is fine too.
    let again = eve.run(&["--json", "sync", "now"]);
    assert_eq!(again.json()["peers"][0]["result"], "ok", "{again:?}");
    server.stop();
}
