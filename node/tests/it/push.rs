//! Push on change (docs/design.md §7.10), with real `amos serve` processes
//! on 127.0.0.1 (`--no-mdns`) whose periodic sync is an hour away, so
//! whatever moves was pushed:
//!
//! * a line a — b — c: a memory written on a reaches c, relayed by b, and
//!   its revocation (`unshare` on a) does too; nobody pushes a change back
//!   to the peer it came from;
//! * a storm: many local changes against a peer that refuses every
//!   session cost dials bounded by the backoff, not by the changes.

use std::time::{Duration, Instant};

use crate::common::Home;
use crate::common::server::{Server, free_port, id};

const SCOPE: &str = "team:apollo";
/// Periodic sync far beyond any test: only pushes move anything.
const NO_PERIODIC: &[&str] = &["--no-mdns", "--sync-every", "1h"];

/// Poll `done` every 50 ms until it holds or `limit` passes.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// How many pushes to `peer` the server logged.
fn pushes_to(s: &Server, peer: &str) -> usize {
    s.log().matches(&format!("pushed to {peer}: ")).count()
}

#[test]
fn a_change_and_its_revocation_cross_a_line_of_three_by_push_alone() {
    // a holds team apollo; b and c know the agents and learn the team by sync.
    let homes = [Home::new(), Home::new(), Home::new()];
    homes[0].ok(&["team", "create", "apollo"]);
    for agent in ["alice", "bob"] {
        homes[0].ok(&["agent", "add", agent, "--team", "apollo"]);
        homes[1].ok(&["agent", "add", agent]);
        homes[2].ok(&["agent", "add", agent]);
    }
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let ids: Vec<String> = homes.iter().map(id).collect();
    for (x, y) in [(0, 1), (1, 0), (1, 2), (2, 1)] {
        homes[x].ok(&["peers", "add", &ids[y], &addrs[y], "--policy", SCOPE]);
    }
    let servers: Vec<Server> = homes
        .iter()
        .zip(&addrs)
        .map(|(h, a)| Server::start_with(h.path(), None, a, NO_PERIODIC))
        .collect();
    let logs = || -> Vec<String> { servers.iter().map(Server::log).collect() };
    let [a, _, c] = &homes;

    let m = a.add("alice", "the orchard gate code is 4471", &[SCOPE]);
    let bob_sees = |h: &Home| h.run(&["get", &m, "--as", "bob"]).code == 0;
    assert!(
        wait_until(Duration::from_secs(60), || bob_sees(c)),
        "the memory never reached c: {:#?}",
        logs()
    );

    a.ok(&["unshare", &m, SCOPE, "--as", "alice"]);
    assert!(
        wait_until(Duration::from_secs(60), || !bob_sees(c)),
        "the revocation never reached c: {:#?}",
        logs()
    );
    assert!(c.search_ids("bob", "orchard gate", 5).is_empty());

    // Pushed, hop by hop: a to b, b on to c (a dialler logs its push once
    // the connection closed, a moment after the other side is done).
    for (from, to) in [(0, 1), (1, 2)] {
        assert!(
            wait_until(Duration::from_secs(30), || pushes_to(
                &servers[from],
                &ids[to]
            ) >= 2),
            "{:#?}",
            logs()
        );
    }
    // Never back to where the change came from: b does not push to a, c
    // (whose only peer is b) pushes nothing.
    assert_eq!(pushes_to(&servers[1], &ids[0]), 0, "{:#?}", logs());
    assert!(!servers[2].log().contains("pushed to "), "{:#?}", logs());
    // No periodic pass ran.
    assert!(
        !logs().iter().any(|l| l.contains("periodic sync with")),
        "{:#?}",
        logs()
    );
}

/// The most dials the backoff allows in `elapsed`: after `n` failures in a
/// row a peer waits `2^min(n,5)·1 s − 0.5 s`.
fn backoff_bound(elapsed: Duration) -> usize {
    let elapsed = elapsed.as_millis() as u64;
    let (mut dials, mut spent) = (1usize, 0u64);
    loop {
        let n = (dials as u32).min(5);
        let wait = 1000 * (1u64 << n) - 500;
        if spent + wait > elapsed {
            return dials;
        }
        spent += wait;
        dials += 1;
    }
}

#[test]
fn a_peer_that_refuses_every_session_costs_dials_by_backoff_not_by_changes() {
    const CHANGES: usize = 24;
    let a = Home::apollo();
    // A node that serves but does not know a: it refuses every session.
    let stranger = Home::new();
    let refusing = Server::start(stranger.path());
    let sid = id(&stranger);
    a.ok(&["peers", "add", &sid, &refusing.addr, "--policy", "full"]);
    let addr = format!("127.0.0.1:{}", free_port());
    let server = Server::start_with(a.path(), None, &addr, NO_PERIODIC);

    // The changes come spread out, each well after the debounce: without
    // backoff each would cost a dial.
    let started = Instant::now();
    for i in 0..CHANGES {
        a.add("alice", &format!("storm note {i}"), &[SCOPE]);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        wait_until(Duration::from_secs(60), || pushes_to(&server, &sid) >= 1),
        "never tried: {}",
        server.log()
    );
    let log = server.log();
    let elapsed = started.elapsed();
    let dials = log.matches(&format!("pushed to {sid}: ")).count();
    let refused = log.matches(&format!("pushed to {sid}: refused")).count();
    assert_eq!(dials, refused, "every push was refused: {log}");
    let bound = backoff_bound(elapsed);
    eprintln!("{CHANGES} changes, {dials} dials in {elapsed:?} (backoff allows {bound})");
    assert!(
        dials <= bound,
        "{dials} dials > {bound} in {elapsed:?}: {log}"
    );
    assert!(
        dials < CHANGES,
        "{dials} dials for {CHANGES} changes: {log}"
    );
}
