//! Bad input, end to end (docs/design.md §10, docs/cli.md exit codes): every bad input
//! gets exactly one line on stderr naming the problem, nothing on stdout, the
//! contract's non-zero exit code (1 failed, 2 bad usage/input, 3 refused), and
//! no change to the store. A memory the requester cannot see is answered
//! exactly like one that does not exist.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{Home, Run};
use serde_json::Value;

/// A well-formed memory id that no test ever creates.
const UNKNOWN_ID: &str = "01890000-0000-7000-8000-000000000000";
/// The content limit CLI users see (protocol `MAX_TEXT_BYTES`).
const LIMIT: usize = 64 * 1024;

/// One table row: the arguments (with `{…}` placeholders), the expected exit
/// code, and a substring the one-line error must contain.
type Case<'a> = (&'a [&'a str], i32, &'a str);

// ------------------------------------------------------------------ helpers

fn to_run(o: Output) -> Run {
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn run_cmd(mut cmd: Command) -> Run {
    to_run(cmd.output().expect("spawn amos"))
}

/// Run `amos ARGS` in `h` with `input` piped to stdin.
fn run_stdin(h: &Home, args: &[&str], input: &[u8]) -> Run {
    let mut child = h
        .cmd()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn amos");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    // A writer thread: the child may fail before it has read everything.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let o = child.wait_with_output().expect("wait for amos");
    writer.join().expect("stdin writer");
    to_run(o)
}

/// The error contract: exit `code`, empty stdout, exactly one non-empty
/// `amos: …` line on stderr containing `needle`, no panic.
fn assert_error(r: &Run, code: i32, needle: &str, what: &str) {
    assert_eq!(r.code, code, "{what}: exit code: {r:?}");
    assert!(
        r.stdout.is_empty(),
        "{what}: stdout must be empty on error: {r:?}"
    );
    let err = r.stderr.trim();
    assert!(!err.is_empty(), "{what}: no error message: {r:?}");
    assert!(!err.contains('\n'), "{what}: error is not one line: {r:?}");
    assert!(
        err.starts_with("amos: "),
        "{what}: error is not `amos: …`: {r:?}"
    );
    assert!(!err.contains("panicked"), "{what}: panic: {r:?}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "{what}: error does not mention {needle:?}: {r:?}"
    );
}

/// Every file and directory under `dir` with its bytes: to prove a command
/// created, removed or changed nothing.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("dir entry").path();
            let rel = p.strip_prefix(root).expect("under root").to_path_buf();
            if p.is_dir() {
                out.insert(rel, None);
                walk(root, &p, out);
            } else {
                out.insert(rel, Some(std::fs::read(&p).expect("read file")));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Deterministic non-SQLite bytes.
fn garbage(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A home with an org graph and a few memories:
/// agents alice, bob, carol; team apollo = {alice, bob}; team zeus = {};
/// project rocket in apollo = {alice}.
struct Fx {
    h: Home,
    /// alice's, private.
    private: String,
    /// alice's, shared globally (bob sees it but does not own it).
    global: String,
    /// alice's, shared with team apollo (bob sees it, carol does not).
    team: String,
    /// bob's, private.
    bob: String,
}

impl Fx {
    fn new() -> Fx {
        let h = Home::new();
        for a in ["alice", "bob", "carol"] {
            h.ok(&["agent", "add", a]);
        }
        h.ok(&["team", "create", "apollo"]);
        h.ok(&["team", "create", "zeus"]);
        h.ok(&["team", "add", "apollo", "alice"]);
        h.ok(&["team", "add", "apollo", "bob"]);
        h.ok(&["project", "create", "rocket", "--team", "apollo"]);
        h.ok(&["project", "add", "rocket", "alice"]);
        let private = h.add("alice", "alice private launch codes", &[]);
        let global = h.add("alice", "alice global launch window", &["global"]);
        let team = h.add("alice", "alice apollo fuel budget", &["team:apollo"]);
        let bob = h.add("bob", "bob private note about fuel", &[]);
        Fx {
            h,
            private,
            global,
            team,
            bob,
        }
    }

    /// Replace the `{…}` placeholders of a table row.
    fn expand(&self, args: &[&str]) -> Vec<String> {
        args.iter()
            .map(|a| {
                a.replace("{private}", &self.private)
                    .replace("{global}", &self.global)
                    .replace("{team}", &self.team)
                    .replace("{bob}", &self.bob)
                    .replace("{unknown}", UNKNOWN_ID)
            })
            .collect()
    }

    fn run(&self, args: &[&str]) -> Run {
        let args = self.expand(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.h.run(&args)
    }

    /// The memory as its owner sees it (`--json get`).
    fn memory(&self, id: &str) -> Value {
        self.h.json(&["get", id, "--as", "alice"])
    }

    /// Run one row: the error contract holds and the store fingerprint is
    /// unchanged.
    fn check(&self, args: &[&str], code: i32, needle: &str) {
        let before = self.h.fingerprint();
        let r = self.run(args);
        assert_error(&r, code, needle, &format!("amos {args:?}"));
        assert_eq!(
            before,
            self.h.fingerprint(),
            "amos {args:?} changed the store"
        );
    }

    fn check_table(&self, cases: &[Case]) {
        for (args, code, needle) in cases {
            self.check(args, *code, needle);
        }
    }

    fn names(&self, what: &str) -> Vec<String> {
        let v = self.h.json(&[what, "list"]);
        let key = format!("{what}s");
        v[key.as_str()]
            .as_array()
            .unwrap_or_else(|| panic!("{what} list: {v}"))
            .iter()
            .map(|x| x["id"].as_str().expect("id").to_owned())
            .collect()
    }
}

// ------------------------------------------------------------------ tests

#[test]
fn malformed_scopes_and_ids_are_rejected() {
    let fx = Fx::new();
    let long = "a".repeat(65);
    let long_scope = format!("team:{long}");
    #[rustfmt::skip]
    let cases: &[Case] = &[
        // scopes on add
        (&["add", "x", "--as", "alice", "--share", "public"], 2, "malformed scope \"public\""),
        (&["add", "x", "--as", "alice", "--share", "team:"], 2, "malformed team id \"\""),
        (&["add", "x", "--as", "alice", "--share", "team:Apollo"], 2, "malformed team id \"Apollo\""),
        (&["add", "x", "--as", "alice", "--share", "role:x"], 2, "malformed scope \"role:x\""),
        (&["add", "x", "--as", "alice", "--share", "agent"], 2, "malformed scope \"agent\""),
        (&["add", "x", "--as", "alice", "--share", ""], 2, "malformed scope"),
        (&["add", "x", "--as", "alice", "--share", "project:"], 2, "malformed project id"),
        (&["add", "x", "--as", "alice", "--share", "agent:Bob"], 2, "malformed agent id \"Bob\""),
        (&["add", "x", "--as", "alice", "--share", &long_scope], 2, "malformed team id"),
        // one bad scope among good ones still stores nothing
        (&["add", "x", "--as", "alice", "--share", "global", "--share", "team:"], 2, "malformed team id"),
        // scopes on share / unshare
        (&["share", "{global}", "public", "--as", "alice"], 2, "malformed scope \"public\""),
        (&["share", "{global}", "team:", "--as", "alice"], 2, "malformed team id \"\""),
        (&["share", "{global}", "team:Apollo", "--as", "alice"], 2, "malformed team id \"Apollo\""),
        (&["share", "{global}", "role:x", "--as", "alice"], 2, "malformed scope \"role:x\""),
        (&["share", "{global}", "agent", "--as", "alice"], 2, "malformed scope \"agent\""),
        (&["unshare", "{global}", "public", "--as", "alice"], 2, "malformed scope \"public\""),
        // agent ids
        (&["agent", "add", "Dave"], 2, "malformed agent id \"Dave\""),
        (&["agent", "add", "da ve"], 2, "malformed agent id \"da ve\""),
        (&["agent", "add", "--", "-dave"], 2, "malformed agent id \"-dave\""),
        (&["agent", "add", "-dave"], 2, "unexpected argument"),
        (&["agent", "add", &long], 2, "malformed agent id"),
        (&["agent", "add", ""], 2, "malformed agent id \"\""),
        (&["agent", "add", "dave", "--team", "Apollo"], 2, "malformed team id \"Apollo\""),
        (&["add", "x", "--as", "Alice"], 2, "malformed agent id \"Alice\""),
        (&["add", "x", "--as", "al ice"], 2, "malformed agent id \"al ice\""),
        (&["list", "--as", &long], 2, "malformed agent id"),
        (&["team", "add", "apollo", "Carol"], 2, "malformed agent id \"Carol\""),
        // team ids
        (&["team", "create", "Apollo2"], 2, "malformed team id \"Apollo2\""),
        (&["team", "create", "team two"], 2, "malformed team id \"team two\""),
        (&["team", "create", "--", "-zeus"], 2, "malformed team id \"-zeus\""),
        (&["team", "create", &long], 2, "malformed team id"),
        (&["team", "add", "Apollo", "carol"], 2, "malformed team id \"Apollo\""),
        // project ids
        (&["project", "create", "Rocket2", "--team", "apollo"], 2, "malformed project id \"Rocket2\""),
        (&["project", "create", "rocket two", "--team", "apollo"], 2, "malformed project id \"rocket two\""),
        (&["project", "create", "--team", "apollo", "--", "-rocket"],
            2,
            "malformed project id \"-rocket\""),
        (&["project", "create", &long, "--team", "apollo"], 2, "malformed project id"),
        (&["project", "create", "rocket2", "--team", "Apollo"], 2, "malformed team id \"Apollo\""),
        // other slugs on a memory
        (&["add", "x", "--as", "alice", "--type", "Not A Type"], 2, "malformed memory type"),
        (&["add", "x", "--as", "alice", "--tag", ""], 2, "malformed tag"),
        (&["add", "x", "--as", "alice", "--tag", "a,b"], 2, "malformed tag \"a,b\""),
        (&["link", "{global}", "{team}", "--as", "alice", "--relation", "Not Related"], 2, "malformed relation"),
        (&["list", "--as", "alice", "--type", "Bad Type"], 2, "malformed memory type"),
    ];
    fx.check_table(cases);
    assert!(!fx.names("agent").iter().any(|a| a == "dave"));
    assert_eq!(fx.names("team"), ["apollo", "zeus"]);
    assert_eq!(fx.names("project"), ["rocket"]);

    // The boundary: 64 characters is a valid id.
    let max = "a".repeat(64);
    fx.h.ok(&["agent", "add", &max]);
    assert!(fx.names("agent").contains(&max));
}

#[test]
fn unknown_org_references_are_rejected() {
    let fx = Fx::new();
    #[rustfmt::skip]
    let cases: &[Case] = &[
        // unknown requester
        (&["add", "x", "--as", "ghost"], 2, "unknown agent ghost"),
        (&["get", "{global}", "--as", "ghost"], 2, "unknown agent ghost"),
        (&["search", "launch", "--as", "ghost"], 2, "unknown agent ghost"),
        (&["list", "--as", "ghost"], 2, "unknown agent ghost"),
        (&["pack", "launch", "--as", "ghost", "--budget", "100"], 2, "unknown agent ghost"),
        (&["update", "{global}", "y", "--as", "ghost"], 2, "unknown agent ghost"),
        (&["forget", "{global}", "--as", "ghost"], 2, "unknown agent ghost"),
        // unknown share targets
        (&["add", "x", "--as", "alice", "--share", "team:nope"], 2, "unknown team nope"),
        (&["add", "x", "--as", "alice", "--share", "agent:ghost"], 2, "unknown agent ghost"),
        (&["add", "x", "--as", "alice", "--share", "project:nope"], 2, "unknown project nope"),
        (&["add", "x", "--as", "alice", "--share", "global", "--share", "team:nope"], 2, "unknown team nope"),
        (&["share", "{global}", "team:nope", "--as", "alice"], 2, "unknown team nope"),
        (&["share", "{global}", "agent:ghost", "--as", "alice"], 2, "unknown agent ghost"),
        (&["share", "{global}", "project:nope", "--as", "alice"], 2, "unknown project nope"),
        // membership
        (&["agent", "add", "dave", "--team", "nope"], 2, "unknown team nope"),
        (&["team", "add", "apollo", "ghost"], 2, "unknown agent ghost"),
        (&["team", "add", "nope", "alice"], 2, "unknown team nope"),
        (&["team", "remove", "apollo", "carol"], 2, "carol is not a member of team apollo"),
        (&["team", "remove", "apollo", "ghost"], 2, "unknown agent ghost"),
        (&["team", "remove", "nope", "alice"], 2, "unknown team nope"),
        (&["team", "delete", "nope"], 2, "unknown team nope"),
        (&["project", "create", "orbit", "--team", "nope"], 2, "unknown team nope"),
        (&["project", "create", "rocket", "--team", "zeus"], 2, "team apollo"),
        (&["project", "add", "rocket", "carol"], 2, "team apollo"),
        (&["project", "add", "rocket", "ghost"], 2, "unknown agent ghost"),
        (&["project", "add", "nope", "alice"], 2, "unknown project nope"),
        (&["project", "remove", "rocket", "bob"], 2, "bob is not a member of project rocket"),
        (&["project", "remove", "nope", "alice"], 2, "unknown project nope"),
        (&["project", "delete", "nope"], 2, "unknown project nope"),
    ];
    fx.check_table(cases);
    assert!(
        !fx.names("agent")
            .iter()
            .any(|a| a == "dave" || a == "ghost")
    );
    assert_eq!(fx.names("team"), ["apollo", "zeus"]);
    assert_eq!(fx.names("project"), ["rocket"]);
    let rocket = fx.h.json(&["project", "list"]);
    assert_eq!(rocket["projects"][0]["team"], "apollo");
    assert_eq!(
        rocket["projects"][0]["members"],
        serde_json::json!(["alice"])
    );
}

#[test]
fn a_requester_is_required() {
    let fx = Fx::new();
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (&["add", "x"], 2, "no requester"),
        (&["search", "launch"], 2, "no requester"),
        (&["get", "{global}"], 2, "no requester"),
        (&["list"], 2, "no requester"),
        (&["pack", "launch", "--budget", "100"], 2, "no requester"),
        (&["update", "{global}", "y"], 2, "no requester"),
        (&["share", "{global}", "team:apollo"], 2, "no requester"),
        (&["unshare", "{global}", "global"], 2, "no requester"),
        (&["forget", "{global}"], 2, "no requester"),
        (&["link", "{global}", "{team}"], 2, "no requester"),
        (&["feedback", "{global}", "--helpful"], 2, "no requester"),
    ];
    fx.check_table(cases);

    // AMOS_AGENT set but empty is not a requester either.
    let before = fx.h.fingerprint();
    for args in [&["add", "x"][..], &["list"], &["search", "launch"]] {
        let mut c = fx.h.cmd();
        c.env("AMOS_AGENT", "").args(args);
        assert_error(
            &run_cmd(c),
            2,
            "agent",
            &format!("AMOS_AGENT= amos {args:?}"),
        );
    }
    assert_eq!(before, fx.h.fingerprint());

    // Control: AMOS_AGENT does name the requester.
    let mut c = fx.h.cmd();
    c.env("AMOS_AGENT", "alice").args(["--json", "list"]);
    let r = run_cmd(c);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["memories"].as_array().map(Vec::len), Some(3));
}

#[test]
fn content_must_be_non_empty_and_within_the_limit() {
    let fx = Fx::new();
    let h = &fx.h;
    let before = h.fingerprint();
    let original = fx.memory(&fx.private);

    let empty: [(&str, &[u8]); 4] = [
        ("empty stdin", b""),
        ("blank stdin", b"  \n\t \n"),
        ("newline stdin", b"\n"),
        ("spaces only", b"      "),
    ];
    for (what, input) in empty {
        let r = run_stdin(h, &["add", "-", "--as", "alice"], input);
        assert_error(&r, 2, "empty content", what);
    }
    for text in ["", "   ", " \n\t "] {
        let r = h.run(&["add", text, "--as", "alice"]);
        assert_error(&r, 2, "empty content", &format!("add {text:?}"));
        let r = h.run(&["update", &fx.private, text, "--as", "alice"]);
        assert_error(&r, 2, "empty content", &format!("update {text:?}"));
    }

    // One byte over the limit, through stdin.
    let over = "a".repeat(LIMIT + 1);
    let r = run_stdin(h, &["add", "-", "--as", "alice"], over.as_bytes());
    assert_error(&r, 2, "too large", "add 65537 bytes");
    assert!(
        r.stderr.contains(&LIMIT.to_string()),
        "limit not named: {r:?}"
    );
    assert!(
        r.stderr.contains(&(LIMIT + 1).to_string()),
        "size not named: {r:?}"
    );
    // The limit counts bytes, not characters.
    let multibyte = format!("{}é", "a".repeat(LIMIT - 1));
    assert_eq!(multibyte.len(), LIMIT + 1);
    let r = run_stdin(h, &["add", "-", "--as", "alice"], multibyte.as_bytes());
    assert_error(&r, 2, "too large", "add 65535 chars / 65537 bytes");
    // The same limit on update.
    let r = h.run(&["update", &fx.private, &over, "--as", "alice"]);
    assert_error(&r, 2, "too large", "update 65537 bytes");
    // Stdin that is not UTF-8 is bad input, not a failure.
    let r = run_stdin(h, &["add", "-", "--as", "alice"], b"caf\xe9 \xff\xfe");
    assert_error(&r, 2, "UTF-8", "add invalid UTF-8");

    assert_eq!(
        before,
        h.fingerprint(),
        "a refused add/update changed the store"
    );
    assert_eq!(
        original,
        fx.memory(&fx.private),
        "a refused update changed the memory"
    );

    // Exactly at the limit is accepted, byte for byte.
    let exact = "b".repeat(LIMIT);
    let r = run_stdin(
        h,
        &["--json", "add", "-", "--as", "alice"],
        exact.as_bytes(),
    );
    assert_eq!(r.code, 0, "add of exactly {LIMIT} bytes: {r:?}");
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let m = fx.memory(&id);
    assert_eq!(m["content"].as_str().map(str::len), Some(LIMIT));
    assert_eq!(
        h.fingerprint()["memories"],
        before["memories"].as_i64().expect("memories") + 1
    );
}

#[test]
fn bad_numbers_and_options_are_rejected() {
    let fx = Fx::new();
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (&["add", "x", "--as", "alice", "--importance", "-1"], 2, "importance"),
        (&["add", "x", "--as", "alice", "--importance=-1"], 2, "importance"),
        (&["add", "x", "--as", "alice", "--importance", "2"], 2, "importance"),
        (&["add", "x", "--as", "alice", "--importance", "NaN"], 2, "importance"),
        (&["add", "x", "--as", "alice", "--importance", "inf"], 2, "importance"),
        (&["add", "x", "--as", "alice", "--importance", "high"], 2, "importance"),
        (&["add", "x", "--as", "alice", "--expires", "soon"], 2, "--expires \"soon\""),
        (&["add", "x", "--as", "alice", "--expires", "30x"], 2, "--expires"),
        (&["add", "x", "--as", "alice", "--expires", ""], 2, "--expires"),
        (&["add", "x", "--as", "alice", "--expires", "2026-13-45T99:00:00Z"], 2, "--expires"),
        (&["add", "x", "--as", "alice", "--colour", "red"], 2, "--colour"),
        (&["search", "launch", "--as", "alice", "-k", "0"], 2, "-k"),
        (&["search", "launch", "--as", "alice", "-k", "1001"], 2, "-k"),
        (&["search", "launch", "--as", "alice", "-k", "-1"], 2, "-1"),
        (&["search", "launch", "--as", "alice", "-k", "many"], 2, "--limit <K>"),
        (&["search", "", "--as", "alice"], 2, "empty query"),
        (&["search", "   ", "--as", "alice"], 2, "empty query"),
        (&["pack", "launch", "--as", "alice", "--budget", "0"], 2, "--budget"),
        (&["pack", "", "--as", "alice", "--budget", "100"], 2, "empty query"),
        (&["link", "{global}", "{team}", "--as", "alice", "--weight", "2"], 2, "weight"),
        (&["link", "{global}", "{team}", "--as", "alice", "--weight", "-1"], 2, "weight"),
        (&["link", "{global}", "{team}", "--as", "alice", "--weight", "NaN"], 2, "weight"),
        (&["link", "{global}", "{global}", "--as", "alice"], 2, "itself"),
        (&["feedback", "{global}", "--as", "alice", "--helpful", "--unhelpful"], 2, "--unhelpful"),
        (&["feedback", "{global}", "--as", "alice"], 2, "--helpful"),
        (&["unshare", "{global}", "private", "--as", "alice"], 2, "private"),
        (&["frobnicate"], 2, "frobnicate"),
        (&["add"], 2, "<TEXT>"),
    ];
    fx.check_table(cases);
}

#[test]
fn malformed_and_unknown_memory_ids_are_no_such_memory() {
    let fx = Fx::new();
    let originals: Vec<Value> = [&fx.global, &fx.team]
        .iter()
        .map(|id| fx.memory(id))
        .collect();
    for id in [
        "nonsense",
        "{unknown}",
        "",
        "{global}x",
        "01890000-0000-7000-8000",
    ] {
        #[rustfmt::skip]
        let rows: [&[&str]; 10] = [
            &["get", id, "--as", "alice"],
            &["update", id, "new text", "--as", "alice"],
            &["share", id, "global", "--as", "alice"],
            &["unshare", id, "global", "--as", "alice"],
            &["forget", id, "--as", "alice"],
            &["link", id, "{global}", "--as", "alice"],
            &["link", "{global}", id, "--as", "alice"],
            &["feedback", id, "--as", "alice", "--helpful"],
            &["feedback", "{global}", id, "--as", "alice", "--unhelpful"],
            &["restore-memory", id, "--as", "alice"],
        ];
        for row in rows {
            fx.check(row, 2, "no such memory");
        }
    }
    let after: Vec<Value> = [&fx.global, &fx.team]
        .iter()
        .map(|id| fx.memory(id))
        .collect();
    assert_eq!(originals, after);
}

/// Existence is not leaked: for every command, a memory the requester cannot
/// see gets byte-for-byte the answer an unknown id gets (modulo the id).
#[test]
fn an_invisible_memory_is_answered_like_a_missing_one() {
    let fx = Fx::new();
    // (requester, a memory it cannot see, a memory it can see)
    let hidden = [
        ("bob", fx.private.clone(), fx.bob.clone()),
        ("carol", fx.team.clone(), fx.global.clone()),
    ];
    #[rustfmt::skip]
    let templates: &[&[&str]] = &[
        &["get", "{ID}"],
        &["update", "{ID}", "overwritten"],
        &["update", "{ID}", ""],
        &["share", "{ID}", "global"],
        &["share", "{ID}", "team:nope"],
        &["unshare", "{ID}", "global"],
        &["forget", "{ID}"],
        &["link", "{ID}", "{SEEN}"],
        &["link", "{SEEN}", "{ID}"],
        &["link", "{ID}", "{ID}"],
        &["feedback", "{ID}", "--helpful"],
        &["feedback", "{SEEN}", "{ID}", "--unhelpful"],
        &["restore-memory", "{ID}"],
    ];
    let before = fx.h.fingerprint();
    let originals = [fx.memory(&fx.private), fx.memory(&fx.team)];
    for (who, hidden_id, seen) in &hidden {
        for t in templates {
            let with = |id: &str| -> Vec<String> {
                let mut a: Vec<String> = t
                    .iter()
                    .map(|s| s.replace("{ID}", id).replace("{SEEN}", seen))
                    .collect();
                a.extend(["--as".to_owned(), (*who).to_owned()]);
                a
            };
            let hid = with(hidden_id);
            let unk = with(UNKNOWN_ID);
            let rh =
                fx.h.run(&hid.iter().map(String::as_str).collect::<Vec<_>>());
            let ru =
                fx.h.run(&unk.iter().map(String::as_str).collect::<Vec<_>>());
            let what = format!("amos {t:?} as {who}");
            assert_eq!(
                rh.code, ru.code,
                "{what}: exit codes differ: {rh:?} vs {ru:?}"
            );
            assert_eq!(rh.code, 2, "{what}: {rh:?}");
            let needle = if t.contains(&"") {
                "empty content"
            } else {
                "no such memory"
            };
            assert_error(&rh, 2, needle, &format!("{what} (hidden)"));
            assert_error(&ru, 2, needle, &format!("{what} (unknown)"));
            assert_eq!(
                rh.stderr.replace(hidden_id.as_str(), "<ID>"),
                ru.stderr.replace(UNKNOWN_ID, "<ID>"),
                "{what}: the answer leaks existence"
            );
            assert_eq!(rh.stdout, ru.stdout, "{what}");
        }
    }
    assert_eq!(before, fx.h.fingerprint(), "a hidden memory was changed");
    assert_eq!(originals, [fx.memory(&fx.private), fx.memory(&fx.team)]);
}

#[test]
fn only_the_owner_may_change_a_visible_memory() {
    const OWNER_ONLY: &str = "refused: only the owner (alice) may";
    let fx = Fx::new();
    // bob sees alice's global and team memories (team apollo) but owns neither.
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (&["update", "{global}", "bob was here", "--as", "bob"], 3, OWNER_ONLY),
        (&["share", "{global}", "team:apollo", "--as", "bob"], 3, OWNER_ONLY),
        (&["unshare", "{global}", "global", "--as", "bob"], 3, OWNER_ONLY),
        (&["forget", "{global}", "--as", "bob"], 3, OWNER_ONLY),
        (&["update", "{team}", "bob was here", "--as", "bob"], 3, OWNER_ONLY),
        (&["share", "{team}", "global", "--as", "bob"], 3, OWNER_ONLY),
        (&["unshare", "{team}", "team:apollo", "--as", "bob"], 3, OWNER_ONLY),
        (&["forget", "{team}", "--as", "bob"], 3, OWNER_ONLY),
        // carol sees the global one through `global`
        (&["forget", "{global}", "--as", "carol"], 3, OWNER_ONLY),
    ];
    let originals = [fx.memory(&fx.global), fx.memory(&fx.team)];
    fx.check_table(cases);
    assert_eq!(originals, [fx.memory(&fx.global), fx.memory(&fx.team)]);
    // bob still sees them, unchanged.
    let got = fx.h.json(&["get", &fx.team, "--as", "bob"]);
    assert_eq!(got["content"], "alice apollo fuel budget");
}

/// Every command but `init` and `demo`, with `{dir}` for a path inside the home.
#[rustfmt::skip]
const HOME_COMMANDS: &[&[&str]] = &[
    &["id"], &["status"], &["doctor"], &["check"], &["index", "rebuild"],
    &["backup", "{dir}/backup.db"], &["restore", "{dir}/backup.db"],
    &["restore", "{dir}/backup.db", "--force"],
    &["agent", "add", "alice"], &["agent", "list"],
    &["team", "create", "apollo"], &["team", "list"], &["team", "delete", "apollo"],
    &["team", "add", "apollo", "alice"], &["team", "remove", "apollo", "alice"],
    &["project", "create", "rocket", "--team", "apollo"], &["project", "list"],
    &["project", "delete", "rocket"], &["project", "add", "rocket", "alice"],
    &["project", "remove", "rocket", "alice"],
    &["add", "x", "--as", "alice"], &["add", "x", "--as", "alice", "--share", "global"],
    &["get", UNKNOWN_ID, "--as", "alice"], &["search", "x", "--as", "alice"],
    &["pack", "x", "--as", "alice", "--budget", "100"],
    &["update", UNKNOWN_ID, "x", "--as", "alice"],
    &["share", UNKNOWN_ID, "global", "--as", "alice"],
    &["unshare", UNKNOWN_ID, "global", "--as", "alice"],
    &["forget", UNKNOWN_ID, "--as", "alice"],
    &["link", UNKNOWN_ID, "01890000-0000-7000-8000-000000000001", "--as", "alice"],
    &["feedback", UNKNOWN_ID, "--as", "alice", "--helpful"],
    &["consolidate"], &["consolidate", "--apply"],
    &["retention"], &["retention", "--apply"],
    &["restore-memory", UNKNOWN_ID, "--as", "alice"],
    &["list", "--as", "alice"],
];

fn args_in(dir: &Path, args: &[&str]) -> Vec<String> {
    let d = dir.display().to_string();
    args.iter().map(|a| a.replace("{dir}", &d)).collect()
}

#[test]
fn a_directory_that_is_not_a_home_is_refused_and_left_alone() {
    let empty = Home::uninit();
    let cluttered = Home::uninit();
    let root = cluttered.path();
    std::fs::write(root.join("notes.txt"), "not an amos home\n").expect("write");
    std::fs::write(root.join("data.bin"), garbage(3000)).expect("write");
    std::fs::write(root.join("amos.db"), "a stray file with a familiar name").expect("write");
    std::fs::create_dir_all(root.join("nested/deeper")).expect("mkdir");
    std::fs::write(root.join("nested/deeper/file.json"), "{\"a\": 1}").expect("write");
    std::fs::create_dir(root.join("index")).expect("mkdir");

    for h in [&empty, &cluttered] {
        let before = snapshot(h.path());
        for args in HOME_COMMANDS {
            let args = args_in(h.path(), args);
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = h.run(&a);
            assert_error(
                &r,
                2,
                "not an amos home",
                &format!("amos {a:?} in {:?}", h.path()),
            );
            assert!(
                r.stderr.contains(&h.path().display().to_string()),
                "the directory is not named: {r:?}"
            );
            assert_eq!(
                before,
                snapshot(h.path()),
                "amos {a:?} touched {:?}",
                h.path()
            );
        }
    }

    // A home that does not exist is not created, and a file is not a home.
    let parent = Home::uninit();
    let missing = parent.path().join("no-such-home");
    let file = parent.path().join("a-file");
    std::fs::write(&file, "plain file").expect("write");
    for home in [&missing, &file] {
        for args in HOME_COMMANDS {
            let args = args_in(parent.path(), args);
            let mut c = parent.cmd();
            c.arg("--home").arg(home).args(&args);
            assert_error(
                &run_cmd(c),
                2,
                "not an amos home",
                &format!("amos {args:?} --home {home:?}"),
            );
        }
    }
    assert!(!missing.exists(), "a missing home was created");
    assert_eq!(std::fs::read(&file).expect("read"), b"plain file");
    assert_eq!(
        snapshot(parent.path()).keys().collect::<Vec<_>>(),
        [Path::new("a-file")],
        "a command created something next to the home"
    );
}

#[test]
fn a_corrupt_database_fails_cleanly_and_is_left_alone() {
    for (what, junk) in [
        ("random bytes", garbage(8192)),
        ("short text", b"this is not a database\n".to_vec()),
    ] {
        let fx = Fx::new();
        let home = fx.h.path();
        let db = home.join("amos.db");
        std::fs::write(&db, &junk).expect("overwrite amos.db");
        for side in ["amos.db-wal", "amos.db-shm"] {
            let _ = std::fs::remove_file(home.join(side));
        }
        let before = snapshot(home);
        let mut commands: Vec<&[&str]> = HOME_COMMANDS.to_vec();
        commands.push(&["init"]);
        for args in commands {
            let args = args_in(home, args);
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = fx.h.run(&a);
            assert_error(&r, 1, "database", &format!("{what}: amos {a:?}"));
            assert!(r.stderr.contains("amos.db"), "the file is not named: {r:?}");
            assert_eq!(
                std::fs::read(&db).expect("read amos.db"),
                junk,
                "{what}: amos {a:?} wrote to the db"
            );
            assert_eq!(
                before,
                snapshot(home),
                "{what}: amos {a:?} changed the home"
            );
        }
    }
}

#[test]
fn init_twice_is_idempotent() {
    let fx = Fx::new();
    let first = fx.h.json(&["id"]);
    let before = fx.h.fingerprint();
    let private = fx.memory(&fx.private);
    for args in [&["init"][..], &["init", "--name", "other"]] {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let r = fx.h.ok(&a).json();
        assert_eq!(
            r["node_id"], first["node_id"],
            "amos {args:?} changed the node id"
        );
        assert_eq!(
            r["home"].as_str(),
            Some(fx.h.path().display().to_string().as_str())
        );
    }
    let text = fx.h.ok(&["init"]);
    assert!(text.stdout.contains("already"), "{text:?}");
    assert!(text.stderr.is_empty(), "{text:?}");
    assert_eq!(fx.h.json(&["id"]), first);
    assert_eq!(
        before,
        fx.h.fingerprint(),
        "a second init changed the store"
    );
    assert_eq!(private, fx.memory(&fx.private));
}

/// `amos pack` without `--budget` packs the default 1,200 tokens (the MCP
/// tool's default too).
#[test]
fn pack_without_a_budget_uses_the_default() {
    let h = Home::apollo();
    h.add(
        "alice",
        "launch checklist for the moon mission",
        &["team:apollo"],
    );
    let v = h.json(&["pack", "launch", "--as", "alice"]);
    assert_eq!(v["budget"], 1200, "{v}");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(1), "{v}");
}
