//! Relays (docs/design.md §7.11) with real `amos serve` processes:
//!
//! * on 127.0.0.1 (`--no-mdns`): two nodes that know no address of each
//!   other converge through a third, their relay — `sync now` and push —
//!   and the relay's home holds nothing of theirs; a node the relay does not
//!   serve gets nothing through it;
//! * in network namespaces this test makes (root and `ip`/`iptables`
//!   needed, else SKIPPED on stderr): two nodes behind filters that let
//!   nothing in but replies, each reaching only the relay, converge through
//!   it, and cannot reach each other directly;
//! * a relay that alters, drops or reorders what it forwards
//!   (`AMOS_RELAY_FAULT`) fails sessions (striking from the first frame: no
//!   store changes at all), and never gets anything into a store but facts
//!   exactly as their author wrote them (QUIC may recover from reordering:
//!   the session then delivers exactly what was written);
//! * a relay peer over its quota is cut off while others go on.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::server::{Server, amos_in, free_port, id};
use crate::common::{Home, Run, relay_holds_nothing};
use serde_json::Value;

/// Periodic sync far beyond any test: what moves was dialled or pushed.
const QUIET: &[&str] = &["--no-mdns", "--sync-every", "1h"];

/// Poll `done` every 100 ms until it holds or `limit` passes.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// `amos ARGS` on `h`, inside `netns` if given.
fn run_in(netns: Option<&str>, h: &Home, args: &[&str]) -> Run {
    let o = amos_in(netns, h.path())
        .args(args)
        .output()
        .expect("spawn amos");
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn ok_in(netns: Option<&str>, h: &Home, args: &[&str]) -> Run {
    let r = run_in(netns, h, args);
    assert_eq!(r.code, 0, "amos {args:?} failed: {r:?}");
    r
}

/// `amos --json sync now PEER` in `netns`: (exit code, the peer's result).
fn sync_now(netns: Option<&str>, h: &Home, peer: &str) -> (i32, Value) {
    let r = run_in(netns, h, &["--json", "sync", "now", peer]);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap_or(Value::Null);
    (r.code, v["peers"][0].clone())
}

/// Where the relay is and who uses it; `ns` names each node's namespace
/// (all `None` on loopback).
struct Trio {
    r: Home,
    a: Home,
    b: Home,
    ns: [Option<String>; 3],
}

impl Trio {
    fn new(ns: [Option<String>; 3]) -> Trio {
        let trio = Trio {
            r: Home::new(),
            a: Home::new(),
            b: Home::new(),
            ns,
        };
        for h in [&trio.a, &trio.b] {
            h.ok(&["agent", "add", "alice"]);
        }
        trio
    }

    fn ns(&self, i: usize) -> Option<&str> {
        self.ns[i].as_deref()
    }

    /// The relay serves a and b; each knows the relay at `r_addr[i]` and
    /// reaches the other through it with `policy`.
    fn link(&self, r_addr: [&str; 2], policy: &str) {
        let (ir, ia, ib) = (id(&self.r), id(&self.a), id(&self.b));
        for x in [&ia, &ib] {
            ok_in(
                self.ns(0),
                &self.r,
                &["peers", "add", x, "--policy", "none", "--relay"],
            );
        }
        for (i, (h, other)) in [(&self.a, &ib), (&self.b, &ia)].into_iter().enumerate() {
            ok_in(
                self.ns(i + 1),
                h,
                &[
                    "peers", "add", &ir, r_addr[i], "--policy", "none", "--relay",
                ],
            );
            ok_in(
                self.ns(i + 1),
                h,
                &["peers", "add", other, "--policy", policy, "--via", &ir],
            );
        }
    }
}

/// Wait (bounded) until the relay says `who` listens on it.
fn listening(relay: &Server, who: &Home) {
    let who = id(who);
    assert!(
        wait_until(Duration::from_secs(30), || relay
            .log()
            .contains(&format!("relay: {who} listens"))),
        "{who} never listened on the relay: {}",
        relay.log()
    );
}

/// The memory texts `h`'s agent alice sees for `word`.
fn texts(netns: Option<&str>, h: &Home, word: &str) -> Vec<String> {
    let r = ok_in(
        netns,
        h,
        &[
            "--json", "search", word, "--as", "alice", "--mode", "lexical",
        ],
    );
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("json");
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn two_nodes_converge_through_a_relay_that_keeps_nothing() {
    let trio = Trio::new([None, None, None]);
    let r_addr = format!("127.0.0.1:{}", free_port());
    trio.link([&r_addr, &r_addr], "global");
    let sr = Server::start_with(trio.r.path(), None, &r_addr, QUIET);
    // a and b serve on loopback too, but neither knows the other's address.
    let _sa = Server::start_with(
        trio.a.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        QUIET,
    );
    let _sb = Server::start_with(
        trio.b.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        QUIET,
    );
    listening(&sr, &trio.a);
    listening(&sr, &trio.b);
    let (ia, ib) = (id(&trio.a), id(&trio.b));

    // sync now, through the relay.
    trio.a
        .add("alice", "zanzibar crossed the relay", &["global"]);
    let (code, peer) = sync_now(None, &trio.a, &ib);
    assert_eq!(code, 0, "{peer}\n{}", sr.log());
    assert_eq!(peer["result"], "ok", "{peer}");
    assert_eq!(
        texts(None, &trio.b, "zanzibar"),
        ["zanzibar crossed the relay"]
    );

    // push, through the relay: b's serve dials a by itself.
    trio.b.add("alice", "quokka pushed back", &["global"]);
    assert!(
        wait_until(Duration::from_secs(30), || !texts(None, &trio.a, "quokka")
            .is_empty()),
        "the push never arrived: {}",
        sr.log()
    );

    // The link shows what it is.
    let peers = trio.a.json(&["peers", "list"]);
    let b_row = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["node_id"] == ib.as_str())
        .unwrap();
    assert_eq!(b_row["via"], id(&trio.r).as_str(), "{peers}");
    assert!(
        b_row["addr"].is_null(),
        "nothing learnt from a pipe: {peers}"
    );
    let on_r = trio.r.json(&["peers", "list"]);
    assert!(
        on_r["peers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["relay"] == true && p["policy"] == "none"),
        "{on_r}"
    );
    let listed = trio.r.ok(&["peers", "list"]).stdout;
    assert!(listed.contains("relay"), "{listed}");

    // The relay learnt who piped to whom and how much; it kept nothing.
    assert!(sr.log().contains("relay: pipe"), "{}", sr.log());
    relay_holds_nothing(&trio.r, &["zanzibar", "quokka"]);
    // And a relay link's own sync is refused: policy none carries nothing.
    let r = trio.a.run(&["sync", "now", &id(&trio.r)]);
    assert_eq!(r.code, 2, "{r:?}");
    let _ = ia;
}

#[test]
fn a_relay_forwards_only_for_its_relay_peers() {
    let trio = Trio::new([None, None, None]);
    let r_addr = format!("127.0.0.1:{}", free_port());
    trio.link([&r_addr, &r_addr], "global");
    let sr = Server::start_with(trio.r.path(), None, &r_addr, QUIET);
    let _sb = Server::start_with(
        trio.b.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        QUIET,
    );
    listening(&sr, &trio.b);
    let ib = id(&trio.b);
    let before = trio.b.fingerprint();

    // b would take both nodes below as peers through the relay: only the
    // relay stands in their way.
    let stranger = Home::new();
    let plain = Home::new();
    let ir = id(&trio.r);
    for x in [&stranger, &plain] {
        trio.b
            .ok(&["peers", "add", &id(x), "--policy", "global", "--via", &ir]);
    }
    // A node the relay never registered: refused at the relay's handshake.
    stranger.ok(&["peers", "add", &ir, &r_addr, "--policy", "none", "--relay"]);
    stranger.ok(&["peers", "add", &ib, "--policy", "global", "--via", &ir]);
    let (code, peer) = sync_now(None, &stranger, &ib);
    assert_ne!(code, 0, "{peer}");
    assert_ne!(peer["result"], "ok", "{peer}");

    // A registered peer of the relay whose link is not a relay link: refused.
    trio.r
        .ok(&["peers", "add", &id(&plain), "--policy", "none"]);
    plain.ok(&["peers", "add", &ir, &r_addr, "--policy", "none", "--relay"]);
    plain.ok(&["peers", "add", &ib, "--policy", "global", "--via", &ir]);
    let (code, peer) = sync_now(None, &plain, &ib);
    assert_ne!(code, 0, "{peer}");
    assert!(
        peer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("does not serve"),
        "{peer}"
    );

    // `--via` a peer that is not a relay link is refused at once.
    let r = trio
        .a
        .run(&["peers", "add", &ib, "--policy", "global", "--via", &ib]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(trio.b.fingerprint(), before, "nothing reached b");
}

// ---------------------------------------------------------------- faults

/// One relayed session from a to b through a relay started with
/// `AMOS_RELAY_FAULT=fault`: returns whether it succeeded. Whatever it did,
/// each side holds only its own memory and, at most, the other's exactly
/// as written: facts that crossed before the relay struck arrived intact or
/// not at all. With `strict` (the relay strikes from the first frame, so no
/// session can start) neither store changed at all.
fn relayed_session_with_fault(fault: &str, strict: bool) -> bool {
    let trio = Trio::new([None, None, None]);
    let r_addr = format!("127.0.0.1:{}", free_port());
    trio.link([&r_addr, &r_addr], "global");
    let sr = Server::start_env(
        trio.r.path(),
        None,
        &r_addr,
        QUIET,
        &[("AMOS_RELAY_FAULT", fault)],
    );
    let _sb = Server::start_with(
        trio.b.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        &["--no-mdns", "--sync-every", "1h", "--no-push"],
    );
    listening(&sr, &trio.b);
    let (walrus, bison) = ("walrus sent through a faulty relay", "bison kept at home");
    trio.a.add("alice", walrus, &["global"]);
    trio.b.add("alice", bison, &["global"]);
    let (a0, b0) = (trio.a.fingerprint(), trio.b.fingerprint());
    let (code, peer) = sync_now(None, &trio.a, &id(&trio.b));
    let ok = code == 0 && peer["result"] == "ok";
    for (h, own, other, word) in [
        (&trio.a, walrus, bison, "bison"),
        (&trio.b, bison, walrus, "walrus"),
    ] {
        let own_word = own.split(' ').next().unwrap_or_default();
        assert_eq!(texts(None, h, own_word), [own], "{fault}");
        let got = texts(None, h, word);
        assert!(got.is_empty() || got == [other], "{fault}: {got:?}");
        if ok {
            assert_eq!(got, [other], "{fault}: a session that succeeded");
        }
        let memories = h.fingerprint()["memories"].as_u64().unwrap_or(99);
        assert!(memories <= 2, "{fault}: {memories} memories");
    }
    if strict {
        assert!(!ok, "{fault}: no session can start");
        assert_eq!(trio.a.fingerprint(), a0, "{fault}: a changed");
        assert_eq!(trio.b.fingerprint(), b0, "{fault}: b changed");
    }
    assert!(sr.log().contains("misbehaves on purpose"), "{}", sr.log());
    relay_holds_nothing(&trio.r, &["walrus", "bison"]);
    ok
}

#[test]
fn a_relay_that_alters_or_drops_bytes_fails_the_session_and_changes_no_store() {
    // From the first packet: no handshake completes, nothing changes.
    relayed_session_with_fault("corrupt:0", true);
    relayed_session_with_fault("drop:0", true);
    // After the handshake's first packets: the connection stalls and the
    // session fails; what crossed before arrived as written or not at all.
    assert!(!relayed_session_with_fault("corrupt:6", false));
}

#[test]
fn a_relay_that_reorders_packets_delivers_exactly_what_was_written_or_nothing() {
    // QUIC puts reordered packets back in order: the session may well
    // succeed, and then b holds a's text as written (checked inside).
    let _ = relayed_session_with_fault("reorder:0", false);
    let _ = relayed_session_with_fault("reorder:4", false);
}

// ------------------------------------------------------------- namespaces

/// Three network namespaces, `…r` joined to `…a` (10.78.1.0/24) and to
/// `…b` (10.78.2.0/24) by veth pairs; the relay does not route between
/// them, and a and b let in nothing but replies (iptables). Deleted on
/// drop (which removes the veth pairs and the rules), even on failure.
struct Namespaces {
    names: [String; 3],
}

fn sh(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program} {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Namespaces {
    fn make(tag: &str) -> Result<Namespaces, String> {
        let pid = std::process::id();
        let names = ["r", "a", "b"].map(|n| format!("amosrl{pid}{tag}{n}"));
        let ns = Namespaces {
            names: names.clone(),
        };
        for n in &names {
            sh("ip", &["netns", "add", n])?;
            sh("ip", &["-n", n, "link", "set", "lo", "up"])?;
        }
        for (i, side) in [(1usize, "a"), (2, "b")] {
            // Interface names: at most 15 bytes.
            let (vr, vx) = (
                format!("rl{pid}{tag}{side}r"),
                format!("rl{pid}{tag}{side}x"),
            );
            sh(
                "ip",
                &[
                    "link", "add", &vr, "netns", &names[0], "type", "veth", "peer", "name", &vx,
                    "netns", &names[i],
                ],
            )?;
            let (ar, ax) = (format!("10.78.{i}.1/24"), format!("10.78.{i}.2/24"));
            sh("ip", &["-n", &names[0], "addr", "add", &ar, "dev", &vr])?;
            sh("ip", &["-n", &names[i], "addr", "add", &ax, "dev", &vx])?;
            sh("ip", &["-n", &names[0], "link", "set", &vr, "up"])?;
            sh("ip", &["-n", &names[i], "link", "set", &vx, "up"])?;
            // Behind NAT: nothing comes in but replies to what went out.
            let ipt = |rule: &[&str]| {
                let mut a = vec!["netns", "exec", &names[i], "iptables"];
                a.extend_from_slice(rule);
                sh("ip", &a)
            };
            ipt(&["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"])?;
            ipt(&[
                "-A",
                "INPUT",
                "-m",
                "conntrack",
                "--ctstate",
                "ESTABLISHED,RELATED",
                "-j",
                "ACCEPT",
            ])?;
            ipt(&["-P", "INPUT", "DROP"])?;
        }
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = sh("ip", &["netns", "del", n]);
        }
    }
}

/// The namespaces, or `None` after saying loudly why the test is skipped.
fn namespaces(tag: &str) -> Option<Namespaces> {
    let missing: Vec<&str> = ["ip", "iptables"]
        .into_iter()
        .filter(|p| {
            Command::new(p)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
        })
        .collect();
    let made = if missing.is_empty() {
        Namespaces::make(tag)
    } else {
        Err(format!("missing {missing:?}"))
    };
    match made {
        Ok(ns) => Some(ns),
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the relay namespace test needs root, `ip` and `iptables` to make \
                 its own network namespaces ({e})"
            );
            None
        }
    }
}

#[test]
fn behind_filters_that_let_nothing_in_two_nodes_converge_only_through_the_relay() {
    let Some(ns) = namespaces("c") else { return };
    let [nr, na, nb] = ns.names.clone();
    let trio = Trio::new([Some(nr.clone()), Some(na.clone()), Some(nb.clone())]);
    let (ia, ib) = (id(&trio.a), id(&trio.b));
    // Before the relay: b's own address, which a cannot reach.
    ok_in(
        Some(&na),
        &trio.a,
        &["peers", "add", &ib, "10.78.2.2:4747", "--policy", "global"],
    );
    let sr = Server::start_with(trio.r.path(), Some(&nr), "0.0.0.0:4747", QUIET);
    let _sb = Server::start_with(trio.b.path(), Some(&nb), "10.78.2.2:4747", QUIET);
    let r = run_in(
        Some(&na),
        &trio.a,
        &["--json", "sync", "now", &ib, "--connect-timeout", "1s"],
    );
    assert_ne!(r.code, 0, "a reached b directly: {r:?}");
    // Nor can the relay's host reach a node behind its filter.
    let _sa = Server::start_with(trio.a.path(), Some(&na), "10.78.1.2:4747", QUIET);
    let probe = Home::new();
    ok_in(
        Some(&nr),
        &probe,
        &["peers", "add", &ia, "10.78.1.2:4747", "--policy", "global"],
    );
    let (code, _) = sync_now(Some(&nr), &probe, &ia);
    assert_ne!(code, 0, "the filter let a dial in");

    // The relay links: a reaches b through r (its address stays, unused).
    trio.link(["10.78.1.1:4747", "10.78.2.1:4747"], "global");
    listening(&sr, &trio.a);
    listening(&sr, &trio.b);

    trio.a
        .add("alice", "narwhal behind two filters", &["global"]);
    let (code, peer) = sync_now(Some(&na), &trio.a, &ib);
    assert_eq!(code, 0, "{peer}\n{}", sr.log());
    assert_eq!(
        texts(Some(&nb), &trio.b, "narwhal"),
        ["narwhal behind two filters"]
    );
    // Push from b, through the relay, into a behind its filter.
    trio.b.add("alice", "pangolin pushed inward", &["global"]);
    assert!(
        wait_until(Duration::from_secs(30), || !texts(
            Some(&na),
            &trio.a,
            "pangolin"
        )
        .is_empty()),
        "the push never arrived: {}",
        sr.log()
    );
    // Converged: the same digest over what both share.
    let digest = |n: &str, h: &Home| {
        let r = ok_in(Some(n), h, &["--json", "digest", "--scope", "global"]);
        serde_json::from_str::<Value>(r.stdout.trim()).expect("json")["digest"].clone()
    };
    assert_eq!(digest(&na, &trio.a), digest(&nb, &trio.b));
    relay_holds_nothing(&trio.r, &["narwhal", "pangolin"]);
}

/// The hostile relay of [`relayed_session_with_fault`], in the namespaces
/// behind filters: a relay that alters every byte it forwards (from the
/// first packet of each pipe) lets no session through and changes no store,
/// and keeps nothing of what it saw.
#[test]
fn behind_filters_a_relay_that_alters_bytes_fails_the_session_and_changes_no_store() {
    let Some(ns) = namespaces("f") else { return };
    let [nr, na, nb] = ns.names.clone();
    let trio = Trio::new([Some(nr.clone()), Some(na.clone()), Some(nb.clone())]);
    let ib = id(&trio.b);
    trio.link(["10.78.1.1:4747", "10.78.2.1:4747"], "global");
    let sr = Server::start_env(
        trio.r.path(),
        Some(&nr),
        "0.0.0.0:4747",
        QUIET,
        &[("AMOS_RELAY_FAULT", "corrupt:0")],
    );
    let _sb = Server::start_with(trio.b.path(), Some(&nb), "10.78.2.2:4747", QUIET);
    listening(&sr, &trio.b);
    let (walrus, bison) = (
        "walrus behind a hostile relay",
        "bison kept behind a filter",
    );
    trio.a.add("alice", walrus, &["global"]);
    trio.b.add("alice", bison, &["global"]);
    let (a0, b0) = (trio.a.fingerprint(), trio.b.fingerprint());
    let (code, peer) = sync_now(Some(&na), &trio.a, &ib);
    assert_ne!(
        code, 0,
        "a session through a relay altering every byte: {peer}"
    );
    assert_eq!(trio.a.fingerprint(), a0, "a changed");
    assert_eq!(trio.b.fingerprint(), b0, "b changed");
    assert!(texts(Some(&na), &trio.a, "bison").is_empty());
    assert!(texts(Some(&nb), &trio.b, "walrus").is_empty());
    assert!(sr.log().contains("misbehaves on purpose"), "{}", sr.log());
    relay_holds_nothing(&trio.r, &["walrus", "bison"]);
}

/// A mailbox the relay holds (docs/design.md §8.2), in the namespaces
/// behind filters: A posts to the relay and stops; B, which A can never
/// dial and which never runs with it, fetches from the relay, converges and
/// replies; A fetches the reply. Only the relay serves; its home keeps no
/// fact and no plaintext of theirs.
#[test]
fn behind_filters_two_nodes_that_never_run_together_meet_in_the_relays_mailbox() {
    let Some(ns) = namespaces("m") else { return };
    let [nr, na, nb] = ns.names.clone();
    let trio = Trio::new([Some(nr.clone()), Some(na.clone()), Some(nb.clone())]);
    let (ir, ia, ib) = (id(&trio.r), id(&trio.a), id(&trio.b));
    for x in [&ia, &ib] {
        ok_in(
            Some(&nr),
            &trio.r,
            &["peers", "add", x, "--policy", "none", "--relay"],
        );
    }
    for (n, h, other, r_addr) in [
        (&na, &trio.a, &ib, "10.78.1.1:4747"),
        (&nb, &trio.b, &ia, "10.78.2.1:4747"),
    ] {
        ok_in(
            Some(n),
            h,
            &["peers", "add", &ir, r_addr, "--policy", "none", "--relay"],
        );
        // No address and no relay link to the other: a mailbox only.
        ok_in(Some(n), h, &["peers", "add", other, "--policy", "global"]);
        ok_in(Some(n), h, &["peers", "mailbox", other, "--relay", &ir]);
    }
    let sr = Server::start_with(trio.r.path(), Some(&nr), "0.0.0.0:4747", QUIET);
    let mailbox = |n: &str, h: &Home, peer: &str| -> Value {
        let r = run_in(Some(n), h, &["--json", "sync", "now", peer]);
        assert_eq!(r.code, 0, "{r:?}\n{}", sr.log());
        let v: Value = serde_json::from_str(r.stdout.trim()).expect("json");
        v["mailboxes"][0].clone()
    };

    trio.a
        .add("alice", "zanzibar waits behind two filters", &["global"]);
    let posted = mailbox(&na, &trio.a, &ib);
    assert!(posted["posted"].as_u64() >= Some(1), "{posted}");
    trio.b.add(
        "alice",
        "quokka answers from behind its filter",
        &["global"],
    );
    let fetched = mailbox(&nb, &trio.b, &ia);
    assert!(fetched["applied"].as_u64() >= Some(1), "{fetched}");
    assert_eq!(
        texts(Some(&nb), &trio.b, "zanzibar"),
        ["zanzibar waits behind two filters"]
    );
    let back = mailbox(&na, &trio.a, &ib);
    assert!(back["applied"].as_u64() >= Some(1), "{back}");
    assert_eq!(
        texts(Some(&na), &trio.a, "quokka"),
        ["quokka answers from behind its filter"]
    );
    relay_holds_nothing(&trio.r, &["zanzibar", "quokka"]);
}

// ---------------------------------------------------------------- limits

#[test]
fn a_relay_peer_over_its_quota_is_cut_off_and_the_others_go_on() {
    let trio = Trio::new([None, None, None]);
    let r_addr = format!("127.0.0.1:{}", free_port());
    trio.link([&r_addr, &r_addr], "global");
    // c: another relay peer, reaching b through the same relay.
    let c = Home::new();
    c.ok(&["agent", "add", "alice"]);
    let (ir, ib, ic) = (id(&trio.r), id(&trio.b), id(&c));
    trio.r
        .ok(&["peers", "add", &ic, "--policy", "none", "--relay"]);
    c.ok(&["peers", "add", &ir, &r_addr, "--policy", "none", "--relay"]);
    c.ok(&["peers", "add", &ib, "--policy", "global", "--via", &ir]);
    trio.b
        .ok(&["peers", "add", &ic, "--policy", "global", "--via", &ir]);
    let sr = Server::start_with(
        trio.r.path(),
        None,
        &r_addr,
        &["--no-mdns", "--sync-every", "1h", "--relay-quota", "96K"],
    );
    let _sb = Server::start_with(
        trio.b.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        &["--no-mdns", "--sync-every", "1h", "--no-push"],
    );
    listening(&sr, &trio.b);

    // a has far more to send than its quota: cut off mid-way.
    let filler: String = "sloth ".repeat(6000);
    for i in 0..5 {
        trio.a.add("alice", &format!("{filler} {i}"), &["global"]);
    }
    let (code, peer) = sync_now(None, &trio.a, &ib);
    assert_ne!(code, 0, "{peer}\n{}", sr.log());
    assert!(sr.log().contains("over its quota"), "{}", sr.log());
    // And refused a new pipe for the rest of the window.
    let (code, peer) = sync_now(None, &trio.a, &ib);
    assert_ne!(code, 0, "{peer}");
    assert!(
        peer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("limits"),
        "{peer}"
    );

    // c, within its quota, reaches b through the same relay.
    c.add("alice", "tapir within its quota", &["global"]);
    let (code, peer) = sync_now(None, &c, &ib);
    assert_eq!(code, 0, "{peer}\n{}", sr.log());
    assert_eq!(texts(None, &trio.b, "tapir"), ["tapir within its quota"]);
    relay_holds_nothing(&trio.r, &["sloth", "tapir"]);
}

// ------------------------------------------------------------------ join

#[test]
fn a_node_joins_through_the_relay_its_pairing_code_names() {
    let r = Home::new();
    let b = Home::apollo();
    let j = Home::new();
    let (ir, ib, ij) = (id(&r), id(&b), id(&j));
    let r_addr = format!("127.0.0.1:{}", free_port());
    // The relay serves the inviter and, told beforehand, the joiner.
    for x in [&ib, &ij] {
        r.ok(&["peers", "add", x, "--policy", "none", "--relay"]);
    }
    b.ok(&["peers", "add", &ir, &r_addr, "--policy", "none", "--relay"]);
    let sr = Server::start_with(r.path(), None, &r_addr, QUIET);
    let _sb = Server::start_with(b.path(), None, &format!("127.0.0.1:{}", free_port()), QUIET);
    listening(&sr, &b);
    // Not a relay peer here: bad input, no code.
    let bad = b.run(&["team", "invite", "apollo", "--via", &ij]);
    assert_eq!(bad.code, 2, "{bad:?}");
    let code = b.json(&["team", "invite", "apollo", "--via", &ir])["code"]
        .as_str()
        .expect("code")
        .to_owned();

    let joined = j.json(&["join", &code, "--as", "alice"]);
    assert_eq!(joined["peer"], ib.as_str(), "{joined}");
    let peers = j.json(&["peers", "list"]);
    let row = |who: &str| {
        peers["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["node_id"] == who)
            .cloned()
            .unwrap_or_else(|| panic!("{who} not in {peers}"))
    };
    assert_eq!(row(&ib)["via"], ir.as_str(), "{peers}");
    assert!(row(&ib)["addr"].is_null(), "{peers}");
    assert_eq!(row(&ir)["relay"], true, "{peers}");
    assert_eq!(row(&ir)["policy"], "none", "{peers}");
    assert_eq!(row(&ir)["addr"], r_addr.as_str(), "{peers}");

    // And they sync through it from then on.
    b.add("alice", "okapi shared with the joiner", &["team:apollo"]);
    let (code, peer) = sync_now(None, &j, &ib);
    assert_eq!(code, 0, "{peer}\n{}", sr.log());
    assert_eq!(texts(None, &j, "okapi"), ["okapi shared with the joiner"]);
    relay_holds_nothing(&r, &["okapi"]);
}
