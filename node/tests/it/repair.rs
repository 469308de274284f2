//! Range-based repair between real nodes over QUIC on 127.0.0.1
//! (docs/design.md §7.9): a node restored from an old copy of its store
//! (a new log epoch) converges by reconciliation, for a small fraction of
//! the bytes a full re-send takes; `amos sync now --repair` heals a loss
//! no watermark shows, and so does the session after a digest disagreed.

use serde_json::Value;

use crate::common::server::{Server, pair};
use crate::common::{Home, import_mem0_to_apollo, lose_one};

/// `n` memories from alice, shared with `team:apollo`, in one import.
fn import(h: &Home, tag: &str, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mem0.json");
    let results: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "id": format!("{tag}-{i}"),
                "memory": format!("{tag} memory number {i}: the launch checklist item {i} is done"),
            })
        })
        .collect();
    std::fs::write(&file, serde_json::json!({ "results": results }).to_string()).unwrap();
    let r = import_mem0_to_apollo(h, &file);
    assert_eq!(r.code, 0, "{r:?}");
    let r = r.json();
    assert_eq!(r["memories"], n, "{r}");
}

/// The full digest of a home.
fn digest(h: &Home) -> String {
    h.json(&["digest"])["digest"].as_str().unwrap().to_owned()
}

/// `amos sync now` from `h` (one peer): its result must be ok.
fn sync_ok(h: &Home, args: &[&str]) {
    let mut a = vec!["now"];
    a.extend_from_slice(args);
    let (code, peers) = h.sync(&a);
    assert_eq!(code, 0, "{peers:?}");
    assert_eq!(peers[0]["result"], "ok", "{peers:?}");
}

/// The figures of `h`'s last session with its only peer: (bytes in + out,
/// facts in + out).
fn last_session(h: &Home) -> (u64, u64) {
    let p = &h.json(&["peers", "list"])["peers"][0];
    let s = &p["last_session"];
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    (
        n("bytes_in") + n("bytes_out"),
        n("facts_in") + n("facts_out"),
    )
}

#[test]
fn a_restored_node_converges_by_repair_for_a_fraction_of_a_resend() {
    let a = Home::apollo();
    let b = Home::new();
    import(&a, "alpha", 300);
    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    // The first sync is a full send: the yardstick.
    sync_ok(&b, &[]);
    assert_eq!(digest(&a), digest(&b));
    let (full_bytes, full_facts) = last_session(&b);
    assert!(full_facts >= 600, "{full_facts}");

    // b backs up, a writes three more, b syncs them, then b is restored
    // from the backup: it lacks them and its log epoch is new.
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("b.db");
    b.ok(&["backup", backup.to_str().unwrap()]);
    import(&a, "omega", 3);
    sync_ok(&b, &[]);
    assert_eq!(digest(&a), digest(&b));
    let epoch = b.json(&["status"])["epoch"].clone();
    b.ok(&["restore", backup.to_str().unwrap(), "--force"]);
    assert_ne!(b.json(&["status"])["epoch"], epoch, "a new log epoch");
    assert_ne!(digest(&a), digest(&b), "b lost the last three");

    // Without repair, b would re-send its whole log (its epoch changed):
    // about `full_bytes`. The repair sends the three memories b lacks.
    sync_ok(&b, &[]);
    assert_eq!(digest(&a), digest(&b), "converged");
    let (bytes, facts) = last_session(&b);
    eprintln!("repair: {bytes} bytes; the first (full) send: {full_bytes} bytes");
    assert_eq!(
        facts, 6,
        "three memories, content and acl: nothing else moved"
    );
    assert!(
        bytes * 10 < full_bytes,
        "the repair took {bytes} bytes, a full send {full_bytes}"
    );
    // Trusted again: the next session is idle and the digests agree.
    sync_ok(&b, &[]);
    let p = &b.json(&["peers", "list"])["peers"][0];
    assert_eq!(p["digest"]["agree"], true, "{p}");
    assert_eq!(last_session(&b).1, 0);
}

#[test]
fn sync_now_repair_heals_a_loss_no_watermark_shows_and_so_does_a_disagreeing_digest() {
    let a = Home::apollo();
    let b = Home::new();
    import(&a, "beta", 20);
    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    sync_ok(&b, &[]);
    assert_eq!(digest(&a), digest(&b));

    // A loss; `--repair` heals it in one session.
    lose_one(
        &b,
        "beta memory number 3: the launch checklist item 3 is done",
    );
    assert_ne!(digest(&a), digest(&b));
    sync_ok(&b, &["--repair"]);
    assert_eq!(digest(&a), digest(&b), "healed by the asked-for repair");
    assert_eq!(
        last_session(&b).1,
        2,
        "the memory's two facts, nothing else"
    );

    // Another loss: an ordinary session does not see it (idle), but its
    // digests disagree, so the next session repairs.
    lose_one(
        &b,
        "beta memory number 7: the launch checklist item 7 is done",
    );
    sync_ok(&b, &[]);
    assert_ne!(digest(&a), digest(&b), "an ordinary sync does not heal it");
    let p = &b.json(&["peers", "list"])["peers"][0];
    assert_eq!(p["digest"]["agree"], false, "{p}");
    sync_ok(&b, &[]);
    assert_eq!(
        digest(&a),
        digest(&b),
        "healed by the repair a disagreement asks for"
    );
    sync_ok(&b, &[]);
    let p = &b.json(&["peers", "list"])["peers"][0];
    assert_eq!(p["digest"]["agree"], true, "{p}");
}
