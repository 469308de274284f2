//! `amos mcp` as a real MCP client sees it: a child process spoken to in
//! JSON-RPC over its stdio — initialize, `notifications/initialized`,
//! `tools/list`, `tools/call` for every tool, the gate across two agents
//! (each its own server process), bad arguments that change nothing, writes
//! visible to `amos search` in another process at once, and a clean exit
//! when stdin closes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::Home;
use serde_json::{Value, json};

pub(crate) const TOOLS: [&str; 15] = [
    "memory_add",
    "memory_search",
    "memory_get",
    "memory_context_pack",
    "memory_update",
    "memory_timeline",
    "memory_share",
    "memory_unshare",
    "memory_forget",
    "memory_link",
    "memory_feedback",
    "memory_offload_context",
    "memory_reload_context",
    "memory_changes_since",
    "memory_consolidate",
];

/// The tools whose every argument is optional.
const NO_REQUIRED: [&str; 3] = [
    "memory_timeline",
    "memory_reload_context",
    "memory_consolidate",
];

/// One `amos mcp` child and its JSON-RPC conversation.
pub(crate) struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl Client {
    pub(crate) fn start(home: &Home, agent: &str) -> Client {
        let mut child = home
            .cmd()
            .env("AMOS_AGENT", agent)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn amos mcp");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut c = Client {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        let init = c.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "amos-test", "version": "0"}
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "amos", "{init}");
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        assert!(init["result"]["protocolVersion"].is_string(), "{init}");
        c.notify("notifications/initialized");
        c
    }

    fn send(&mut self, msg: &Value) {
        self.send_line(&msg.to_string());
    }

    /// Write one line to the server's stdin, whatever it holds.
    pub(crate) fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to amos mcp");
        stdin.flush().expect("flush");
    }

    /// The next message the server writes (bounded wait).
    pub(crate) fn next_message(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("no message from amos mcp ({e})"));
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"))
    }

    fn notify(&mut self, method: &str) {
        self.send(&json!({"jsonrpc": "2.0", "method": method}));
    }

    /// Send a request and wait (bounded) for the response with its id.
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let v = self.next_message();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// `tools/call`; returns the result object (panics on a protocol error).
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert!(r.get("error").is_none(), "{tool}: protocol error {r}");
        r["result"].clone()
    }

    /// A call that must succeed; returns its structured content.
    pub(crate) fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        assert_eq!(r["isError"], false, "{tool} {args}: {r}");
        assert!(
            r["content"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{tool}: no readable text: {r}"
        );
        r["structuredContent"].clone()
    }

    /// A call that must be a tool error; returns its message.
    pub(crate) fn err(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args.clone());
        assert_eq!(r["isError"], true, "{tool} {args} should fail: {r}");
        r["content"][0]["text"].as_str().expect("text").to_owned()
    }

    /// Close stdin; the server must exit by itself, successfully.
    pub(crate) fn close(mut self) {
        drop(self.stdin.take());
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                assert!(status.success(), "amos mcp exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("amos mcp did not exit after stdin closed");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn team_home() -> Home {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "eve"]);
    h
}

#[test]
fn a_client_session_lists_and_calls_every_tool() {
    let h = team_home();
    let mut alice = Client::start(&h, "alice");

    let list = alice.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().expect("tools").clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, TOOLS);
    for t in &tools {
        assert!(
            t["description"].as_str().is_some_and(|d| d.len() > 20),
            "{t}"
        );
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        // Every tool but those whose arguments are all optional needs one.
        assert!(
            NO_REQUIRED.contains(&t["name"].as_str().unwrap_or_default())
                || t["inputSchema"]["required"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty()),
            "{t}"
        );
    }
    eprintln!(
        "tools/list answer: {} bytes of JSON",
        list["result"].to_string().len()
    );

    let a = alice.ok(
        "memory_add",
        json!({"content": "the staging database restarts at 02:00 UTC", "type": "fact",
               "share": ["team:apollo"], "tags": ["ops"], "importance": 0.8}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let b = alice.ok(
        "memory_add",
        json!({"content": "restart the staging queue after the database restarts", "type": "procedure",
               "pin": true, "expires": "30d"}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // A write through MCP is visible to `amos search` in another process at once.
    assert_eq!(h.search_ids("bob", "staging database", 5), vec![a.clone()]);

    let hits = alice.ok(
        "memory_search",
        json!({"query": "staging restarts", "k": 5}),
    )["hits"]
        .as_array()
        .expect("hits")
        .clone();
    let ids: Vec<&str> = hits.iter().filter_map(|h| h["id"].as_str()).collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{hits:?}"
    );
    assert!(hits.iter().all(|h| h["score"].is_number()));

    let got = alice.ok("memory_get", json!({"id": a}));
    assert_eq!(got["type"], "fact");
    assert_eq!(got["visibility"], json!(["team:apollo"]));
    assert_eq!(got["tags"], json!(["ops"]));

    let pack = alice.ok(
        "memory_context_pack",
        json!({"query": "staging restarts", "budget": 400, "report": true}),
    );
    assert!(
        pack["items"].as_array().is_some_and(|i| !i.is_empty()),
        "{pack}"
    );
    assert!(pack["tokens"].as_u64().is_some_and(|t| t <= 400), "{pack}");
    assert!(pack["report"].is_array(), "{pack}");

    alice.ok(
        "memory_update",
        json!({"id": a, "content": "the staging database restarts at 03:00 UTC"}),
    );
    assert!(
        h.json(&["get", &a, "--as", "bob"])["content"]
            .as_str()
            .is_some_and(|c| c.contains("03:00"))
    );

    let shared = alice.ok("memory_share", json!({"id": b, "scope": "team:apollo"}));
    assert_eq!(shared["visibility"], json!(["team:apollo"]));
    assert_eq!(h.run(&["get", &b, "--as", "bob"]).code, 0);
    alice.ok("memory_unshare", json!({"id": b, "scope": "team:apollo"}));
    assert_eq!(h.run(&["get", &b, "--as", "bob"]).code, 2);

    alice.ok(
        "memory_link",
        json!({"a": a, "b": b, "relation": "related"}),
    );
    let fb = alice.ok("memory_feedback", json!({"ids": [a, b], "helpful": true}));
    assert_eq!(fb["updated"], 2);

    alice.ok("memory_forget", json!({"id": b}));
    assert!(
        alice
            .err("memory_get", json!({"id": b}))
            .contains("no such memory")
    );

    // Valid time and supersession, as the CLI has them.
    let old = alice.ok(
        "memory_add",
        json!({"content": "the deploy port is 8080", "share": ["team:apollo"],
               "valid_from": "2026-01-01"}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let new = alice.ok(
        "memory_add",
        json!({"content": "the deploy port is 9090", "share": ["team:apollo"],
               "valid_from": "2026-06-01", "supersedes": old}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let ids = |v: Value| -> Vec<String> {
        v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .filter_map(|h| h["id"].as_str().map(str::to_owned))
            .collect()
    };
    let march = alice.ok(
        "memory_search",
        json!({"query": "deploy port", "valid_at": "2026-03-01"}),
    );
    assert_eq!(ids(march), vec![old.clone()]);
    let july = alice.ok(
        "memory_search",
        json!({"query": "deploy port", "valid_at": "2026-07-01"}),
    );
    assert_eq!(ids(july), vec![new.clone()]);
    let tl = alice.ok(
        "memory_timeline",
        json!({"since": "2025-12-01", "limit": 10}),
    );
    let events: Vec<(String, String)> = tl["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or_default().to_owned(),
                e["memory"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        &events[..3],
        &[
            ("starts".to_owned(), old.clone()),
            ("starts".to_owned(), new.clone()),
            ("superseded".to_owned(), old.clone()),
        ],
        "{tl}"
    );
    // The same answer as the CLI's.
    let cli = h.json(&[
        "timeline",
        "--as",
        "alice",
        "--since",
        "2025-12-01",
        "--limit",
        "10",
    ]);
    assert_eq!(cli["events"], tl["events"]);
    assert!(
        alice
            .err("memory_timeline", json!({"since": "someday"}))
            .contains("since")
    );
    alice.ok(
        "memory_update",
        json!({"id": new, "valid_to": "2026-09-01"}),
    );
    let sept = alice.ok(
        "memory_search",
        json!({"query": "deploy port", "valid_at": "2026-10-01"}),
    );
    assert!(ids(sept).is_empty());

    alice.close();
}

#[test]
fn the_gate_holds_through_every_tool_and_invisible_is_missing() {
    let h = team_home();
    let mut alice = Client::start(&h, "alice");
    let private = alice.ok(
        "memory_add",
        json!({"content": "alice's private note about the quarterly numbers"}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let team = alice.ok(
        "memory_add",
        json!({"content": "the quarterly review is on thursday", "share": ["team:apollo"]}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();

    // bob (team member) finds the team memory, never the private one.
    let mut bob = Client::start(&h, "bob");
    let hits = bob.ok("memory_search", json!({"query": "quarterly"}))["hits"].clone();
    let ids: Vec<&str> = hits
        .as_array()
        .expect("hits")
        .iter()
        .filter_map(|h| h["id"].as_str())
        .collect();
    assert_eq!(ids, vec![team.as_str()]);
    bob.ok("memory_get", json!({"id": team}));
    let missing = bob.err(
        "memory_get",
        json!({"id": "01a00000-0000-7000-8000-000000000000"}),
    );
    let invisible = bob.err("memory_get", json!({"id": private}));
    assert_eq!(
        invisible.replace(&private, "ID"),
        missing.replace("01a00000-0000-7000-8000-000000000000", "ID"),
        "an invisible memory must read exactly like a missing one"
    );
    // bob cannot edit, share, forget, link or rate alice's private memory:
    // each answer is "no such memory", and nothing changes.
    let before = h.fingerprint();
    for (tool, args) in [
        (
            "memory_update",
            json!({"id": private, "content": "defaced"}),
        ),
        ("memory_share", json!({"id": private, "scope": "global"})),
        ("memory_forget", json!({"id": private})),
        ("memory_link", json!({"a": team, "b": private})),
        (
            "memory_feedback",
            json!({"ids": [private], "helpful": true}),
        ),
    ] {
        let e = bob.err(tool, args);
        assert!(e.contains("no such memory"), "{tool}: {e}");
    }
    let pack = bob.ok(
        "memory_context_pack",
        json!({"query": "quarterly", "report": true}),
    );
    assert!(!pack.to_string().contains(&private), "{pack}");
    // Not the owner of a visible memory: refused, not hidden.
    let e = bob.err("memory_forget", json!({"id": team}));
    assert!(!e.contains("no such memory"), "{e}");
    assert_eq!(h.fingerprint(), before);

    // eve (no team) sees neither.
    let mut eve = Client::start(&h, "eve");
    let hits = eve.ok("memory_search", json!({"query": "quarterly"}))["hits"].clone();
    assert_eq!(hits, json!([]));
    eve.err("memory_get", json!({"id": team}));
    for c in [alice, bob, eve] {
        c.close();
    }
}

#[test]
fn bad_arguments_are_tool_errors_that_change_nothing() {
    let h = team_home();
    let mut alice = Client::start(&h, "alice");
    let id = alice.ok("memory_add", json!({"content": "a memory to poke at"}))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let before = h.fingerprint();
    for (tool, args, why) in [
        ("memory_add", json!({}), "content"),
        (
            "memory_add",
            json!({"content": "x", "share": ["galaxy"]}),
            "scope",
        ),
        (
            "memory_add",
            json!({"content": "x", "share": ["team:nope"]}),
            "nope",
        ),
        (
            "memory_add",
            json!({"content": "x", "expires": "someday"}),
            "expiry",
        ),
        (
            "memory_add",
            json!({"content": "x", "colour": "red"}),
            "colour",
        ),
        ("memory_add", json!({"content": 42}), "content"),
        ("memory_add", json!({"content": ""}), ""),
        ("memory_search", json!({"query": ""}), "query"),
        ("memory_search", json!({"query": "x", "k": 0}), "-k"),
        ("memory_get", json!({"id": "not-an-id"}), "no such memory"),
        ("memory_update", json!({"id": id}), "content"),
        (
            "memory_share",
            json!({"id": id, "scope": "bogus:scope"}),
            "scope",
        ),
        (
            "memory_context_pack",
            json!({"query": "x", "budget": 0}),
            "budget",
        ),
        (
            "memory_feedback",
            json!({"ids": [], "helpful": true}),
            "memory",
        ),
        ("memory_link", json!({"a": id}), "b"),
    ] {
        let e = alice.err(tool, args.clone());
        assert!(
            e.contains(why),
            "{tool} {args}: {e:?} should mention {why:?}"
        );
        assert!(!e.contains('\n'), "{tool}: one line: {e:?}");
    }
    // An unknown tool is a protocol error, and the server carries on.
    let r = alice.request(
        "tools/call",
        json!({"name": "memory_nope", "arguments": {}}),
    );
    assert!(r["error"]["code"].is_number(), "{r}");
    assert_eq!(h.fingerprint(), before, "nothing changed");
    alice.ok("memory_get", json!({"id": id}));
    alice.close();
}

#[test]
fn without_an_agent_the_server_refuses_to_start() {
    let h = team_home();
    let r = h.run(&["mcp"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("AMOS_AGENT"), "{r:?}");
    assert!(
        r.stdout.is_empty(),
        "stdout is for the protocol only: {r:?}"
    );
    let r = h
        .cmd()
        .env("AMOS_AGENT", "nobody")
        .arg("mcp")
        .output()
        .expect("run");
    assert_ne!(r.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&r.stderr).contains("nobody"));
}

#[test]
fn agents_toml_declares_the_fleet_and_leaves_manual_agents_alone() {
    let h = team_home();
    h.ok(&["project", "create", "ui", "--team", "apollo"]);
    // eve was added by hand and is not in the file: untouched throughout.
    h.ok(&["team", "create", "ops"]);
    h.ok(&["team", "add", "ops", "eve"]);
    std::fs::write(
        h.path().join("agents.toml"),
        r#"
[agents.claude]
kind = "claude-code"
teams = ["apollo"]
projects = ["ui"]

[agents.bob]
kind = "codex"
teams = ["ops"]
"#,
    )
    .expect("write agents.toml");
    // Applied at the start of `amos mcp`, for an agent the file declares.
    let mut claude = Client::start(&h, "claude");
    let id = claude.ok(
        "memory_add",
        json!({"content": "the ui project ships on mondays", "share": ["project:ui"]}),
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    claude.close();
    let agents = h.json(&["agent", "list"])["agents"].clone();
    let agent = |id: &str| {
        agents
            .as_array()
            .expect("agents")
            .iter()
            .find(|a| a["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no agent {id}: {agents}"))
    };
    assert_eq!(agent("claude")["kind"], "claude-code");
    assert_eq!(agent("claude")["teams"], json!(["apollo"]));
    assert_eq!(agent("claude")["projects"], json!(["ui"]));
    // The file is authoritative for bob: moved from apollo to ops.
    assert_eq!(agent("bob")["kind"], "codex");
    assert_eq!(agent("bob")["teams"], json!(["ops"]));
    assert_eq!(agent("eve")["teams"], json!(["ops"]));
    assert_eq!(agent("alice")["teams"], json!(["apollo"]));
    assert_eq!(h.run(&["get", &id, "--as", "claude"]).code, 0);

    // Applying an unchanged file writes nothing.
    let before = h.fingerprint();
    let r = h.json(&["agent", "apply"]);
    assert_eq!(r["changes"], json!([]), "{r}");
    assert_eq!(h.fingerprint(), before);

    // A bad file is refused with a clear message and changes nothing.
    std::fs::write(
        h.path().join("agents.toml"),
        "[agents.claude]\nteams = [\"nope\"]\n",
    )
    .expect("write");
    let r = h.run(&["agent", "apply"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("unknown team nope"), "{r:?}");
    assert_eq!(h.fingerprint(), before);
}

#[test]
fn mcp_reads_are_audited_as_mcp() {
    let h = team_home();
    let a = h.add("alice", "walrus meeting notes", &["team:apollo"]);
    h.ok(&["config", "set", "read-audit", "on"]);
    let mut bob = Client::start(&h, "bob");
    bob.ok("memory_get", json!({"id": a}));
    bob.ok("memory_search", json!({"query": "walrus"}));
    bob.close();
    let rows = h.json(&["audit", "reads", "--agent", "bob"])["reads"].clone();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r["front"] == "mcp" && r["memory"] == a.as_str()),
        "{rows:?}"
    );
}
