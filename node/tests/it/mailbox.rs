//! Mailboxes end to end (docs/design.md §8.2, docs/cli.md "Mesh"): two
//! real homes that never run at the same time exchange sealed bundles
//! through a directory, with `amos peers add ID --policy P --mailbox DIR`
//! and `amos sync now` alone.
//!
//! * a round trip A → B → A converges both ways through the gate (a scoped
//!   peer's bundles carry only what its policy admits), incrementally (the
//!   next bundle holds only what is new) and idempotently (a bundle put back
//!   changes nothing);
//! * a bundle in the directory sealed to a third node is left untouched,
//!   and B cannot open it;
//! * a truncated bundle (a copy still arriving) is left in the directory and
//!   changes nothing; once whole it is taken; a `sync now` killed (-9) at an
//!   arbitrary point leaves a consistent store and the next one completes.

use std::path::{Path, PathBuf};

use crate::common::{Home, contains, db_hits};
use serde_json::Value;

fn node_id(h: &Home) -> String {
    h.json(&["id"])["node_id"]
        .as_str()
        .expect("node_id")
        .to_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The bundle files in `dir` (not the hidden ones being written).
fn bundles_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    v.sort();
    v
}

/// `amos --json sync now` (exit 0 required) → its one mailbox outcome.
fn mailbox_sync(h: &Home) -> Value {
    let v = h.json(&["sync", "now"]);
    let m = v["mailboxes"].as_array().expect("mailboxes");
    assert_eq!(m.len(), 1, "{v}");
    assert!(m[0]["error"].is_null(), "{v}");
    m[0].clone()
}

fn n(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

/// A (team apollo: alice, bob; carol outside it) and B (its own agents),
/// scoped peers of each other on `team:apollo` through one mailbox `dir`.
fn scoped_pair(dir: &Path) -> (Home, Home) {
    let (a, b) = (Home::new(), Home::new());
    a.ok(&["team", "create", "apollo"]);
    a.ok(&["agent", "add", "alice", "--team", "apollo"]);
    a.ok(&["agent", "add", "bob", "--team", "apollo"]);
    a.ok(&["agent", "add", "carol"]);
    for agent in ["alice", "bob", "carol"] {
        b.ok(&["agent", "add", agent]);
    }
    let (ia, ib) = (node_id(&a), node_id(&b));
    a.ok(&[
        "peers",
        "add",
        &ib,
        "--policy",
        "team:apollo",
        "--mailbox",
        p(dir),
    ]);
    b.ok(&[
        "peers",
        "add",
        &ia,
        "--policy",
        "team:apollo",
        "--mailbox",
        p(dir),
    ]);
    (a, b)
}

#[test]
fn a_mailbox_round_trip_between_homes_that_never_run_together() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir(&dir).unwrap();
    let (a, b) = scoped_pair(&dir);
    let listed = b.json(&["peers", "list"]);
    let canonical = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        listed["peers"][0]["mailbox"].as_str(),
        Some(p(&canonical)),
        "{listed}"
    );
    a.add("alice", "mbxteam launch checklist", &["team:apollo"]);
    a.add("alice", "mbxprivate diary of alice", &[]);
    a.add("carol", "mbxglobal note for everyone", &["global"]);

    // A alone: its bundle for B lands in the mailbox, sealed.
    let m = mailbox_sync(&a);
    assert_eq!((n(&m, "imported"), n(&m, "posted")), (0, 1), "{m}");
    let files = bundles_in(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    assert_eq!(
        u16::from_le_bytes([bytes[8], bytes[9]]),
        amos_protocol::BUNDLE_SEALED_VERSION
    );
    assert!(!contains(&bytes, b"mbxteam"));
    // A again, B still away: nothing new, nothing posted twice.
    let m = mailbox_sync(&a);
    assert_eq!((n(&m, "posted"), n(&m, "waiting")), (0, 1), "{m}");
    assert_eq!(bundles_in(&dir).len(), 1);

    // A bundle in the mailbox sealed to a third node C is not B's.
    let c = Home::new();
    let ic = node_id(&c);
    a.ok(&["peers", "add", &ic, "--policy", "full"]);
    let for_c = dir.join("for-c.amosb");
    a.ok(&["bundle", "export", p(&for_c), "--for", &ic, "--seal"]);
    let for_c_bytes = std::fs::read(&for_c).unwrap();
    // Keep a copy of A's bundle, to put back later.
    let first = bundles_in(&dir)
        .into_iter()
        .find(|f| *f != for_c)
        .expect("A's bundle");
    let first_bytes = std::fs::read(&first).unwrap();

    // B alone: takes A's bundle (removed), leaves C's, acknowledges it.
    let m = mailbox_sync(&b);
    assert_eq!((n(&m, "imported"), n(&m, "posted")), (1, 1), "{m}");
    assert!(n(&m, "applied") > 0, "{m}");
    // A's bundle held only what team:apollo admits: B's gate refused
    // nothing of it.
    assert_eq!(n(&m, "refused"), 0, "{m}");
    assert_eq!(n(&m, "facts_out"), 0, "nothing of B's is admitted yet: {m}");
    assert!(!first.exists(), "the imported bundle is removed");
    assert_eq!(
        std::fs::read(&for_c).unwrap(),
        for_c_bytes,
        "C's is untouched"
    );
    assert_eq!(
        b.search_texts("bob", "mbxteam"),
        vec!["mbxteam launch checklist"]
    );
    for word in ["mbxprivate", "mbxglobal"] {
        assert_eq!(db_hits(&b, word), Vec::<String>::new(), "{word} crossed");
    }
    // B cannot open C's bundle (one line, exit 3).
    let r = b.run(&["bundle", "import", p(&for_c)]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("is sealed to node"), "{r:?}");
    assert!(r.stderr.contains(&ic), "{r:?}");
    // B writes to the team it now holds, and posts that (only that).
    b.add("bob", "mbxback reply from b", &["team:apollo"]);
    b.add("bob", "mbxbprivate kept on b", &[]);
    let m = mailbox_sync(&b);
    assert_eq!((n(&m, "imported"), n(&m, "posted")), (0, 1), "{m}");
    assert!(n(&m, "facts_out") >= 1, "{m}");

    // A alone again: takes B's two bundles.
    let m = mailbox_sync(&a);
    assert_eq!(n(&m, "imported"), 2, "{m}");
    assert!(n(&m, "applied") > 0, "{m}");
    assert_eq!(n(&m, "refused"), 0, "{m}");
    assert_eq!(
        a.search_texts("alice", "mbxback"),
        vec!["mbxback reply from b"]
    );
    assert_eq!(db_hits(&a, "mbxbprivate"), Vec::<String>::new());
    // A's acknowledgement goes back with nothing else in it.
    assert_eq!((n(&m, "posted"), n(&m, "facts_out")), (1, 0), "{m}");

    // Incremental: one new memory, one small bundle.
    a.add("alice", "mbxnext second plan", &["team:apollo"]);
    let m = mailbox_sync(&a);
    assert_eq!(n(&m, "posted"), 1, "{m}");
    let out = n(&m, "facts_out");
    assert!((1..=3).contains(&out), "only the new memory goes: {m}");
    let m = mailbox_sync(&b);
    assert_eq!(n(&m, "imported"), 2, "{m}");
    assert_eq!(n(&m, "refused"), 0, "{m}");
    assert_eq!(
        b.search_texts("bob", "mbxnext"),
        vec!["mbxnext second plan"]
    );
    // …and nothing goes back but the acknowledgement.
    assert_eq!(n(&m, "facts_out"), 0, "{m}");
    assert_eq!(a.digest("team:apollo"), b.digest("team:apollo"));

    // Idempotent: A's first bundle put back changes nothing on B.
    let before = (b.fingerprint(), b.digest("team:apollo"));
    std::fs::write(&first, &first_bytes).unwrap();
    let m = mailbox_sync(&b);
    assert_eq!((n(&m, "imported"), n(&m, "applied")), (1, 0), "{m}");
    assert_eq!((b.fingerprint(), b.digest("team:apollo")), before);
    assert!(!first.exists());
    // C's bundle is still there, still C's.
    assert_eq!(std::fs::read(&for_c).unwrap(), for_c_bytes);
}

#[test]
fn a_truncated_bundle_waits_and_a_killed_sync_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir(&dir).unwrap();
    let (a, b) = scoped_pair(&dir);
    for i in 0..40 {
        a.add(
            "alice",
            &format!("mbxbulk note {i} for the team"),
            &["team:apollo"],
        );
    }
    a.add("alice", "mbxsecret private", &[]);
    // Small bundles: a cap of 8 rows each, the rest in the next ones.
    let r = a
        .cmd()
        .env("AMOS_MAILBOX_MAX_ROWS", "8")
        .args(["--json", "sync", "now"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    let posted = n(&v["mailboxes"][0], "posted");
    assert!(posted >= 5, "{v}");
    let files = bundles_in(&dir);
    assert_eq!(files.len() as u64, posted);

    // One of them still being copied in: cut in half.
    let victim = files[files.len() / 2].clone();
    let whole = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &whole[..whole.len() / 2]).unwrap();
    let r = b.run(&["--json", "sync", "now"]);
    assert_ne!(r.code, 0, "a bundle was left: {r:?}");
    let v = r.json();
    let m = &v["mailboxes"][0];
    assert_eq!(m["left"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(m["left"][0].as_str().unwrap().contains("truncated"), "{v}");
    assert!(victim.exists(), "the cut bundle stays for the next run");
    b.ok(&["check"]);
    assert_eq!(db_hits(&b, "mbxsecret"), Vec::<String>::new());

    // Whole again: the next run takes it, and B's answer tells A.
    std::fs::write(&victim, &whole).unwrap();
    let m = mailbox_sync(&b);
    assert_eq!(n(&m, "imported"), 1, "{m}");
    assert!(bundles_in(&dir).iter().all(|f| {
        let b = std::fs::read(f).unwrap();
        // Only B's answers are left (sent by B: its id at the sender's place).
        b[14..46] != whole[14..46]
    }));
    assert_eq!(a.digest("team:apollo"), b.digest("team:apollo"));

    // More from A, then a `sync now` on B killed at whatever point it has
    // reached; B stays consistent and the next run completes.
    for i in 0..40 {
        a.add(
            "alice",
            &format!("mbxlater note {i} for the team"),
            &["team:apollo"],
        );
    }
    let r = a
        .cmd()
        .env("AMOS_MAILBOX_MAX_ROWS", "8")
        .args(["sync", "now"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    // Killed once it took its first bundle (or wherever it is when that
    // is seen; if it finished first, the next run has nothing left).
    let waiting = bundles_in(&dir).len();
    let mut child = b
        .cmd()
        .args(["sync", "now"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..1_000_000 {
        if bundles_in(&dir).len() < waiting || child.try_wait().unwrap().is_some() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    b.ok(&["check"]);
    let m = mailbox_sync(&b);
    assert!(m["left"].as_array().unwrap().is_empty(), "{m}");
    assert_eq!(a.digest("team:apollo"), b.digest("team:apollo"));
    assert_eq!(
        b.search_texts("bob", "mbxlater").len(),
        40,
        "every later note arrived"
    );
    // And A takes B's answers: nothing left for it, nothing more to post.
    let m = mailbox_sync(&a);
    assert!(n(&m, "imported") >= 1, "{m}");
    assert_eq!(n(&m, "facts_out"), 0, "{m}");
}

/// Poll `done` every 50 ms until it holds or `limit` passes.
fn wait_until(limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// `amos serve` runs the mailboxes on its sync timer: A serving alone
/// posts for B; A stops; B serving alone takes it and answers; each side's
/// log says so.
#[test]
fn serve_posts_and_takes_mailbox_bundles_on_its_sync_timer() {
    use crate::common::server::Server;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir(&dir).unwrap();
    let (a, b) = scoped_pair(&dir);
    a.add("alice", "mbxserve plan for the team", &["team:apollo"]);
    let every = ["--no-mdns", "--sync-every", "1s"];
    let limit = std::time::Duration::from_secs(60);

    let mut sa = Server::start_with(a.path(), None, "127.0.0.1:0", &every);
    assert!(
        wait_until(limit, || !bundles_in(&dir).is_empty()),
        "A's serve posted nothing: {}",
        sa.log()
    );
    sa.stop();
    let posted = bundles_in(&dir);
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert!(sa.log().contains("mailbox"), "{}", sa.log());

    let mut sb = Server::start_with(b.path(), None, "127.0.0.1:0", &every);
    assert!(
        wait_until(limit, || !posted[0].exists()
            && !bundles_in(&dir).is_empty()),
        "B's serve did not take A's bundle and answer: {}",
        sb.log()
    );
    sb.stop();
    assert_eq!(
        b.search_texts("bob", "mbxserve"),
        vec!["mbxserve plan for the team"]
    );
}
