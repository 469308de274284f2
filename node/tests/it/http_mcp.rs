//! MCP over Streamable HTTP at `amos serve --http`'s `/mcp`: the official
//! MCP Python SDK (PyPI `mcp`, which `.ci/run` installs) as each agent's
//! client, through every tool that can name another agent's private
//! memory; and raw JSON-RPC over HTTP showing that an MCP session opened
//! with one token serves a request with another token only as that
//! token's agent.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Home;
use crate::http::{HttpServe, token};

/// The SDK's version `.ci/run` installs.
const MCP_SDK: &str = "mcp==1.30.0";

/// Whether `python3` can import the MCP SDK; says why not, loudly.
fn sdk_present(test: &str) -> bool {
    let probe = Command::new("python3")
        .args(["-c", "import mcp, httpx"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if probe.is_ok_and(|s| s.success()) {
        return true;
    }
    eprintln!(
        "SKIPPED http_mcp::{test}: python3 with the MCP Python SDK is not installed \
         (pip install {MCP_SDK}; .ci/run does)"
    );
    false
}

fn org() -> Home {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h
}

#[test]
fn the_mcp_python_sdk_over_http_acts_as_each_tokens_agent_only() {
    if !sdk_present("the_mcp_python_sdk_over_http_acts_as_each_tokens_agent_only") {
        return;
    }
    let h = org();
    let (alice, bob) = (token(&h, "alice", &[]), token(&h, "bob", &[]));
    let s = HttpServe::start(&h);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/http_mcp_client.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(format!("{}/mcp", s.base))
        .args([&alice, &bob])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("the client's output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the MCP client failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.starts_with("ok: 19 checks"), "{stdout}\n{stderr}");
}

/// One JSON-RPC message over `/mcp`: the HTTP status, the session id the
/// server gave, and the JSON-RPC answer (from a JSON or an SSE body).
fn rpc(
    s: &HttpServe,
    token: &str,
    session: Option<&str>,
    message: &Value,
) -> (u16, Option<String>, Value) {
    let mut headers = vec![("Accept", "application/json, text/event-stream")];
    if let Some(id) = session {
        headers.push(("Mcp-Session-Id", id));
        headers.push(("MCP-Protocol-Version", "2025-06-18"));
    }
    let a = s.call("POST", "/mcp", Some(token), Some(message), &headers);
    let answer = if a.json.is_null() {
        a.text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or(Value::Null)
    } else {
        a.json.clone()
    };
    let session = a.header("mcp-session-id").map(str::to_owned);
    (a.status, session, answer)
}

#[test]
fn a_session_opened_with_one_token_serves_another_only_as_its_own_agent() {
    let h = org();
    let private = h.add("alice", "alice's private launch codes", &[]);
    let (alice, bob) = (token(&h, "alice", &[]), token(&h, "bob", &[]));
    let s = HttpServe::start(&h);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "amos-test", "version": "0"}}});
    let (status, session, answer) = rpc(&s, &alice, None, &init);
    assert_eq!(status, 200, "{answer}");
    let session = session.expect("a session id");
    assert_eq!(answer["result"]["serverInfo"]["name"], "amos", "{answer}");
    let (status, _, _) = rpc(
        &s,
        &alice,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(status, 202);
    let get = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "memory_get", "arguments": {"id": private}}})
    };
    // alice's session, bob's token: bob's gate.
    let (status, _, as_bob) = rpc(&s, &bob, Some(&session), &get(2));
    assert_eq!(status, 200, "{as_bob}");
    assert_eq!(as_bob["result"]["isError"], true, "{as_bob}");
    assert_eq!(
        as_bob["result"]["content"][0]["text"],
        format!("no such memory: {private}")
    );
    // The same session with alice's token: alice's.
    let (_, _, as_alice) = rpc(&s, &alice, Some(&session), &get(3));
    assert_eq!(as_alice["result"]["isError"], false, "{as_alice}");
    assert_eq!(as_alice["result"]["structuredContent"]["owner"], "alice");
}
