//! Mailboxes a relay holds (docs/design.md §8.2, §7.11), with real
//! processes and real QUIC on 127.0.0.1 (`--no-mdns`): only the relay
//! serves; A and B run `amos sync now|auto` one after the other, never at
//! the same time.
//!
//! * a round trip A → relay → B → relay → A converges, through a relay
//!   restart (what it holds is on disk); the relay deletes what B took and
//!   acknowledged; its home holds no fact and no plaintext of theirs;
//! * a bundle altered on the relay is refused at B, whose store does not
//!   change, and stays on the relay (never acknowledged);
//! * past the recipient's or the sender's mailbox quota a post is refused
//!   with a clear word, nothing more is held, and the bundle waits at the
//!   sender until the relay takes it;
//! * a relay whose expiry passed deletes what it held (the expiry setting
//!   drives it: the relay restarted with a shorter one), and the sender
//!   posts it again.

use std::path::PathBuf;

use crate::common::server::{Server, free_port, id};
use crate::common::{Home, relay_holds_nothing};
use serde_json::Value;

/// Periodic sync far beyond any test.
const QUIET: &[&str] = &["--no-mdns", "--sync-every", "1h"];

/// A relay R and two nodes A, B that use it for a mailbox between them
/// (and know no address of each other).
struct Trio {
    r: Home,
    a: Home,
    b: Home,
    r_addr: String,
}

impl Trio {
    fn new() -> Trio {
        let t = Trio {
            r: Home::new(),
            a: Home::new(),
            b: Home::new(),
            r_addr: format!("127.0.0.1:{}", free_port()),
        };
        let (ir, ia, ib) = (id(&t.r), id(&t.a), id(&t.b));
        for x in [&ia, &ib] {
            t.r.ok(&["peers", "add", x, "--policy", "none", "--relay"]);
        }
        for (h, other) in [(&t.a, &ib), (&t.b, &ia)] {
            h.ok(&["agent", "add", "alice"]);
            h.ok(&[
                "peers", "add", &ir, &t.r_addr, "--policy", "none", "--relay",
            ]);
            h.ok(&["peers", "add", other, "--policy", "global"]);
            let set = h.ok(&["peers", "mailbox", other, "--relay", &ir]);
            assert!(set.stdout.contains("held by relay"), "{set:?}");
        }
        t
    }

    fn relay(&self, extra: &[&str]) -> Server {
        let args: Vec<&str> = QUIET.iter().chain(extra).copied().collect();
        Server::start_with(self.r.path(), None, &self.r_addr, &args)
    }
}

/// `amos --json sync VERB` on `h`: its exit code and its one mailbox
/// outcome.
fn mailbox_sync(h: &Home, verb: &str) -> (i32, Value) {
    let r = h.run(&["--json", "sync", verb]);
    let v: Value = serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|_| panic!("no JSON from sync {verb}: {r:?}"));
    let m = v["mailboxes"].as_array().expect("mailboxes");
    assert_eq!(m.len(), 1, "{v}");
    (r.code, m[0].clone())
}

fn n(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

/// The files the relay holds: (path, sender's hex id, size).
fn held(r: &Home) -> Vec<(PathBuf, String, u64)> {
    let root = r.path().join("relay-held");
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(&root) else {
        return out;
    };
    for d in dirs.flatten().filter(|d| d.path().is_dir()) {
        for f in std::fs::read_dir(d.path()).expect("read_dir").flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let from = name.split('-').next().unwrap_or_default().to_owned();
            out.push((f.path(), from, f.metadata().expect("metadata").len()));
        }
    }
    out.sort();
    out
}

fn held_from(r: &Home, sender: &Home) -> Vec<(PathBuf, String, u64)> {
    let who = id(sender);
    held(r).into_iter().filter(|(_, f, _)| *f == who).collect()
}

#[test]
fn a_relay_holds_a_mailbox_for_two_nodes_that_never_run_together() {
    let t = Trio::new();
    let mut sr = t.relay(&[]);

    // A posts and stops.
    t.a.add("alice", "zanzibar waits on the relay", &["global"]);
    let (code, out) = mailbox_sync(&t.a, "now");
    assert_eq!(code, 0, "{out}\n{}", sr.log());
    assert!(n(&out, "posted") >= 1, "{out}");
    assert!(out["dir"].as_str().unwrap().starts_with("relay:"), "{out}");
    assert_eq!(held_from(&t.r, &t.a).len(), n(&out, "posted") as usize);
    // Held on disk: a relay restart keeps it.
    sr.stop();
    let sr = t.relay(&[]);
    assert!(!held_from(&t.r, &t.a).is_empty());
    relay_holds_nothing(&t.r, &["zanzibar"]);

    // B starts, fetches, converges, and replies; the relay deletes what B
    // took.
    t.b.add("alice", "quokka answers through the relay", &["global"]);
    let (code, out) = mailbox_sync(&t.b, "now");
    assert_eq!(code, 0, "{out}\n{}", sr.log());
    assert!(n(&out, "imported") >= 1 && n(&out, "applied") >= 1, "{out}");
    assert_eq!(
        t.b.search_texts("alice", "zanzibar"),
        ["zanzibar waits on the relay"]
    );
    assert!(
        held_from(&t.r, &t.a).is_empty(),
        "B acknowledged what it took: {:?}\n{}",
        held(&t.r),
        sr.log()
    );
    assert!(!held_from(&t.r, &t.b).is_empty(), "B's reply waits");

    // A, later, with `sync auto`: B's reply arrives.
    let (code, out) = mailbox_sync(&t.a, "auto");
    assert_eq!(code, 0, "{out}");
    assert!(n(&out, "applied") >= 1, "{out}");
    assert_eq!(
        t.a.search_texts("alice", "quokka"),
        ["quokka answers through the relay"]
    );
    assert_eq!(t.a.digest("global"), t.b.digest("global"));
    relay_holds_nothing(&t.r, &["zanzibar", "quokka"]);
    assert!(sr.log().contains("relay: holds"), "{}", sr.log());

    // A bundle altered on the relay: refused at B, B's store unchanged,
    // and it stays on the relay (never acknowledged).
    let before = held_from(&t.r, &t.a).len();
    t.a.add("alice", "walrus bends the bytes", &["global"]);
    let (code, _) = mailbox_sync(&t.a, "now");
    assert_eq!(code, 0);
    let now_held = held_from(&t.r, &t.a);
    assert_eq!(now_held.len(), before + 1, "{now_held:?}");
    let fingerprint = t.b.fingerprint();
    for (path, _, _) in &now_held {
        let mut bytes = std::fs::read(path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(path, bytes).unwrap();
    }
    let (code, out) = mailbox_sync(&t.b, "now");
    assert_ne!(code, 0, "a bundle that does not verify is reported: {out}");
    assert_eq!(n(&out, "applied"), 0, "{out}");
    assert!(!out["left"].as_array().unwrap().is_empty(), "{out}");
    assert!(t.b.search_texts("alice", "walrus").is_empty());
    assert_eq!(t.b.fingerprint(), fingerprint, "B's store did not change");
    assert_eq!(held_from(&t.r, &t.a).len(), now_held.len(), "kept");
    relay_holds_nothing(&t.r, &["walrus"]);
}

#[test]
fn a_relay_mailbox_refuses_past_its_quota_and_deletes_what_expires() {
    let t = Trio::new();
    let mut sr = t.relay(&[]);
    t.a.add("alice", "zanzibar is the first", &["global"]);
    let (code, out) = mailbox_sync(&t.a, "now");
    assert_eq!(code, 0, "{out}");
    let first = held_from(&t.r, &t.a);
    assert_eq!(first.len(), 1, "{first:?}");
    let size = first[0].2;
    sr.stop();

    // Room for one bundle and a half, for B (from all) or from A (for all).
    let quota = format!("{}", size + size / 2);
    t.a.add("alice", "quokka is the second", &["global"]);
    // (A quota smaller than the bundle itself is refused before its bytes
    // are read.)
    for (flag, quota, word) in [
        ("--mailbox-quota", quota.as_str(), "for the recipient"),
        ("--mailbox-sender-quota", quota.as_str(), "from this node"),
        ("--mailbox-quota", "100", "for the recipient"),
    ] {
        let mut sr = t.relay(&[flag, quota]);
        let (code, out) = mailbox_sync(&t.a, "now");
        assert_ne!(code, 0, "{out}");
        let error = out["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("mailbox quota") && error.contains(word),
            "{flag}: {out}"
        );
        assert!(error.contains("1 bundle waits here"), "{out}");
        assert_eq!(held(&t.r), first, "nothing more held: {}", sr.log());
        sr.stop();
    }

    // A relay with room takes what waited.
    let mut sr = t.relay(&[]);
    let (code, out) = mailbox_sync(&t.a, "now");
    assert_eq!(code, 0, "{out}");
    assert_eq!(held_from(&t.r, &t.a).len(), 2, "{out}");
    sr.stop();

    // Restarted with an expiry longer than their age, it keeps them; with
    // one they are past, it deletes them.
    let mut sr = t.relay(&["--mailbox-expiry", "1h"]);
    assert_eq!(held(&t.r).len(), 2, "{}", sr.log());
    sr.stop();
    let mut sr = t.relay(&["--mailbox-expiry", "0s"]);
    assert!(held(&t.r).is_empty(), "{}", sr.log());
    assert!(sr.log().contains("expired"), "{}", sr.log());
    sr.stop();

    // B finds nothing; A, next time, posts again what expired, and B
    // gets it.
    let sr = t.relay(&[]);
    let (code, out) = mailbox_sync(&t.b, "now");
    assert_eq!((code, n(&out, "imported")), (0, 0), "{out}");
    let (code, out) = mailbox_sync(&t.a, "now");
    assert_eq!(code, 0, "{out}");
    assert!(n(&out, "posted") >= 1, "{out}");
    let (code, out) = mailbox_sync(&t.b, "now");
    assert_eq!(code, 0, "{out}\n{}", sr.log());
    assert_eq!(
        t.b.search_texts("alice", "zanzibar"),
        ["zanzibar is the first"]
    );
    assert_eq!(
        t.b.search_texts("alice", "quokka"),
        ["quokka is the second"]
    );
}
