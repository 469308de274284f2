//! One rule for times on the command line (issue 44, item 4), through the
//! real binary: a time flag takes an RFC 3339 time or date, `now`, or a
//! signed offset (`-7d` ago, `+7d` ahead), and refuses a bare duration
//! with one line saying which sign was meant (exit 2, nothing written);
//! `--expires` takes a lifetime, bare or `+`. A superseder may not start
//! before the memory it replaces starts.

use crate::common::Home;

/// `amos ARGS` exits 2 with exactly `line` on stderr, and writes nothing.
fn refused(h: &Home, args: &[&str], line: &str) {
    let before = h.fingerprint();
    let r = h.run(args);
    assert_eq!(r.code, 2, "{args:?}: {r:?}");
    assert_eq!(r.stderr.trim(), format!("amos: {line}"), "{args:?}");
    assert_eq!(h.fingerprint(), before, "{args:?} wrote something");
}

#[test]
fn every_time_flag_refuses_a_bare_duration_and_says_the_sign() {
    let h = Home::apollo();
    let id = h.add("alice", "deploys freeze on fridays", &["team:apollo"]);
    let past = "a time is needed; did you mean -7d (7 days ago)?";
    for args in [
        &["search", "deploys", "--as", "alice", "--valid-at", "7d"][..],
        &["search", "deploys", "--as", "alice", "--known-at", "7d"],
        &["pack", "deploys", "--as", "alice", "--since", "7d"],
        &["list", "--as", "alice", "--until", "7d"],
        &["timeline", "--as", "alice", "--since", "7d"],
        &["audit", "reads", "--since", "7d"],
    ] {
        let flag = args[args.len() - 2];
        refused(&h, args, &format!("{flag} 7d: {past}"));
    }
    refused(
        &h,
        &["add", "x", "--as", "alice", "--valid-from", "7d"],
        &format!("--valid-from 7d: {past}"),
    );
    refused(
        &h,
        &["add", "x", "--as", "alice", "--valid-to", "7d"],
        "--valid-to 7d: a time is needed; did you mean +7d (7 days from now)?",
    );
    refused(
        &h,
        &["supersede", &id, "y", "--as", "alice", "--valid-from", "1h"],
        "--valid-from 1h: a time is needed; did you mean -1h (1 hour ago)?",
    );
    // Signed offsets are times; a lifetime stays a bare duration.
    let hits = h.json(&["search", "deploys", "--as", "alice", "--valid-at", "+1m"]);
    assert_eq!(hits["hits"][0]["id"], id.as_str());
    let hits = h.json(&["search", "deploys", "--as", "alice", "--since", "-1d"]);
    assert_eq!(hits["hits"][0]["id"], id.as_str());
    for lifetime in ["7d", "+7d"] {
        let m = h.json(&["add", "temp", "--as", "alice", "--expires", lifetime]);
        let got = h.json(&["get", m["id"].as_str().unwrap(), "--as", "alice"]);
        assert!(got["expires"].as_str().is_some(), "{got}");
    }
}

/// The refusal of a superseder starting at `t` (midnight UTC) before
/// `old`, which starts on 2026-03-01.
fn starts_before(old: &str, t: &str) -> String {
    let start = "2026-03-01T00:00:00.000Z";
    format!(
        "memory {old}, which this one replaces, starts at {start}: a valid-from of \
         {t}T00:00:00.000Z would end it before it starts; give one at or after {start}"
    )
}

#[test]
fn a_superseder_may_not_start_before_what_it_replaces() {
    let h = Home::apollo();
    let id = |args: &[&str]| h.json(args)["id"].as_str().unwrap().to_owned();
    let from = "--valid-from";
    let old = id(&["add", "port 8080", "--as", "alice", from, "2026-03-01"]);
    let sup = |t| ["supersede", &old, "port 9090", "--as", "alice", from, t];
    refused(&h, &sup("2026-02-01"), &starts_before(&old, "2026-02-01"));
    // From the same start: the old one was never true.
    let new = id(&sup("2026-03-01"));
    // Nor may an update move the superseder's start before it.
    let update = |t| ["update", &new, "--as", "alice", from, t];
    refused(
        &h,
        &update("2026-01-01"),
        &starts_before(&old, "2026-01-01"),
    );
    h.ok(&update("2026-04-01"));
}
