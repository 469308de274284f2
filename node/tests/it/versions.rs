//! Versioned sessions (docs/design.md §13), between real `amos serve`
//! processes over loopback QUIC: a node speaking as 545333a did
//! (`AMOS_PROTOCOL=1`: only ALPN `amos/1`, the old `Hello`) and this
//! release sync both ways, valid time included; a peer whose hello lacks a
//! feature gets nothing that needs it, the facts held back are counted, and
//! they go once it has the feature. The two-binary run against a node built
//! from 545333a itself is `scripts/interop-old.sh` (too slow for CI).

use serde_json::Value;

use crate::common::Home;
use crate::common::console::Console;
use crate::common::server::{Server, free_port, id, pair_serving};

/// `amos --json ARGS` with `AMOS_PROTOCOL` set as given (None: unset).
fn json_as(h: &Home, protocol: Option<&str>, args: &[&str]) -> Value {
    let mut c = h.cmd();
    if let Some(p) = protocol {
        c.env("AMOS_PROTOCOL", p);
    }
    let out = c.arg("--json").args(args).output().expect("spawn amos");
    assert!(
        out.status.success(),
        "amos {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// `amos sync now` as a node speaking `protocol`; every peer synced ok.
fn sync_as(h: &Home, protocol: Option<&str>) {
    let r = json_as(h, protocol, &["sync", "now"]);
    for p in r["peers"].as_array().expect("peers") {
        assert_eq!(p["result"], "ok", "{r}");
    }
}

/// `peer`'s row in `h`'s `amos peers list --json`.
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

fn serve(h: &Home, protocol: Option<&str>) -> Server {
    serve_at(h, &format!("127.0.0.1:{}", free_port()), protocol)
}

/// `amos serve --no-mdns --no-push` at `addr`, speaking `protocol`.
fn serve_at(h: &Home, addr: &str, protocol: Option<&str>) -> Server {
    let env: Vec<(&str, &str)> = protocol.map(|p| ("AMOS_PROTOCOL", p)).into_iter().collect();
    Server::start_env(h.path(), None, addr, &["--no-mdns", "--no-push"], &env)
}

fn ids(h: &Home, agent: &str, query: &str) -> Vec<String> {
    h.search_ids(agent, query, 10)
}

#[test]
fn a_version_1_node_and_this_release_sync_both_ways_with_valid_time() {
    let new = Home::new();
    let old = Home::new();
    for h in [&new, &old] {
        h.ok(&["agent", "add", "alice"]);
    }
    let s_new = serve(&new, None);
    let s_old = serve(&old, Some("1"));
    pair_serving(&new, &old, &s_new, &s_old, "full");

    let timed = new.json(&[
        "add",
        "launch window opens in March",
        "--as",
        "alice",
        "--share",
        "global",
        "--valid-from",
        "2026-03-01",
        "--valid-to",
        "2026-04-01",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let from_old = old.add("alice", "the staging host moved to rack nine", &["global"]);

    // The old node dials (it offers only amos/1), then the new one dials it.
    sync_as(&old, Some("1"));
    assert_eq!(ids(&old, "alice", "launch window"), vec![timed.clone()]);
    assert_eq!(ids(&new, "alice", "staging rack"), vec![from_old.clone()]);
    let got = json_as(&old, Some("1"), &["get", &timed, "--as", "alice"]);
    assert_eq!(got["valid_to"], "2026-04-01T00:00:00.000Z", "{got}");
    assert_eq!(row(&new, &old)["protocol"], 1);
    assert_eq!(row(&old, &new)["protocol"], 1);

    let later = new.add("alice", "the canteen opens at noon", &["global"]);
    sync_as(&new, None);
    assert_eq!(ids(&old, "alice", "canteen noon"), vec![later]);
    assert_eq!(
        row(&new, &old)["protocol"],
        1,
        "the new node dialled amos/1"
    );
    assert_eq!(row(&new, &old)["held_back"], 0);
    // Idle: the digests agree across the versions.
    sync_as(&new, None);
    assert_eq!(new.digest("global"), old.digest("global"));

    // Upgraded, the same pair speaks version 2.
    let addr = s_old.addr.clone();
    drop(s_old);
    let _s_old = serve_at(&old, &addr, None);
    sync_as(&new, None);
    assert_eq!(row(&new, &old)["protocol"], 2);
    assert_eq!(row(&old, &new)["protocol"], 2);
}

#[test]
fn a_feature_the_peer_lacks_is_held_back_counted_and_sent_once_it_has_it() {
    let a = Home::new();
    let b = Home::new();
    for h in [&a, &b] {
        h.ok(&["agent", "add", "alice"]);
    }
    let sa = serve(&a, None);
    let sb = serve(&b, Some("2:0"));
    pair_serving(&a, &b, &sa, &sb, "full");
    let timed = a.json(&[
        "add",
        "the audit runs in the first week",
        "--as",
        "alice",
        "--share",
        "global",
        "--valid-from",
        "2026-01-01",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let plain = a.add("alice", "the audit report goes to finance", &["global"]);

    // B says it decodes no valid-time fact: it gets the plain memory only.
    sync_as(&b, Some("2:0"));
    assert_eq!(ids(&b, "alice", "audit"), vec![plain.clone()]);
    let held = row(&a, &b);
    assert_eq!(held["protocol"], 2, "{held}");
    assert_eq!(held["held_back"], 1, "the timed memory's content: {held}");
    // The console's peers page says so too.
    let page = Console::start(a.path()).get("/peers").body;
    assert!(page.contains("v2, 1 held back"), "{page}");
    // A bundle for B leaves out the same, as B's last session said.
    let file = a.path().join("for-b.bundle");
    let file = file.to_str().expect("utf-8 path");
    let report = a.json(&["bundle", "export", file, "--for", &id(&b)]);
    assert_eq!(report["held_back"], 1, "{report}");
    let everything = a.json(&["bundle", "export", &format!("{file}.all")]);
    assert_eq!(everything["held_back"], 0, "{everything}");
    assert_eq!(
        everything["facts"].as_u64().unwrap(),
        report["facts"].as_u64().unwrap() + 1
    );
    json_as(&b, Some("2:0"), &["bundle", "import", file]);
    assert_eq!(ids(&b, "alice", "audit"), vec![plain.clone()]);
    // An idle session with facts held back still completes (no digest), in
    // either direction, and holds the same back.
    sync_as(&b, Some("2:0"));
    sync_as(&a, None);
    assert_eq!(row(&a, &b)["held_back"], 1);
    assert_eq!(ids(&b, "alice", "audit"), vec![plain.clone()]);

    // B upgrades: the next session sends what was held back.
    let addr = sb.addr.clone();
    drop(sb);
    let _sb = serve_at(&b, &addr, None);
    sync_as(&b, None);
    let mut got = ids(&b, "alice", "audit");
    got.sort();
    let mut want = vec![timed, plain];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(row(&a, &b)["held_back"], 0);
    // And the digests agree again.
    sync_as(&b, None);
    assert_eq!(a.digest("global"), b.digest("global"));
    assert_eq!(row(&a, &b)["digest"]["agree"], true, "{}", row(&a, &b));
}

/// `amos --json sync now` with these variables: the one peer's outcome.
fn sync_outcome(h: &Home, env: &[(&str, &str)]) -> Value {
    let out = h
        .cmd()
        .envs(env.iter().copied())
        .args(["--json", "sync", "now"])
        .output()
        .expect("spawn amos");
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    r["peers"][0].clone()
}

/// Wait (bounded) until `server`'s log holds `line`.
fn logged(server: &Server, line: &str) -> bool {
    for _ in 0..500 {
        if server.log().contains(line) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn a_peer_older_than_the_minimum_is_refused_in_one_line_naming_both_versions() {
    let strict = Home::new();
    let old = Home::new();
    let min = [("AMOS_PROTOCOL_MIN", "2")];
    let s_strict = Server::start_env(
        strict.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        &["--no-mdns", "--no-push"],
        &min,
    );
    let s_old = serve(&old, Some("1"));
    pair_serving(&strict, &old, &s_strict, &s_old, "full");
    for h in [&strict, &old] {
        h.ok(&["agent", "add", "alice"]);
    }
    strict.add("alice", "never for the old node", &["global"]);
    let line = "amos protocol version 1 is older than 2, the oldest the refusing node \
                accepts (it speaks 2): upgrade the node on version 1";

    // The old node dials: the handshake succeeds (amos/1 is still offered),
    // then one Refused line, which it shows as the peer's reason.
    let o = sync_outcome(&old, &[("AMOS_PROTOCOL", "1")]);
    assert_eq!(o["result"], "refused", "{o}");
    assert!(o["error"].as_str().unwrap().contains(line), "{o}");
    assert!(logged(&s_strict, line), "{}", s_strict.log());

    // The strict node dials the old one: refused on its side, same line.
    let o = sync_outcome(&strict, &min);
    assert_eq!(o["result"], "refused", "{o}");
    assert!(o["error"].as_str().unwrap().contains(line), "{o}");
    assert!(logged(&s_old, line), "{}", s_old.log());

    // Nothing crossed either way.
    assert!(old.search_ids("alice", "never old node", 5).is_empty());
}

/// A peer reached through a mailbox that lacks a feature has what is held
/// back for it counted too, as a live peer does (docs/design.md §8.2,
/// "Held back"); `amos sync auto` runs the mailbox (B is offline: its live
/// sync is unreachable, which `auto` does not count as a failure).
#[test]
fn a_mailbox_peer_that_lacks_a_feature_has_what_is_held_back_counted() {
    let a = Home::new();
    let b = Home::new();
    for h in [&a, &b] {
        h.ok(&["agent", "add", "alice"]);
    }
    let sa = serve(&a, None);
    let sb = serve(&b, Some("2:0"));
    pair_serving(&a, &b, &sa, &sb, "full");
    // One live session: A learns that B decodes no valid-time fact.
    sync_as(&b, Some("2:0"));
    assert_eq!(row(&a, &b)["protocol"], 2);
    assert_eq!(row(&a, &b)["held_back"], 0);
    drop(sb);
    drop(sa);

    // B is offline from now on: A reaches it through a mailbox.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().expect("utf-8 path");
    a.ok(&["peers", "mailbox", &id(&b), dir]);
    a.ok(&[
        "add",
        "the audit runs in the first week",
        "--as",
        "alice",
        "--share",
        "global",
        "--valid-from",
        "2026-01-01",
    ]);
    a.add("alice", "the audit report goes to finance", &["global"]);
    let r = a.run(&["--json", "sync", "auto"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["peers"][0]["result"], "unreachable", "{v}");
    let m = &v["mailboxes"][0];
    assert!(m["posted"].as_u64().unwrap() >= 1, "{v}");
    let held = row(&a, &b);
    assert_eq!(held["held_back"], 1, "the timed memory's content: {held}");
}
