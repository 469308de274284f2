//! An existing home upgrades (issue 40 item 3): a home written by amos at
//! 545333a (node/tests/fixtures/home-545333a, made as its README says) opens
//! with this release — the schema migrates — keeps every memory, its
//! visibility and valid time, the tombstone and the convergence digest the
//! old node reported, and syncs on with a node of this release over QUIC;
//! its legacy team and project ids keep working and `amos doctor` lists
//! them to migrate.

use std::path::Path;

use serde_json::Value;

use crate::common::Home;
use crate::common::server::{Server, pair};

fn fixture() -> (Home, Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/home-545333a");
    let h = Home::uninit();
    for f in ["amos.db", "identity.key", "node.json"] {
        std::fs::copy(dir.join(f), h.path().join(f)).expect("copy the fixture");
    }
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("expected.json"))
            .expect("json");
    (h, expected)
}

fn listed(h: &Home, agent: &str) -> Vec<String> {
    let mut ids: Vec<String> = h.json(&["list", "--as", agent])["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect();
    ids.sort();
    ids
}

#[test]
fn a_home_written_by_545333a_opens_keeps_everything_and_syncs_on() {
    let (old, expected) = fixture();
    let status = old.json(&["status"]);
    assert_eq!(status["node_id"], expected["node_id"]);
    assert!(
        status["schema_version"].as_u64().expect("schema") > 14,
        "migrated from 545333a's v14: {status}"
    );
    assert_eq!(old.json(&["check"])["ok"], true);

    // Its team and project have legacy ids (made before ids were
    // qualified): they keep working (below), and `amos doctor` lists them
    // to migrate, with no clash.
    // (The copied key's mode fails its own check: the exit code is not ours.)
    let doctor = old.run(&["--json", "doctor", "--offline"]).json();
    let check = |name: &str| {
        doctor["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no check {name}: {doctor}"))
    };
    let legacy = check("legacy_ids");
    assert_eq!(legacy["status"], "warn", "{legacy}");
    let detail = legacy["detail"].as_str().expect("detail");
    assert!(
        detail.contains("team:apollo") && detail.contains("project:rocket"),
        "{legacy}"
    );
    assert!(
        legacy["hint"]
            .as_str()
            .is_some_and(|h| h.contains("team create")),
        "{legacy}"
    );
    assert_eq!(check("scope_clashes")["status"], "ok");

    // The digest the old node reported, over every replicated fact (the
    // link and the tombstone included).
    let digest = old.json(&["digest"]);
    assert_eq!(digest["digest"], expected["digest"], "{digest}");
    assert_eq!(digest["facts"], expected["facts"]);

    // Every memory each agent saw, with its fields.
    for (agent, ids) in expected["visible"].as_object().expect("visible") {
        let want: Vec<String> = ids
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_str().expect("id").to_owned())
            .collect();
        assert_eq!(listed(&old, agent), want, "{agent}");
    }
    let memories = expected["memories"].as_object().expect("memories");
    assert_eq!(memories.len(), 4);
    for (mid, want) in memories {
        let owner = want["owner"].as_str().expect("owner");
        let got = old.json(&["get", mid, "--as", owner]);
        for field in [
            "content",
            "owner",
            "visibility",
            "valid_from",
            "valid_to",
            "pinned",
        ] {
            assert_eq!(got[field], want[field], "{mid} {field}: {got}");
        }
    }
    let forgotten = expected["forgotten"].as_str().expect("forgotten");
    assert_ne!(old.run(&["get", forgotten, "--as", "alice"]).code, 0);

    // It syncs on with a node of this release: the new node gets what its
    // policy admits, the old home gets the new node's memory.
    let server = Server::start(old.path());
    let new = Home::new();
    pair(&old, &new, &server, "full");
    let (code, peers) = new.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}");
    assert_eq!(new.json(&["digest"])["digest"], expected["digest"]);
    // The deploy port first; the launch window comes along through the
    // link the old node made (resonance over links).
    let [link_from, link_to] = [0, 1].map(|i| expected["link"][i].as_str().expect("link"));
    let hits = new.search_ids("alice", "deploy port", 5);
    assert_eq!(
        hits.first().map(String::as_str),
        Some(link_from),
        "{hits:?}"
    );
    assert!(hits.iter().any(|h| h == link_to), "{hits:?}");
    new.ok(&["agent", "add", "dave"]);
    let fresh = new.add("dave", "the new build server is up", &["global"]);
    let (code, _) = new.sync(&["now"]);
    assert_eq!(code, 0);
    assert_eq!(old.search_ids("carol", "build server", 5), vec![fresh]);
    assert_eq!(new.json(&["digest"]), old.json(&["digest"]));
}
