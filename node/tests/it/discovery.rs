//! mDNS discovery between real `amos` processes, each in a network
//! namespace this test makes (two namespaces joined by a veth pair,
//! 10.77.0.0/24): multicast never leaves them. Without root or `ip netns`
//! the tests say SKIPPED on stderr and pass.
//!
//! * Two nodes with the same mesh key see each other with `amos discover`;
//!   a node is recognised (its tag maps to its NodeId) only once it is a
//!   registered peer, and `amos serve` then stores its address.
//! * A peer that moves to another address and port is synced at its new
//!   one: the serving node updates its peers table from the announcement.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Home;
use crate::common::server::{Server, amos_in, id};
use serde_json::Value;

/// Two network namespaces joined by a veth pair; deleted on drop (which
/// also removes the veth pair), even when the test fails.
struct Namespaces {
    a: String,
    b: String,
    /// b's end of the veth pair.
    vb: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Namespaces {
    /// `amos{pid}{tag}a` at 10.77.0.1/24 and `…b` at 10.77.0.2/24, or why
    /// they cannot be made here.
    fn pair(tag: &str) -> Result<Namespaces, String> {
        let pid = std::process::id();
        // Interface names: at most 15 bytes.
        let (va, vb) = (format!("am{pid}{tag}a"), format!("am{pid}{tag}b"));
        let ns = Namespaces {
            a: format!("amos{pid}{tag}a"),
            b: format!("amos{pid}{tag}b"),
            vb: vb.clone(),
        };
        ip(&["netns", "add", &ns.a])?;
        ip(&["netns", "add", &ns.b])?;
        ip(&[
            "link", "add", &va, "netns", &ns.a, "type", "veth", "peer", "name", &vb, "netns", &ns.b,
        ])?;
        for (n, v, addr) in [(&ns.a, &va, "10.77.0.1/24"), (&ns.b, &vb, "10.77.0.2/24")] {
            ip(&["-n", n, "addr", "add", addr, "dev", v])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        // mDNS only uses interfaces that are operationally up, which a veth
        // becomes a moment after `link set up`.
        for (n, v) in [(&ns.a, &va), (&ns.b, &vb)] {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !link_is_up(n, v) {
                if Instant::now() > deadline {
                    return Err(format!("{v} in {n} never came up"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(ns)
    }

    /// Add another address to b's end of the veth pair.
    fn add_b_addr(&self, addr: &str) {
        ip(&["-n", &self.b, "addr", "add", addr, "dev", &self.vb]).expect("add address");
    }
}

fn link_is_up(netns: &str, dev: &str) -> bool {
    Command::new("ip")
        .args(["-n", netns, "-o", "link", "show", "dev", dev])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("state UP"))
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// The namespaces, or `None` after saying loudly why the test is skipped.
fn namespaces(tag: &str) -> Option<Namespaces> {
    match Namespaces::pair(tag) {
        Ok(ns) => Some(ns),
        Err(e) => {
            // Straight to stderr, past the test harness's capture.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: mDNS discovery test needs root and `ip netns` to make its own \
                 network namespaces ({e})"
            );
            None
        }
    }
}

/// `amos --json discover --timeout 2s` run in `netns`.
fn discover(netns: &str, h: &Home) -> Vec<Value> {
    let out = amos_in(Some(netns), h.path())
        .args(["--json", "discover", "--timeout", "2s"])
        .output()
        .expect("amos discover");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v["nodes"].as_array().expect("nodes").clone()
}

/// Poll `amos discover` (bounded) until a node announcing `addr` and `port`
/// satisfies `want`; returns it.
fn discover_until(
    netns: &str,
    h: &Home,
    addr: &str,
    port: u16,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        last = discover(netns, h);
        if let Some(n) = last.iter().find(|n| {
            n["port"] == port
                && n["addrs"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == addr))
                && want(n)
        }) {
            return n.clone();
        }
    }
    panic!("no node at {addr} port {port} as wanted; last seen: {last:?}");
}

/// The address `h` stores for `peer`, polled (bounded) until it is `want`.
fn peer_addr_becomes(h: &Home, peer: &str, want: &str, servers: &[&Server]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Value::Null;
    while Instant::now() < deadline {
        last = h.json(&["peers", "list"]);
        let addr = last["peers"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["node_id"] == peer))
            .map(|p| p["addr"].clone());
        if addr.as_ref().is_some_and(|a| a == want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs: Vec<String> = servers.iter().map(|s| s.log()).collect();
    panic!("peer address never became {want}: {last}\n{logs:#?}");
}

fn digest(h: &Home) -> String {
    h.json(&["digest"])["digest"]
        .as_str()
        .expect("digest")
        .to_owned()
}

/// Two homes with the same mesh key.
fn two_homes() -> (Home, Home) {
    let (a, b) = (Home::new(), Home::new());
    let key = a.json(&["mesh", "key", "generate"])["mesh_key"]
        .as_str()
        .expect("key")
        .to_owned();
    b.ok(&["mesh", "key", "set", &key]);
    (a, b)
}

#[test]
fn nodes_find_each_other_and_are_recognised_only_once_registered() {
    let Some(ns) = namespaces("f") else { return };
    let (a, b) = two_homes();
    let (ida, idb) = (id(&a), id(&b));
    // a listens on every address (announced per interface), b on one.
    let sa = Server::start_with(a.path(), Some(&ns.a), "[::]:4747", &[]);
    let sb = Server::start_with(b.path(), Some(&ns.b), "10.77.0.2:4800", &[]);

    // Seen, but a stranger: no identity, no peer.
    let seen = discover_until(&ns.b, &b, "10.77.0.1", 4747, |_| true);
    assert_eq!(seen["known"], false, "{seen}");
    assert!(seen["peer"].is_null(), "{seen}");
    assert_eq!(seen["version"], "1", "{seen}");
    let raw = amos_in(Some(&ns.b), b.path())
        .args(["--json", "discover", "--timeout", "2s"])
        .output()
        .expect("discover");
    assert!(
        !String::from_utf8_lossy(&raw.stdout).contains(&ida),
        "a stranger's NodeId must not show"
    );

    // Registered (without an address): recognised by its tag.
    b.ok(&["peers", "add", &ida, "--policy", "full"]);
    a.ok(&["peers", "add", &idb, "--policy", "full"]);
    let seen = discover_until(&ns.b, &b, "10.77.0.1", 4747, |n| n["known"] == true);
    assert_eq!(seen["peer"], ida.as_str(), "{seen}");
    let seen = discover_until(&ns.a, &a, "10.77.0.2", 4800, |n| n["known"] == true);
    assert_eq!(seen["peer"], idb.as_str(), "{seen}");

    // The serving nodes store each other's address from the announcements.
    peer_addr_becomes(&b, &ida, "10.77.0.1:4747", &[&sa, &sb]);
    peer_addr_becomes(&a, &idb, "10.77.0.2:4800", &[&sa, &sb]);

    // A node with another mesh key sees a, but cannot tell who it is.
    let stranger = Home::new();
    stranger.ok(&["mesh", "key", "generate"]);
    stranger.ok(&["peers", "add", &ida, "--policy", "full"]);
    let seen = discover_until(&ns.b, &stranger, "10.77.0.1", 4747, |_| true);
    assert_eq!(seen["known"], false, "{seen}");
    assert!(seen["peer"].is_null(), "{seen}");
    assert!(
        stranger.json(&["peers", "list"])["peers"][0]["addr"].is_null(),
        "discover changes nothing"
    );
}

#[test]
fn a_peer_that_moves_is_synced_at_its_new_address() {
    let Some(ns) = namespaces("m") else { return };
    let (a, b) = two_homes();
    let (ida, idb) = (id(&a), id(&b));
    let sa = Server::start_with(a.path(), Some(&ns.a), "10.77.0.1:4747", &[]);
    let mut sb = Server::start_with(b.path(), Some(&ns.b), "10.77.0.2:4747", &[]);
    a.ok(&["peers", "add", &idb, "10.77.0.2:4747", "--policy", "full"]);
    b.ok(&["peers", "add", &ida, "10.77.0.1:4747", "--policy", "full"]);
    a.ok(&["agent", "add", "alice"]);
    a.add("alice", "orbit before the move", &["global"]);

    let sync_a = || {
        let out = amos_in(Some(&ns.a), a.path())
            .args(["--json", "sync", "now"])
            .output()
            .expect("sync");
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (out.status.code(), v["peers"][0].clone())
    };
    let (code, r) = sync_a();
    assert_eq!(code, Some(0), "{r}\n{}\n{}", sa.log(), sb.log());
    assert_eq!(digest(&a), digest(&b));

    // b moves to another address and port.
    sb.stop();
    ns.add_b_addr("10.77.0.3/24");
    let sb = Server::start_with(b.path(), Some(&ns.b), "10.77.0.3:4800", &[]);
    a.add("alice", "orbit after the move", &["global"]);
    peer_addr_becomes(&a, &idb, "10.77.0.3:4800", &[&sa, &sb]);

    let (code, r) = sync_a();
    assert_eq!(code, Some(0), "{r}\n{}\n{}", sa.log(), sb.log());
    assert_eq!(r["result"], "ok", "{r}");
    assert_eq!(r["addr"], "10.77.0.3:4800", "{r}");
    assert!(r["facts_out"].as_u64().is_some_and(|n| n >= 1), "{r}");
    assert_eq!(digest(&a), digest(&b));
}
