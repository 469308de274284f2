//! What a new user meets in the first hour (issue 44, items 2, 6 and 8),
//! through the real binary: an empty answer says so in one line on stderr
//! (stdout stays empty, `--json` keeps its empty list, `-q` prints
//! nothing), never more than the requester may know; `amos status` counts
//! live, archived and forgotten memories apart; `status`, `check` and
//! `doctor` agree on the index's lag; `amos mcp` answers a line that is not
//! JSON instead of leaving the client waiting; logs carry no colour codes
//! off a terminal; and docs/cli.md's MCP table and `--help` match the binary.

use crate::common::Home;
use serde_json::{Value, json};

/// A home with agents alice and bob (no team: each sees only its own).
fn two_agents() -> Home {
    let h = Home::new();
    h.ok(&["agent", "add", "alice"]);
    h.ok(&["agent", "add", "bob"]);
    h
}

/// Run `amos ARGS`: require exit 0, empty stdout, and return stderr's one line.
fn empty_line(h: &Home, args: &[&str]) -> String {
    let r = h.ok(args);
    assert_eq!(r.stdout, "", "amos {args:?}: stdout must stay empty: {r:?}");
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "amos {args:?}: one line on stderr: {r:?}");
    lines[0].to_owned()
}

#[test]
fn empty_answers_say_so_on_stderr_and_json_keeps_the_empty_list() {
    let h = two_agents();
    h.add("alice", "the deploy runbook lives in the ops wiki", &[]);

    assert_eq!(
        empty_line(&h, &["search", "deploy", "--as", "bob"]),
        "no memories visible to bob match \"deploy\""
    );
    assert_eq!(
        empty_line(&h, &["list", "--as", "bob"]),
        "no memories visible to bob"
    );
    assert_eq!(
        empty_line(&h, &["timeline", "--as", "bob"]),
        "no memories visible to bob start, end or are superseded"
    );
    assert_eq!(empty_line(&h, &["audit"]), "no facts refused from peers");
    assert_eq!(
        empty_line(&h, &["audit", "reads", "--agent", "bob"]),
        "no reads recorded by bob; the read audit is off here (amos config set read-audit on)"
    );

    // --json: the empty list, and nothing on stderr; -q: nothing at all.
    for (args, key) in [
        (&["search", "deploy", "--as", "bob"][..], "hits"),
        (&["list", "--as", "bob"][..], "memories"),
        (&["timeline", "--as", "bob"][..], "events"),
        (&["audit"][..], "refused"),
        (&["audit", "reads"][..], "reads"),
    ] {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let r = h.ok(&a);
        assert_eq!(r.json()[key], json!([]), "{args:?}: {r:?}");
        assert_eq!(r.stderr, "", "{args:?}: {r:?}");
        let mut q = vec!["-q"];
        q.extend_from_slice(args);
        let r = h.ok(&q);
        assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""), "{q:?}");
    }

    // An answer that is not empty prints no such line.
    let r = h.ok(&["search", "deploy", "--as", "alice"]);
    assert!(r.stdout.contains("runbook"), "{r:?}");
    assert!(!r.stderr.contains("no memories"), "{r:?}");
}

#[test]
fn an_unseen_type_reads_like_a_typo_and_leaks_nothing() {
    let h = two_agents();
    h.ok(&[
        "add",
        "restart the queue",
        "--as",
        "alice",
        "--type",
        "procedure",
    ]);
    // alice's private procedure exists, bob cannot see it: the same line
    // as for a type no one uses (types are free slugs, never "unknown").
    assert_eq!(
        empty_line(&h, &["list", "--as", "bob", "--type", "procedure"]),
        "no memories of type procedure visible to bob"
    );
    assert_eq!(
        empty_line(&h, &["list", "--as", "bob", "--type", "procedur"]),
        "no memories of type procedur visible to bob"
    );
    assert_eq!(
        empty_line(&h, &["list", "--as", "alice", "--type", "procedur"]),
        "no memories of type procedur visible to alice"
    );
    let r = h.ok(&["list", "--as", "alice", "--type", "procedure"]);
    assert!(r.stdout.contains("restart the queue"), "{r:?}");
}

#[test]
fn a_time_filter_that_empties_the_answer_is_named() {
    let h = two_agents();
    h.add("bob", "the deploy window is Tuesday", &[]);
    let line = empty_line(
        &h,
        &[
            "search",
            "deploy",
            "--as",
            "bob",
            "--valid-at",
            "2020-01-01",
        ],
    );
    assert_eq!(
        line,
        "no memories visible to bob match \"deploy\" valid at 2020-01-01T00:00:00.000Z \
         (a memory is valid from its creation unless --valid-from says otherwise)"
    );
    let line = empty_line(&h, &["list", "--as", "bob", "--known-at", "2020-01-01"]);
    assert_eq!(
        line,
        "no memories visible to bob on record at 2020-01-01T00:00:00.000Z \
         (a memory is on record from when it was written)"
    );
    let line = empty_line(&h, &["timeline", "--as", "bob", "--until", "2020-01-01"]);
    assert_eq!(
        line,
        "no memories visible to bob start, end or are superseded at or before 2020-01-01T00:00:00.000Z"
    );
}

#[test]
fn status_counts_live_archived_and_forgotten_apart() {
    let h = two_agents();
    h.add("bob", "alpha: the build cache lives on the nas", &[]);
    h.add("bob", "beta: the staging db is postgres 16", &[]);
    h.add("bob", "beta: the staging db is postgres 16", &[]);
    let gone = h.add("bob", "gamma: a note to forget", &[]);
    h.ok(&["forget", &gone, "--as", "bob"]);
    // The exact duplicate is archived into the other.
    h.ok(&["consolidate", "--apply"]);

    let s = h.json(&["status"]);
    assert_eq!(
        (
            &s["memories"],
            &s["memories_live"],
            &s["memories_archived"],
            &s["memories_forgotten"]
        ),
        (&json!(3), &json!(2), &json!(1), &json!(1)),
        "{s}"
    );
    let text = h.ok(&["status"]).stdout;
    assert!(
        text.contains("memories 2 live, 1 archived, 1 forgotten"),
        "{text}"
    );
}

#[test]
fn status_check_and_doctor_agree_on_the_index_lag() {
    let h = two_agents();
    // Org facts move the store's seq but concern no index: no lag.
    for a in ["carol", "dave", "erin"] {
        h.ok(&["agent", "add", a]);
    }
    assert_eq!(h.json(&["status"])["index_lag"], 0);
    let doctor = h.json(&["doctor", "--offline"]);
    let index = doctor["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "index")
        .expect("an index check")
        .clone();
    assert_eq!(index["detail"], "up to date", "{doctor}");

    // Memories written by an import are behind until something catches up.
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/mem0/memories.json");
    h.ok(&[
        "import",
        "mem0",
        file.to_str().expect("utf-8"),
        "--as",
        "bob",
    ]);
    let behind = h.json(&["status"])["index_lag"].as_i64().expect("lag");
    assert_eq!(behind, 3, "three memories imported");
    let check = h.json(&["check"]);
    assert_eq!(
        (&check["index_lag"], &check["index_caught_up"]),
        (&json!(0), &json!(behind)),
        "{check}"
    );
    // What check reported is what the others now say.
    assert_eq!(h.json(&["status"])["index_lag"], 0);
    let doctor = h.ok(&["doctor", "--offline"]).stdout;
    assert!(doctor.contains("index         up to date"), "{doctor}");
}

#[test]
fn mcp_answers_a_line_that_is_not_json_and_keeps_serving() {
    let h = two_agents();
    let mut bob = crate::mcp::Client::start(&h, "bob");
    for garbage in [
        "this is not json",
        "{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\"",
    ] {
        bob.send_line(garbage);
        let r = bob.next_message();
        assert_eq!(r["jsonrpc"], "2.0", "{r}");
        assert_eq!(r["id"], Value::Null, "{r}");
        assert_eq!(r["error"]["code"], -32700, "{r}");
    }
    // The session goes on.
    let list = bob.request("tools/list", json!({}));
    assert!(
        list["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{list}"
    );
    bob.close();
}

#[test]
fn logs_off_a_terminal_carry_no_colour_codes() {
    let h = Home::new();
    // trace: the store and index log at debug and below on any command.
    let o = h
        .cmd()
        .env("AMOS_LOG", "trace")
        .env_remove("NO_COLOR")
        .arg("status")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "some log lines: {stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "colour codes in {stderr}");
}

#[test]
fn cli_md_lists_every_mcp_tool_with_every_argument() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"),
    )
    .expect("docs/cli.md");
    let agents = doc
        .split("\n## Agents\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a section ## Agents");
    let rows: Vec<&str> = agents
        .lines()
        .filter(|l| l.starts_with("| `memory_"))
        .collect();
    for tool in amos_node::front::mcp::tools() {
        let name = format!("`{}`", tool.name);
        let row = rows
            .iter()
            .find(|r| r.split('|').nth(1).is_some_and(|c| c.contains(&name)))
            .unwrap_or_else(|| panic!("docs/cli.md's MCP table has no row for {name}"));
        let args = row.split('|').nth(2).expect("an arguments column");
        let props = tool.input_schema["properties"]
            .as_object()
            .expect("properties");
        for arg in props.keys() {
            let named = args
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w == arg);
            assert!(
                named,
                "{name}: argument {arg} missing from docs/cli.md: {row}"
            );
        }
    }
}

#[test]
fn search_takes_limit_as_k_and_help_says_how_far_known_at_reaches() {
    let h = two_agents();
    for i in 0..3 {
        h.add("bob", &format!("deploy note number {i}"), &[]);
    }
    let hits = |flag: &str| {
        h.json(&[
            "search", "deploy", "--as", "bob", "--mode", "lexical", flag, "2",
        ])["hits"]
            .as_array()
            .expect("hits")
            .len()
    };
    assert_eq!((hits("-k"), hits("--limit")), (2, 2));
    let help = h.ok(&["search", "--help"]).stdout;
    assert!(help.contains("latest compaction"), "{help}");
    assert_eq!(help.matches("AMOS_AGENT").count(), 1, "{help}");
}

/// A reader that goes away (`amos list … | head -1`) ends the command
/// quietly, as Unix tools end: killed by SIGPIPE, no panic and no
/// backtrace on stderr. The pipe's read end is closed before amos starts,
/// so its first write fails whatever the timing.
#[test]
fn a_closed_stdout_ends_a_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let h = two_agents();
    h.add("alice", "the deploy runbook lives in the ops wiki", &[]);
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = h
        .cmd()
        .args(["list", "--as", "alice"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run amos list");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr, "", "nothing on stderr: {out:?}");
    assert_eq!(out.status.signal(), Some(13), "ended by SIGPIPE: {out:?}");
}
