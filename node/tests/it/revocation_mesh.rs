//! A five-node mesh kept in sync by `amos serve --sync-every` alone (no
//! manual `amos sync`): a team memory written on node 0 reaches all five,
//! and its revocation (`unshare` on node 0) is in force on all five, each
//! by its own periodic passes. The test prints how long the revocation took
//! to reach every node next to the sync period (a figure for the issue's
//! "within one period" target; no timing is asserted).

use std::time::{Duration, Instant};

use crate::common::Home;
use crate::common::server::{Server, free_port, id};

const NODES: usize = 5;
const PERIOD: &str = "2s";

/// Poll `done` every 50 ms until it holds or `limit` passes; the elapsed
/// time when it held.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_revocation_reaches_a_five_node_mesh_through_periodic_sync() {
    // apollo is node 0's team (bob in it); the others learn it, and its
    // roster, by sync (a team created on each node would be five teams).
    let homes: Vec<Home> = (0..NODES)
        .map(|i| {
            if i == 0 {
                let h = Home::apollo();
                h.ok(&["agent", "add", "bob", "--team", "apollo"]);
                h
            } else {
                let h = Home::new();
                h.ok(&["agent", "add", "bob"]);
                h
            }
        })
        .collect();
    let addrs: Vec<String> = (0..NODES)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let ids: Vec<String> = homes.iter().map(id).collect();
    for (i, h) in homes.iter().enumerate() {
        for j in (0..NODES).filter(|&j| j != i) {
            h.ok(&[
                "peers",
                "add",
                &ids[j],
                &addrs[j],
                "--policy",
                "team:apollo",
            ]);
        }
    }
    let _servers: Vec<Server> = homes
        .iter()
        .zip(&addrs)
        .map(|(h, a)| Server::start_with(h.path(), None, a, &["--no-mdns", "--sync-every", PERIOD]))
        .collect();

    let memory = homes[0].add(
        "alice",
        "the vault combination changes on mondays",
        &["team:apollo"],
    );
    let visible = |h: &Home| h.run(&["get", &memory, "--as", "bob"]).code == 0;
    for (i, h) in homes.iter().enumerate() {
        assert!(
            wait_until(Duration::from_secs(90), || visible(h)).is_some(),
            "node {i} never received the memory"
        );
    }

    homes[0].ok(&["unshare", &memory, "team:apollo", "--as", "alice"]);
    let started = Instant::now();
    let mut reached = Vec::new();
    for (i, h) in homes.iter().enumerate() {
        let hidden = wait_until(Duration::from_secs(90), || !visible(h));
        assert!(hidden.is_some(), "node {i} still shows a revoked memory");
        reached.push(started.elapsed().as_millis() as u64);
        // The content is gone too, not only hidden from bob: alice (the
        // owner) still sees it on node 0 only.
        if i > 0 {
            assert!(h.search_ids("bob", "vault combination", 5).is_empty());
        }
    }
    eprintln!(
        "{}",
        serde_json::json!({
            "nodes": NODES,
            "sync_every": PERIOD,
            "revocation_visible_ms": {"per_node": reached, "max": reached.iter().max()},
        })
    );
}
