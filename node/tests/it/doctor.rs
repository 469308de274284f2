//! `amos doctor` on a healthy and on a broken home: every check ok/warn/fail
//! with a hint, the listener recognised as this node's own `amos serve`,
//! peers probed by handshake (accepting us, refusing us, or silent), and
//! exit 1 only when a check fails.

use crate::common::Home;
use crate::common::server::{Server, free_port, id, pair_serving};
use serde_json::Value;

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

#[test]
fn a_healthy_node_passes_and_a_broken_one_is_told_what_to_fix() {
    let a = Home::apollo();
    let b = Home::new();
    let stranger = Home::new();
    let server_a = Server::start(a.path());
    let server_b = Server::start(b.path());
    let _stranger_server = Server::start(stranger.path());
    let idb = id(&b);
    pair_serving(&a, &b, &server_a, &server_b, "team:apollo");

    let healthy = a.json(&["doctor"]);
    assert_eq!(healthy["ok"], true, "{healthy}");
    for c in healthy["checks"].as_array().expect("checks") {
        assert!(c["status"] == "ok" || c["status"] == "warn", "{c}");
        if c["status"] != "ok" {
            assert!(c["hint"].is_string(), "a warning names a fix: {c}");
        }
    }
    assert_eq!(check(&healthy, "identity_key")["status"], "ok");
    assert_eq!(check(&healthy, "database")["status"], "ok");
    let listener = check(&healthy, "listener");
    assert_eq!(listener["status"], "ok", "{listener}");
    assert!(
        listener["detail"]
            .as_str()
            .is_some_and(|d| d.contains("this node")),
        "{listener}"
    );
    let peer_b = check(&healthy, &format!("peer {}", &idb[..10]));
    assert_eq!(peer_b["status"], "ok", "{peer_b}");

    // Broken: a readable identity key, a peer that does not know us, a dead peer.
    let key = a.path().join("identity.key");
    let mut perms = std::fs::metadata(&key).expect("key").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&key, perms).expect("chmod");
    let ids = id(&stranger);
    a.ok(&[
        "peers",
        "add",
        &ids,
        &_stranger_server.addr,
        "--policy",
        "team:apollo",
    ]);
    let dead = Home::new();
    let idd = id(&dead);
    let dead_addr = format!("127.0.0.1:{}", free_port());
    a.ok(&["peers", "add", &idd, &dead_addr, "--policy", "team:apollo"]);

    let r = a.run(&["--json", "doctor"]);
    assert_eq!(r.code, 1, "{r:?}");
    let broken = r.json();
    assert_eq!(broken["ok"], false);
    let k = check(&broken, "identity_key");
    assert_eq!(k["status"], "fail", "{k}");
    assert!(
        k["hint"].as_str().is_some_and(|h| h.contains("chmod 600")),
        "{k}"
    );
    let s = check(&broken, &format!("peer {}", &ids[..10]));
    assert_eq!(s["status"], "warn", "{s}");
    assert!(
        s["detail"].as_str().is_some_and(|d| d.contains("refuses")),
        "{s}"
    );
    let d = check(&broken, &format!("peer {}", &idd[..10]));
    assert_eq!(d["status"], "warn", "{d}");
    assert!(
        d["detail"]
            .as_str()
            .is_some_and(|x| x.contains("does not answer")),
        "{d}"
    );

    // --offline skips the network: no listener or peer checks.
    let r = a.run(&["--json", "doctor", "--offline"]);
    let offline = r.json();
    assert!(
        offline["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .all(|c| c["name"] != "listener"
                && !c["name"].as_str().unwrap_or("").starts_with("peer ")),
        "{offline}"
    );
}
