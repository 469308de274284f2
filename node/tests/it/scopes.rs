//! Issue 40 item 2, end to end: a team created independently on two nodes
//! under one name is two teams, the same on both nodes, each gated by its
//! own roster (docs/design.md §3, §6.2). Real `amos` processes over QUIC on
//! 127.0.0.1 (`serve --no-mdns`).
//!
//! * The measured scenario: `zeus` made on A (alice in it) and on B (eve
//!   in it), A and B `full` peers, two syncs: both records are held on
//!   both nodes (nothing refused), the digests agree, and A's zeus memory
//!   is alice's on B and never eve's.
//! * The ambiguous name: `team:zeus` on a node holding both is refused in
//!   one line naming both qualified ids, and nothing is written; a prefix
//!   of the qualifier names one.
//! * A peer that does not decode qualified ids (`AMOS_PROTOCOL=2:1`, the
//!   release before them) has those facts held back, counted, and sent
//!   once it has the feature.

use serde_json::Value;

use crate::common::Home;
use crate::common::server::{Server, free_port, id, pair, pair_serving};

fn team_ids(h: &Home) -> Vec<String> {
    let mut ids: Vec<String> = h.json(&["team", "list"])["teams"]
        .as_array()
        .expect("teams")
        .iter()
        .map(|t| t["qualified_id"].as_str().expect("qualified_id").to_owned())
        .collect();
    ids.sort();
    ids
}

fn refusals(h: &Home) -> Vec<Value> {
    h.json(&["audit"])["refused"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn sync_ok(h: &Home) {
    let (code, peers) = h.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}");
    for p in &peers {
        assert_eq!(p["result"], "ok", "{peers:?}");
    }
}

#[test]
fn same_name_teams_made_apart_converge_as_two_teams_each_gated_by_its_roster() {
    let (a, b) = (Home::new(), Home::new());
    a.ok(&["team", "create", "zeus"]);
    a.ok(&["agent", "add", "alice", "--team", "zeus"]);
    b.ok(&["team", "create", "zeus"]);
    b.ok(&["agent", "add", "eve", "--team", "zeus"]);
    // alice acts on B too (agents are local); her zeus roster is A's.
    b.ok(&["agent", "add", "alice"]);
    let secret = a.add("alice", "zeus launch code is 4242", &["team:zeus"]);
    let theirs = b.add("eve", "zeus budget is frozen", &["team:zeus"]);

    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    sync_ok(&b);
    sync_ok(&b);

    // Two teams, the same two on both nodes, and nothing refused.
    let ids = team_ids(&a);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids, team_ids(&b));
    assert!(ids.iter().all(|t| t.starts_with("zeus@")), "{ids:?}");
    for h in [&a, &b] {
        let refused = refusals(h);
        assert!(refused.is_empty(), "{refused:?}");
    }
    assert_eq!(
        a.json(&["digest"])["digest"],
        b.json(&["digest"])["digest"],
        "the digests agree"
    );
    // A's zeus memory is its roster's: alice's on both nodes, never eve's.
    assert_eq!(
        a.search_ids("alice", "launch code", 10),
        vec![secret.clone()]
    );
    assert_eq!(
        b.search_ids("alice", "launch code", 10),
        vec![secret.clone()]
    );
    assert!(b.search_ids("eve", "launch code", 10).is_empty());
    let got = b.run(&["get", &secret, "--as", "eve"]);
    assert_eq!(got.code, 2, "{got:?}");
    // And B's is eve's, not alice's.
    assert_eq!(
        b.search_ids("eve", "budget frozen", 10),
        vec![theirs.clone()]
    );
    assert!(b.search_ids("alice", "budget frozen", 10).is_empty());
    assert!(a.search_ids("alice", "budget frozen", 10).is_empty());
    // Shown qualified now that the name is shared.
    let shown = b.json(&["get", &theirs, "--as", "eve"])["visibility"].clone();
    let mine = format!("team:zeus@{}", &id(&b)[..12]);
    assert_eq!(shown, serde_json::json!([mine]), "{shown}");
}

#[test]
fn an_ambiguous_team_name_is_refused_in_one_line_and_a_prefix_names_one() {
    let (a, b) = (Home::new(), Home::new());
    a.ok(&["team", "create", "zeus"]);
    b.ok(&["team", "create", "zeus"]);
    b.ok(&["agent", "add", "eve", "--team", "zeus"]);
    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    sync_ok(&b);

    let before = b.fingerprint();
    let r = b.run(&["add", "which zeus?", "--as", "eve", "--share", "team:zeus"]);
    assert_eq!(r.code, 2, "{r:?}");
    let line = r.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    let (qa, qb) = (&id(&a)[..12], &id(&b)[..12]);
    assert!(line.contains("ambiguous"), "{line}");
    assert!(line.contains(&format!("team:zeus@{qa}")), "{line}");
    assert!(line.contains(&format!("team:zeus@{qb}")), "{line}");
    assert_eq!(b.fingerprint(), before, "nothing was written");
    // A unique prefix of the qualifier names one.
    let scope = format!("team:zeus@{}", &qb[..4]);
    let m = b.add("eve", "this zeus", &[&scope]);
    let got = b.json(&["get", &m, "--as", "eve"]);
    assert_eq!(
        got["visibility"],
        serde_json::json!([format!("team:zeus@{qb}")])
    );
}

/// `amos serve --no-mdns --no-push`, speaking `protocol` (`AMOS_PROTOCOL`).
fn serve_as(h: &Home, addr: &str, protocol: Option<&str>) -> Server {
    let env: Vec<(&str, &str)> = protocol.map(|p| ("AMOS_PROTOCOL", p)).into_iter().collect();
    Server::start_env(h.path(), None, addr, &["--no-mdns", "--no-push"], &env)
}

fn row(h: &Home, peer: &Home) -> Value {
    let pid = id(peer);
    h.json(&["peers", "list"])["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["node_id"] == pid.as_str())
        .cloned()
        .expect("the peer's row")
}

#[test]
fn a_peer_without_qualified_ids_has_them_held_back_until_it_decodes_them() {
    let (new, old) = (Home::new(), Home::new());
    new.ok(&["team", "create", "zeus"]);
    new.ok(&["agent", "add", "alice", "--team", "zeus"]);
    old.ok(&["agent", "add", "alice"]);
    let shared = new.add("alice", "the zeus standup moved to nine", &["team:zeus"]);
    let open = new.add("alice", "the canteen opens at noon", &["global"]);
    let s_new = serve_as(&new, &format!("127.0.0.1:{}", free_port()), None);
    let old_addr = format!("127.0.0.1:{}", free_port());
    let s_old = serve_as(&old, &old_addr, Some("2:1"));
    pair_serving(&new, &old, &s_new, &s_old, "full");

    sync_ok(&new);
    // The old node got what it decodes and none of the qualified facts.
    assert_eq!(old.search_ids("alice", "canteen noon", 10), vec![open]);
    assert!(
        old.json(&["team", "list"])["teams"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let held = row(&new, &old)["held_back"].as_u64().unwrap();
    // zeus's record, alice's membership and the memory's grants.
    assert_eq!(held, 3, "{}", row(&new, &old));

    // Upgraded, it is sent everything held back.
    drop(s_old);
    let _s_old = serve_as(&old, &old_addr, None);
    sync_ok(&new);
    assert_eq!(row(&new, &old)["held_back"], 0);
    assert_eq!(team_ids(&old), team_ids(&new));
    assert_eq!(old.search_ids("alice", "standup nine", 10), vec![shared]);
}

/// `amos ARGS` creating teams and projects with legacy ids, as the release
/// before qualified ids did (`AMOS_LEGACY_IDS=1`).
fn legacy(h: &Home, args: &[&str]) {
    let r = crate::common::Run::from(
        h.cmd()
            .env("AMOS_LEGACY_IDS", "1")
            .args(args)
            .output()
            .expect("spawn amos"),
    );
    assert_eq!(r.code, 0, "amos {args:?}: {r:?}");
}

fn codes(h: &Home) -> Vec<String> {
    let mut c: Vec<String> = refusals(h)
        .iter()
        .map(|r| r["code"].as_str().unwrap_or_default().to_owned())
        .collect();
    c.sort();
    c.dedup();
    c
}

fn doctor_check(h: &Home, name: &str) -> Value {
    h.json(&["doctor", "--offline"])["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no check {name}"))
}

#[test]
fn a_legacy_id_made_on_two_nodes_never_gates_one_teams_memory_by_the_others_roster() {
    let (a, b) = (Home::new(), Home::new());
    // Both homes from before qualified ids: each its own legacy zeus.
    legacy(&a, &["team", "create", "zeus"]);
    a.ok(&["agent", "add", "alice", "--team", "zeus"]);
    a.ok(&["agent", "add", "eve"]);
    legacy(&b, &["team", "create", "zeus"]);
    b.ok(&["agent", "add", "eve", "--team", "zeus"]);
    b.ok(&["agent", "add", "alice"]);
    assert_eq!(team_ids(&a), vec!["zeus".to_owned()]);
    assert_eq!(team_ids(&b), vec!["zeus".to_owned()]);
    let alices = a.add("alice", "zeus launch code is 4242", &["team:zeus"]);
    let eves = b.add("eve", "zeus budget is frozen", &["team:zeus"]);

    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    sync_ok(&b);
    sync_ok(&b);

    // Each keeps its own zeus and refuses the other's record and members.
    for h in [&a, &b] {
        assert_eq!(team_ids(h), vec!["zeus".to_owned()]);
        let c = codes(h);
        assert!(c.contains(&"org_origin_conflict".to_owned()), "{c:?}");
        assert!(c.contains(&"legacy_scope_clash".to_owned()), "{c:?}");
    }
    // Eve never sees alice's zeus memory, on either node; nor alice eve's.
    for h in [&a, &b] {
        assert!(h.search_ids("eve", "launch code", 10).is_empty());
        assert_eq!(h.run(&["get", &alices, "--as", "eve"]).code, 2);
        assert!(h.search_ids("alice", "budget frozen", 10).is_empty());
        assert_eq!(h.run(&["get", &eves, "--as", "alice"]).code, 2);
    }
    // Each still sees her own team's memory where her team is held.
    assert_eq!(a.search_ids("alice", "launch code", 10), vec![alices]);
    assert_eq!(b.search_ids("eve", "budget frozen", 10), vec![eves]);

    // amos doctor names the clash, both origins and the way out, and the
    // legacy id held.
    let (ida, idb) = (id(&a), id(&b));
    let clash = doctor_check(&b, "scope_clash team:zeus");
    assert_eq!(clash["status"], "warn", "{clash}");
    let detail = clash["detail"].as_str().expect("detail");
    assert!(detail.contains(&idb) && detail.contains(&ida), "{clash}");
    let hint = clash["hint"].as_str().expect("hint");
    assert!(hint.contains("amos team create zeus"), "{clash}");
    let legacy_ids = doctor_check(&a, "legacy_ids");
    assert_eq!(legacy_ids["status"], "warn", "{legacy_ids}");
    assert!(
        legacy_ids["detail"]
            .as_str()
            .is_some_and(|d| d.contains("team:zeus")),
        "{legacy_ids}"
    );
    let text = b.ok(&["doctor", "--offline"]).stdout;
    assert!(text.contains("scope_clash team:zeus"), "{text}");
}

/// A store of the release before the clash rule (issue 40: "existing stores
/// migrate"): its gate had admitted the other zeus's memory under its own
/// zeus's roster, and the clash was only a refusal in its audit log. Made
/// here from the legacy scenario by taking the rule's traces out of B's
/// store (the clash table, the schema version that made it, the cut
/// grant) and putting back what that release took in (A's membership of
/// alice in B's zeus); the next `amos` command migrates it: the clash
/// comes back from the audit log, the memory is re-judged and the foreign
/// member dropped: eve no longer reads alice's memory, nor alice eve's.
#[test]
fn a_store_from_before_the_clash_rule_finds_its_clash_in_its_audit_log() {
    let (a, b) = (Home::new(), Home::new());
    legacy(&a, &["team", "create", "zeus"]);
    a.ok(&["agent", "add", "alice", "--team", "zeus"]);
    legacy(&b, &["team", "create", "zeus"]);
    b.ok(&["agent", "add", "eve", "--team", "zeus"]);
    b.ok(&["agent", "add", "alice"]);
    let alices = a.add("alice", "zeus launch code is 4242", &["team:zeus"]);
    let eves = b.add("eve", "zeus budget is frozen", &["team:zeus"]);
    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    sync_ok(&b);
    assert_eq!(b.run(&["get", &alices, "--as", "eve"]).code, 2);
    assert_eq!(b.run(&["get", &eves, "--as", "alice"]).code, 2);
    let version = b.json(&["status"])["schema_version"].as_u64().expect("v");

    // Back to the release before: no clash table, alice's memory in force
    // for B's zeus and alice in B's zeus roster (A's membership fact), as
    // that release's gate left them.
    {
        let alice_in_zeus: (String, i64, Vec<u8>, Vec<u8>) =
            rusqlite::Connection::open(a.path().join("amos.db"))
                .expect("db a")
                .query_row(
                    "SELECT role, present, v, fact FROM memberships
             WHERE scope = 'team:zeus' AND agent = 'alice'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .expect("alice's membership on A");
        let conn = rusqlite::Connection::open(b.path().join("amos.db")).expect("db");
        conn.execute(
            "INSERT INTO memberships(scope, agent, role, present, v, fact, seq)
             VALUES ('team:zeus', 'alice', ?1, ?2, ?3, ?4, 1)",
            rusqlite::params![
                alice_in_zeus.0,
                alice_in_zeus.1,
                alice_in_zeus.2,
                alice_in_zeus.3
            ],
        )
        .expect("alice in B's zeus");
        let mid: amos_protocol::MemoryId = alices.parse().expect("id");
        conn.execute_batch("DROP TABLE scope_clashes")
            .expect("drop");
        // Where the clash table's migration runs again (later migrations
        // run again too: each is idempotent).
        let before = amos_node::store::version_creating("scope_clashes").expect("clash table");
        assert!(u64::from(before) < version);
        conn.pragma_update(None, "user_version", i64::from(before))
            .expect("version");
        conn.execute(
            "UPDATE memories SET effective = 'team:zeus' WHERE id = ?1",
            [&mid.0[..]],
        )
        .expect("effective");
        conn.execute(
            "INSERT INTO memory_grants(memory, scope) VALUES (?1, 'team:zeus')",
            [&mid.0[..]],
        )
        .expect("grant row");
        let refusals: i64 = conn
            .query_row(
                "SELECT count(*) FROM audit WHERE code = 'org_origin_conflict'",
                [],
                |r| r.get(0),
            )
            .expect("audit");
        assert!(
            refusals > 0,
            "the old release's refusal is in the audit log"
        );
    }

    // Opened by this release: migrated, the clash found, eve shut out of
    // alice's memory and alice out of B's zeus.
    assert_eq!(b.run(&["get", &alices, "--as", "eve"]).code, 2);
    assert_eq!(b.run(&["get", &eves, "--as", "alice"]).code, 2);
    assert_eq!(b.json(&["get", &eves, "--as", "eve"])["id"], eves.as_str());
    assert_eq!(b.json(&["status"])["schema_version"], version);
    let clash = doctor_check(&b, "scope_clash team:zeus");
    assert!(
        clash["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&id(&a)) && d.contains(&id(&b))),
        "{clash}"
    );
}
