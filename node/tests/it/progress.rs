//! Progress lines on stderr (`node/src/progress.rs`): with stderr piped,
//! `amos sync now`, `amos join`, bundle export/import and `amos index
//! rebuild` print no progress at all — no carriage return, no escape
//! sequence, only what they printed before. With stderr a terminal (run
//! under `script`, which gives the command a pty; skipped loudly where it is
//! missing) the first sync draws its "facts received, applied, sent" line
//! and the index rebuild its bar.

use std::process::{Command, Stdio};

use crate::common::server::{Server, id, pair};
use crate::common::{Home, amos_bin};

/// A serving node with `n` team memories, and a fresh node registered with
/// it (both ways, full policy) that has not synced yet.
fn serving_with(n: usize) -> (Home, Home, Server) {
    let a = Home::apollo();
    for i in 0..n {
        a.add(
            "alice",
            &format!("progress memory {i} about the launch"),
            &["team:apollo"],
        );
    }
    let b = Home::new();
    let server = Server::start(a.path());
    pair(&a, &b, &server, "full");
    (a, b, server)
}

/// N of `amos sync now`'s "PEER  ok: N facts in, …".
fn facts_in(stdout: &str) -> u64 {
    stdout
        .split_once(" ok: ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sync result in {stdout:?}"))
}

/// No progress residue on a piped stderr.
fn assert_clean(what: &str, stderr: &str) {
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "{what}: terminal control characters on a piped stderr: {stderr:?}"
    );
    assert!(
        !stderr.contains("facts received") && !stderr.contains("eta"),
        "{what}: a progress line on a piped stderr: {stderr:?}"
    );
}

#[test]
fn piped_stderr_gets_no_progress() {
    let (a, b, _server) = serving_with(40);
    let r = b.ok(&["sync", "now"]);
    assert!(facts_in(&r.stdout) >= 80, "facts moved: {r:?}");
    assert_clean("sync now", &r.stderr);

    let file = b.path().join("out.bndl");
    let file = file.to_str().expect("utf-8");
    let r = a.ok(&["bundle", "export", file, "--for", &id(&b)]);
    assert_clean("bundle export", &r.stderr);
    let r = b.ok(&["bundle", "import", file]);
    assert_clean("bundle import", &r.stderr);
    let r = b.ok(&["index", "rebuild"]);
    assert!(r.stdout.contains("indexed 40 memories"), "{r:?}");
    assert_clean("index rebuild", &r.stderr);

    // The first sync of a join, piped.
    let c = Home::new();
    let code = a.json(&["team", "invite", "apollo"])["code"]
        .as_str()
        .expect("code")
        .to_owned();
    let r = c.ok(&["join", &code]);
    assert!(r.stdout.contains("first sync ok"), "{r:?}");
    assert_clean("join", &r.stderr);
}

/// `amos ARGS` with `home` under `script` (a pty on stdin, stdout and
/// stderr): the transcript, or `None` when `script` is unavailable.
fn in_a_terminal(home: &Home, args: &[&str]) -> Option<String> {
    let probe = Command::new("script")
        .args(["-q", "-e", "-c", "true", "/dev/null"])
        .stdin(Stdio::null())
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return None;
    }
    let mut line = amos_bin().to_str().expect("utf-8 path").to_owned();
    for a in args {
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:".contains(c)),
            "{a:?} needs quoting"
        );
        line.push(' ');
        line.push_str(a);
    }
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("AMOS_HOME", home.path())
        .env("AMOS_LOG", "warn")
        .env("TERM", "xterm")
        .env("COLUMNS", "120")
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "amos {args:?} in a pty: {text}");
    Some(text)
}

#[test]
fn a_terminal_sees_the_first_sync_and_the_rebuild_progress() {
    let (_a, b, _server) = serving_with(40);
    let Some(sync) = in_a_terminal(&b, &["sync", "now"]) else {
        eprintln!("SKIPPED: `script` (util-linux) is not available to give amos a terminal");
        return;
    };
    assert!(facts_in(&sync) >= 80, "{sync}");
    assert!(
        sync.contains("facts received"),
        "the first sync drew its progress line: {sync:?}"
    );
    assert!(sync.contains('\x1b'), "and cleared it: {sync:?}");
    let rebuild = in_a_terminal(&b, &["index", "rebuild"]).expect("script ran before");
    assert!(rebuild.contains("indexed 40 memories"), "{rebuild}");
    assert!(
        rebuild.contains("index [") && rebuild.contains("memories, eta"),
        "the rebuild drew its bar: {rebuild:?}"
    );
    // `-q` draws nothing even on a terminal.
    let quiet = in_a_terminal(&b, &["-q", "index", "rebuild"]).expect("script ran before");
    assert!(!quiet.contains("index ["), "{quiet:?}");
}

#[test]
fn an_import_draws_its_bar_only_on_a_terminal() {
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/agent-memory-os/home");
    let fixture = fixture.to_str().expect("utf-8");
    let piped = Home::new();
    let r = piped.ok(&["import", "agent-memory-os", fixture]);
    assert!(r.stdout.contains("imported 11 memories"), "{r:?}");
    assert_clean("import", &r.stderr);
    let h = Home::new();
    let Some(t) = in_a_terminal(&h, &["import", "agent-memory-os", fixture]) else {
        eprintln!("SKIPPED: `script` (util-linux) is not available to give amos a terminal");
        return;
    };
    assert!(t.contains("imported 11 memories"), "{t}");
    assert!(t.contains("import ["), "the import drew its bar: {t:?}");
}
