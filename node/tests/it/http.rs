//! `amos serve --http` over real HTTP (a real `amos serve` process on
//! 127.0.0.1, a plain HTTP client): agent tokens from the CLI are their
//! agent and fail once revoked or expired; every route but the OpenAPI
//! document needs one; one agent's token never reads, counts or ranks
//! another's private memory through any route; cross-site requests and
//! oversized bodies are refused with nothing stored; and the routes do
//! what the CLI's commands do.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Home;

/// A running `amos serve --http 127.0.0.1:0`, stopped with SIGTERM on drop.
pub struct HttpServe {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub port: u16,
    _stdout: BufReader<ChildStdout>,
}

impl HttpServe {
    /// `amos --json serve --no-mdns --no-push --http 127.0.0.1:0` on `home`,
    /// ready once its start line names the HTTP address.
    pub fn start(home: &Home) -> HttpServe {
        let mut child = home
            .cmd()
            .args(["--json", "serve", "--listen", "127.0.0.1:0", "--no-mdns"])
            .args(["--no-push", "--http", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn amos serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("serve's start line");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("serve's start line {line:?}: {e}"));
        let base = v["serving"]["http"]
            .as_str()
            .unwrap_or_else(|| panic!("no HTTP address in {v}"))
            .to_owned();
        let port = base.rsplit(':').next().unwrap().parse().expect("port");
        HttpServe {
            child: Some(child),
            base,
            port,
            _stdout: stdout,
        }
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into()
    }

    /// `METHOD path` with `token` (if any), these headers and this JSON body.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = match body {
            Some(b) => {
                let req = req
                    .header("Content-Type", "application/json")
                    .body(b.to_string())
                    .unwrap();
                Self::agent().run(req)
            }
            None => Self::agent().run(req.body(()).unwrap()),
        };
        let mut r = r.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let headers = r
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let text = r.body_mut().read_to_string().expect("body");
        Answer {
            status: r.status().as_u16(),
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
            headers,
        }
    }

    pub fn get(&self, path: &str, token: &str) -> Answer {
        self.call("GET", path, Some(token), None, &[])
    }

    pub fn post(&self, path: &str, token: &str, body: Value) -> Answer {
        self.call("POST", path, Some(token), Some(&body), &[])
    }

    /// One raw HTTP/1.1 request (head as given, then `body`, whose write may
    /// fail once the server answered): the status and the answer's body.
    pub fn raw(&self, head: &str, body: &[u8]) -> (u16, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let _ = s.write_all(body);
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}"));
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }
}

impl Drop for HttpServe {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().expect("try_wait").is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub text: String,
    pub json: Value,
    pub headers: Vec<(String, String)>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Require a problem answer of `status` and `code`.
    #[track_caller]
    pub fn problem(&self, status: u16, code: &str) -> &Self {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        assert_eq!(self.json["status"], status, "{self:?}");
        assert_eq!(self.json["code"], code, "{self:?}");
        assert!(
            self.json["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{self:?}"
        );
        self
    }
}

/// A new token for `agent` (`amos agent token create AGENT --json`).
pub fn token(h: &Home, agent: &str, extra: &[&str]) -> String {
    let mut args = vec!["agent", "token", "create", agent];
    args.extend_from_slice(extra);
    h.json(&args)["token"].as_str().expect("a token").to_owned()
}

/// alice and bob in team apollo, carol outside it.
fn org() -> Home {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "carol"]);
    h
}

#[test]
fn a_token_from_the_cli_is_its_agent_until_revoked_or_expired() {
    let h = org();
    let created = h.json(&["agent", "token", "create", "alice", "--name", "laptop"]);
    let alice = created["token"].as_str().unwrap().to_owned();
    assert_eq!(created["agent"], "alice");
    assert_eq!(created["name"], "laptop");
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(alice.starts_with(&format!("amos_{id}_")), "{alice}");
    let secret = alice.rsplit('_').next().unwrap();
    // Shown once: the list and the database never hold the secret.
    let listed = h.ok(&["--json", "agent", "token", "list"]).stdout;
    assert!(listed.contains(&id) && !listed.contains(secret), "{listed}");
    for f in std::fs::read_dir(h.path()).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap_or_default();
        assert!(!crate::common::contains(&bytes, secret.as_bytes()));
    }
    // Plain text: the token alone on stdout.
    let plain = h.ok(&["agent", "token", "create", "bob"]);
    assert!(plain.stdout.trim().starts_with("amos_"), "{plain:?}");
    assert_eq!(plain.stdout.trim().lines().count(), 1, "{plain:?}");
    let bob = plain.stdout.trim().to_owned();
    // Bad input: one line, exit 2, nothing made.
    let before = h.ok(&["--json", "agent", "token", "list"]).stdout;
    for bad in [
        &["agent", "token", "create", "zed"][..],
        &["agent", "token", "create", "alice", "--expires", "soon"],
        &["agent", "token", "revoke", "--agent", "bob", &id],
        &["agent", "token", "revoke", "--agent", "bob"],
    ] {
        let r = h.run(bad);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
        assert_eq!(r.stderr.trim().lines().count(), 1, "{bad:?}: {r:?}");
    }
    assert_eq!(h.ok(&["--json", "agent", "token", "list"]).stdout, before);

    let s = HttpServe::start(&h);
    let me = s.get("/v1/status", &alice);
    assert_eq!(me.status, 200, "{me:?}");
    assert_eq!(me.json["agent"], "alice");
    assert_eq!(me.json["token"], id.as_str());
    assert_eq!(s.get("/v1/status", &bob).json["agent"], "bob");

    // Revoked: 401 at once, from another process (the CLI), with the
    // challenge RFC 6750 names; bob's token still works.
    h.ok(&["agent", "token", "revoke", "--agent", "alice", &id]);
    let gone = s.get("/v1/status", &alice);
    gone.problem(401, "bad_token");
    assert!(gone.json["detail"].as_str().unwrap().contains("revoked"));
    let challenge = gone.header("www-authenticate").unwrap_or("");
    assert!(challenge.starts_with("Bearer") && challenge.contains("invalid_token"));
    assert_eq!(s.get("/v1/status", &bob).status, 200);
    let all = h.json(&["agent", "token", "revoke", "--agent", "bob", "--all"]);
    assert_eq!(all["revoked"].as_array().map(Vec::len), Some(1), "{all}");
    s.get("/v1/status", &bob).problem(401, "bad_token");

    // Expired: a token of 2 s is refused as expired once they have passed
    // (polled, bounded; the exact boundary is api::tokens' unit test).
    let brief = token(&h, "carol", &["--expires", "2s"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = s.get("/v1/status", &brief);
        if a.status == 401 {
            a.problem(401, "bad_token");
            assert!(
                a.json["detail"].as_str().unwrap().contains("expired"),
                "{a:?}"
            );
            break;
        }
        assert_eq!(a.json["agent"], "carol", "{a:?}");
        assert!(Instant::now() < deadline, "never expired");
        std::thread::sleep(Duration::from_millis(100));
    }
    let states: Vec<Value> = h.json(&["agent", "token", "list"])["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!([t["agent"], t["state"]]))
        .collect();
    assert_eq!(
        states,
        [
            json!(["alice", "revoked"]),
            json!(["bob", "revoked"]),
            json!(["carol", "expired"])
        ]
    );
}

/// The ids of `GET /v1/search?q=Q&mode=lexical` for `token`.
fn found(s: &HttpServe, q: &str, token: &str) -> Vec<String> {
    let a = s.get(&format!("/v1/search?q={q}&mode=lexical"), token);
    assert_eq!(a.status, 200, "{a:?}");
    a.json["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A server keeps the tokens it accepted and their agents' gates; every
/// change another process makes to what they were built from is in force
/// on the very next request: a membership granted and taken back, a token
/// revoked, a token's row deleted, the agent gone. Each step's first
/// request comes after the same token's request was answered from the
/// kept gate.
#[test]
fn a_servers_kept_tokens_and_gates_follow_every_change_on_the_next_request() {
    let h = org();
    let team = h.add("alice", "zebra plans of team apollo", &["team:apollo"]);
    let (carol, bob, alice) = (
        token(&h, "carol", &[]),
        token(&h, "bob", &[]),
        token(&h, "alice", &[]),
    );
    let s = HttpServe::start(&h);
    for _ in 0..2 {
        assert!(found(&s, "zebra", &carol).is_empty());
    }
    // Granted from the CLI: carol sees the team's memory at once...
    h.ok(&["team", "add", "apollo", "carol"]);
    assert_eq!(found(&s, "zebra", &carol), vec![team.clone()]);
    assert_eq!(found(&s, "zebra", &carol), vec![team.clone()]);
    // ...and no longer once taken back.
    h.ok(&["team", "remove", "apollo", "carol"]);
    assert!(found(&s, "zebra", &carol).is_empty());
    // Revoked from the CLI: refused at once.
    h.ok(&["agent", "token", "revoke", "--agent", "carol", "--all"]);
    s.get("/v1/status", &carol).problem(401, "bad_token");
    // Another process deletes bob's token row, and marks alice no longer
    // registered (as an agent record from the mesh can): both refused.
    assert_eq!(found(&s, "zebra", &bob), vec![team.clone()]);
    assert_eq!(found(&s, "zebra", &alice), vec![team.clone()]);
    let db = rusqlite::Connection::open(h.path().join("amos.db")).expect("db");
    db.busy_timeout(Duration::from_secs(30)).expect("busy");
    assert_eq!(
        db.execute("DELETE FROM agent_tokens WHERE agent = 'bob'", [])
            .expect("delete"),
        1
    );
    s.get("/v1/status", &bob).problem(401, "bad_token");
    assert_eq!(found(&s, "zebra", &alice), vec![team.clone()]);
    db.execute("UPDATE agents SET present = 0 WHERE id = 'alice'", [])
        .expect("alice gone");
    let gone = s.get("/v1/status", &alice);
    gone.problem(401, "bad_token");
    assert!(
        gone.json["detail"]
            .as_str()
            .unwrap()
            .contains("no longer registered"),
        "{gone:?}"
    );
}

#[test]
fn every_documented_route_needs_a_token_and_the_document_does_not() {
    let h = org();
    let alice = token(&h, "alice", &[]);
    let s = HttpServe::start(&h);
    let doc = s.call("GET", "/v1/openapi.json", None, None, &[]);
    assert_eq!(doc.status, 200, "{doc:?}");
    assert_eq!(doc.json["openapi"], "3.1.0");
    let paths = doc.json["paths"].as_object().expect("paths");
    let mut asked = 0;
    for (path, item) in paths {
        if path == "/v1/openapi.json" {
            continue;
        }
        let path = path
            .replace("{id}", "01a2333b-3a25-7244-8e30-373782ecb05e")
            .replace("{name}", "task-42");
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let m = method.to_uppercase();
            let body = matches!(&*m, "POST" | "PUT" | "PATCH").then(|| json!({}));
            for token in [None, Some("amos_0000000000000000_00"), Some("nonsense")] {
                let a = s.call(&m, &path, token, body.as_ref(), &[]);
                a.problem(401, "bad_token");
                let challenge = a.header("www-authenticate").unwrap_or("");
                assert!(challenge.starts_with("Bearer realm=\"amos\""), "{a:?}");
                assert_eq!(challenge.contains("invalid_token"), token.is_some());
            }
            // With a token, the router knows the route and the method.
            let a = s.call(&m, &path, Some(&alice), body.as_ref(), &[]);
            assert_ne!(a.json["code"], "no_such_route", "{m} {path}: {a:?}");
            assert_ne!(a.status, 405, "{m} {path}: {a:?}");
            asked += 1;
        }
    }
    assert!(asked >= 19, "{asked} routes documented");
    // MCP too: 401 with the challenge, before any session.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
    let mcp = s.call(
        "POST",
        "/mcp",
        None,
        Some(&init),
        &[("Accept", "application/json, text/event-stream")],
    );
    mcp.problem(401, "bad_token");
    assert!(mcp.header("www-authenticate").is_some());
}

/// Every route bob's token can name alice's private memory on answers as
/// for a missing one; what bob searches, packs, lists and sees on the
/// timeline never holds, counts or ranks it.
#[test]
fn one_agents_token_never_reads_counts_or_ranks_anothers_private_memory() {
    let h = org();
    // alice's private memory matches "zebra" better than the team one.
    let private = h.add(
        "alice",
        "zebra zebra zebra: alice's private launch codes",
        &[],
    );
    // ...and again: a duplicate the consolidation preview would name.
    let twin = h.add(
        "alice",
        "zebra zebra zebra: alice's private launch codes",
        &[],
    );
    let team = h.add(
        "alice",
        "a zebra crossing near the launch pad",
        &["team:apollo"],
    );
    let carol = h.add("carol", "carol's zebra party", &[]);
    let (alice, bob) = (token(&h, "alice", &[]), token(&h, "bob", &[]));
    let s = HttpServe::start(&h);
    let missing = "01a2333b-3a25-7244-8e30-373782ecb05e";
    let before = h.fingerprint();

    for id in [private.as_str(), carol.as_str(), missing] {
        let m = format!("/v1/memories/{id}");
        let answers = [
            s.get(&m, &bob),
            s.call("PATCH", &m, Some(&bob), Some(&json!({"content": "x"})), &[]),
            s.call("DELETE", &m, Some(&bob), None, &[]),
            s.post(&format!("{m}/share"), &bob, json!({"scope": "global"})),
            s.post(
                &format!("{m}/unshare"),
                &bob,
                json!({"scope": "team:apollo"}),
            ),
            s.get(&format!("{m}/links"), &bob),
            s.post("/v1/links", &bob, json!({"a": team, "b": id})),
            s.post("/v1/feedback", &bob, json!({"ids": [id], "helpful": true})),
        ];
        for a in &answers {
            a.problem(404, "no_such_memory");
            // The same words as for a memory that does not exist.
            assert_eq!(a.json["detail"], format!("no such memory: {id}"), "{a:?}");
        }
    }
    assert_eq!(h.fingerprint(), before, "nothing changed");

    let hits = s.get("/v1/search?q=zebra&mode=lexical&k=10", &bob);
    assert_eq!(hits.status, 200, "{hits:?}");
    let hits = hits.json["hits"].as_array().unwrap().clone();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["id"], team.as_str());
    // Ranked among what bob sees only: first, though alice's private
    // memory matches better.
    assert_eq!(hits[0]["explain"]["lexical_rank"], 1, "{}", hits[0]);
    for mode in ["hybrid", "semantic", "fast"] {
        let a = s.get(
            &format!("/v1/search?q=zebra+launch+codes&mode={mode}"),
            &bob,
        );
        let ids: Vec<&str> = a.json["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap())
            .collect();
        assert!(!ids.contains(&private.as_str()) && !ids.contains(&carol.as_str()));
    }
    let pack = s.post(
        "/v1/pack",
        &bob,
        json!({"query": "zebra launch codes", "report": true}),
    );
    assert_eq!(pack.status, 200, "{pack:?}");
    assert!(!pack.text.contains(&private) && !pack.text.contains("private launch codes"));
    for path in ["/v1/memories", "/v1/timeline", "/v1/status"] {
        let a = s.get(path, &bob);
        assert_eq!(a.status, 200, "{a:?}");
        assert!(
            !a.text.contains(&private) && !a.text.contains(&carol),
            "{a:?}"
        );
        assert!(!a.text.contains("private launch codes"), "{a:?}");
    }
    // The context tools: alice's parked context is hers alone; what
    // changed for bob and what consolidation would merge never hold her
    // private memories.
    let parked = s.call(
        "PUT",
        "/v1/contexts/task-42",
        Some(&alice),
        Some(&json!({"content": "zebra: halfway through the launch codes"})),
        &[],
    );
    assert_eq!(parked.status, 200, "{parked:?}");
    s.get("/v1/contexts/task-42", &bob)
        .problem(404, "no_such_context");
    assert_eq!(s.get("/v1/contexts", &bob).json["contexts"], json!([]));
    for path in ["/v1/changes?since=-1d", "/v1/consolidation"] {
        let a = s.get(path, &bob);
        assert_eq!(a.status, 200, "{a:?}");
        let ours = parked.json["id"].as_str().unwrap();
        assert!(
            !a.text.contains(&private) && !a.text.contains(&carol),
            "{a:?}"
        );
        assert!(
            !a.text.contains(ours) && !a.text.contains("launch codes"),
            "{a:?}"
        );
        assert!(!a.text.contains(&twin), "{a:?}");
    }
    // alice's own token reads it; a visible memory bob does not own is
    // 403 for changes (it is no secret that it exists).
    assert_eq!(
        s.get(&format!("/v1/memories/{private}"), &alice).status,
        200
    );
    s.call(
        "DELETE",
        &format!("/v1/memories/{team}"),
        Some(&bob),
        None,
        &[],
    )
    .problem(403, "not_owner");
    // No request can name another agent: not in the body, not in the query.
    s.post(
        "/v1/memories",
        &bob,
        json!({"content": "as alice", "owner": "alice"}),
    )
    .problem(400, "bad_input");
    s.get("/v1/search?q=zebra&as=alice", &bob)
        .problem(400, "bad_input");
    let mine = s.post("/v1/memories", &bob, json!({"content": "bob's own note"}));
    assert_eq!(mine.status, 201, "{mine:?}");
    let mine = s.get(
        &format!("/v1/memories/{}", mine.json["id"].as_str().unwrap()),
        &bob,
    );
    assert_eq!(mine.json["owner"], "bob");
    assert_eq!(mine.json["visibility"], json!(["private"]));
}

#[test]
fn cross_site_requests_and_oversized_bodies_are_refused_with_nothing_stored() {
    let h = org();
    let alice = token(&h, "alice", &[]);
    let s = HttpServe::start(&h);
    let before = h.fingerprint();
    let body = json!({"content": "from another site"});
    let own = format!("http://127.0.0.1:{}", s.port);
    for headers in [
        &[("Origin", "http://evil.example")][..],
        &[("Origin", "null")],
        &[("Sec-Fetch-Site", "cross-site")],
        &[("Origin", &own), ("Sec-Fetch-Site", "same-site")],
    ] {
        let a = s.call("POST", "/v1/memories", Some(&alice), Some(&body), headers);
        a.problem(403, "cross_site");
        let m = s.call(
            "POST",
            "/mcp",
            Some(&alice),
            Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            headers,
        );
        m.problem(403, "cross_site");
    }
    // DNS rebinding: a name that resolves to 127.0.0.1 is not this server.
    let rebound = s.call(
        "GET",
        "/v1/status",
        Some(&alice),
        None,
        &[("Host", &format!("evil.example:{}", s.port))],
    );
    rebound.problem(403, "bad_host");
    assert_eq!(h.fingerprint(), before, "nothing stored");
    // Same origin is fine.
    let ok = s.call("GET", "/v1/status", Some(&alice), None, &[("Origin", &own)]);
    assert_eq!(ok.status, 200, "{ok:?}");

    // Oversized: 413 whether the length is declared or the body streams,
    // and nothing stored.
    let big = format!(r#"{{"content": "{}"}}"#, "a".repeat(2 * 1024 * 1024));
    let head = |extra: &str| {
        format!(
            "POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {alice}\r\n\
             Content-Type: application/json\r\nConnection: close\r\n{extra}\r\n",
            s.port
        )
    };
    let (status, text) = s.raw(
        &head(&format!("Content-Length: {}\r\n", big.len())),
        big.as_bytes(),
    );
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("payload_too_large"), "{text}");
    let mut chunked = Vec::new();
    for piece in big.as_bytes().chunks(64 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let (status, text) = s.raw(&head("Transfer-Encoding: chunked\r\n"), &chunked);
    assert_eq!(status, 413, "{text}");
    let (status, _) = s.raw(
        &head(&format!(
            "Content-Length: {}\r\nAccept: application/json, text/event-stream\r\n",
            big.len()
        ))
        .replace("/v1/memories", "/mcp"),
        big.as_bytes(),
    );
    assert_eq!(status, 413);
    assert_eq!(h.fingerprint(), before, "nothing stored");

    // k, budget and limits are bounded.
    s.get("/v1/search?q=x&k=1001", &alice)
        .problem(400, "bad_input");
    s.get("/v1/search?q=x&k=0", &alice)
        .problem(400, "bad_input");
    s.post("/v1/pack", &alice, json!({"query": "x", "budget": 100_001}))
        .problem(400, "bad_input");
    s.get("/v1/timeline?limit=1001", &alice)
        .problem(400, "bad_input");
    s.get("/v1/memories?limit=0", &alice)
        .problem(400, "bad_input");
}

#[test]
fn the_routes_do_what_the_cli_does() {
    let h = org();
    let alice = token(&h, "alice", &[]);
    let bob = token(&h, "bob", &[]);
    let s = HttpServe::start(&h);

    let added = s.post(
        "/v1/memories",
        &alice,
        json!({"content": "deploys happen on tuesdays", "type": "procedure",
               "share": ["team:apollo"], "valid_from": "2026-01-01"}),
    );
    assert_eq!(added.status, 201, "{added:?}");
    let id = added.json["id"].as_str().unwrap().to_owned();
    assert_eq!(
        added.header("location"),
        Some(&*format!("/v1/memories/{id}"))
    );
    // The CLI sees what the API wrote, as the API shows it.
    let cli = h.json(&["get", &id, "--as", "bob"]);
    let api = s.get(&format!("/v1/memories/{id}"), &bob).json;
    assert_eq!(cli, api);
    assert_eq!(api["type"], "procedure");
    assert_eq!(api["valid_from"], "2026-01-01T00:00:00.000Z");

    let patched = s.call(
        "PATCH",
        &format!("/v1/memories/{id}"),
        Some(&alice),
        Some(&json!({"content": "deploys happen on wednesdays"})),
        &[],
    );
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(
        h.json(&["get", &id, "--as", "alice"])["content"],
        "deploys happen on wednesdays"
    );
    s.call(
        "PATCH",
        &format!("/v1/memories/{id}"),
        Some(&alice),
        Some(&json!({})),
        &[],
    )
    .problem(400, "bad_input");

    let shared = s.post(
        &format!("/v1/memories/{id}/share"),
        &alice,
        json!({"scope": "global"}),
    );
    assert_eq!(
        shared.json["visibility"],
        json!(["global", "team:apollo"]),
        "{shared:?}"
    );
    let unshared = s.post(
        &format!("/v1/memories/{id}/unshare"),
        &alice,
        json!({"scope": "global"}),
    );
    assert_eq!(unshared.json["visibility"], json!(["team:apollo"]));
    s.post(
        &format!("/v1/memories/{id}/share"),
        &alice,
        json!({"scope": "teem:x"}),
    )
    .problem(400, "bad_input");
    s.post(
        &format!("/v1/memories/{id}/share"),
        &alice,
        json!({"scope": "team:nope"}),
    )
    .problem(400, "unknown_team");
    s.post(
        &format!("/v1/memories/{id}/share"),
        &bob,
        json!({"scope": "global"}),
    )
    .problem(403, "not_owner");

    let other = s.post(
        "/v1/memories",
        &alice,
        json!({"content": "wednesday freeze", "share": ["team:apollo"]}),
    );
    let other = other.json["id"].as_str().unwrap().to_owned();
    let linked = s.post(
        "/v1/links",
        &bob,
        json!({"a": id, "b": other, "relation": "supports"}),
    );
    assert_eq!(linked.status, 201, "{linked:?}");
    let links = s.get(&format!("/v1/memories/{id}/links"), &bob);
    assert_eq!(
        links.json["links"][0]["other"]["id"],
        other.as_str(),
        "{links:?}"
    );
    assert_eq!(links.json["links"][0]["relation"], "supports");
    let fb = s.post(
        "/v1/feedback",
        &bob,
        json!({"ids": [id, other], "helpful": true}),
    );
    assert_eq!(fb.json["updated"], 2, "{fb:?}");

    let hits = s.get("/v1/search?q=deploys&mode=lexical", &bob);
    assert_eq!(hits.json["hits"][0]["id"], id.as_str(), "{hits:?}");
    let api_hits: Vec<String> = hits.json["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect();
    // The linked memory comes along by resonance, as on the command line.
    let cli_hits = h.search_ids_with("bob", "deploys", &["--mode", "lexical"]);
    assert_eq!(api_hits, cli_hits);
    let old = s.get(
        "/v1/search?q=deploys&mode=lexical&known_at=2020-01-01",
        &bob,
    );
    assert_eq!(old.json["hits"], json!([]), "{old:?}");
    let pack = s.post("/v1/pack", &bob, json!({"query": "deploys", "budget": 200}));
    assert_eq!(pack.json["items"][0]["id"], id.as_str(), "{pack:?}");
    assert_eq!(pack.json["budget"], 200);
    let tl = s.get("/v1/timeline?scope=team:apollo", &bob);
    assert!(tl.json["events"].as_array().unwrap().len() >= 2, "{tl:?}");
    assert_eq!(tl.json["events"][0]["memory"], id.as_str());
    let listed = s.get("/v1/memories?limit=1", &bob);
    assert_eq!(listed.json["memories"].as_array().unwrap().len(), 1);

    // Parked contexts, changes since, the consolidation preview.
    let parked = s.call(
        "PUT",
        "/v1/contexts/release",
        Some(&bob),
        Some(&json!({"content": "checking the wednesday freeze", "ttl": "2d"})),
        &[],
    );
    assert_eq!(parked.status, 200, "{parked:?}");
    assert_eq!(parked.json["name"], "release");
    let back = s.get("/v1/contexts/release", &bob);
    assert_eq!(
        back.json["content"], "checking the wednesday freeze",
        "{back:?}"
    );
    let listed = s.get("/v1/contexts", &bob);
    assert_eq!(listed.json["contexts"][0]["name"], "release", "{listed:?}");
    s.call(
        "PUT",
        "/v1/contexts/bad%20name",
        Some(&bob),
        Some(&json!({"content": "x"})),
        &[],
    )
    .problem(400, "bad_input");
    let changes = s.get("/v1/changes?since=-1h", &bob);
    assert_eq!(changes.status, 200, "{changes:?}");
    let kinds: Vec<(&str, &str)> = changes.json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap(), c["kind"].as_str().unwrap()))
        .collect();
    assert!(kinds.contains(&(id.as_str(), "added")), "{kinds:?}");
    s.get("/v1/changes", &bob).problem(400, "bad_input");
    let plan = s.get("/v1/consolidation", &bob);
    assert_eq!(plan.status, 200, "{plan:?}");

    // Forget: 204, then as missing as anything.
    let gone = s.call(
        "DELETE",
        &format!("/v1/memories/{id}"),
        Some(&alice),
        None,
        &[],
    );
    assert_eq!(gone.status, 204, "{gone:?}");
    s.get(&format!("/v1/memories/{id}"), &alice)
        .problem(404, "no_such_memory");

    // Bad requests: one problem each, nothing done.
    let before = h.fingerprint();
    s.post("/v1/memories", &alice, json!({"content": 5}))
        .problem(400, "bad_input");
    let a = s.post(
        "/v1/memories",
        &alice,
        json!({"content": "x", "expires": "soon"}),
    );
    a.problem(400, "bad_input");
    assert!(
        a.json["detail"].as_str().unwrap().contains("expires"),
        "{a:?}"
    );
    s.post("/v1/memories", &alice, json!({"content": ""}))
        .problem(400, "bad_input");
    s.get("/v1/search?q=x&mode=fuzzy", &alice)
        .problem(400, "bad_input");
    s.get("/v1/search", &alice).problem(400, "bad_input");
    let (status, _) = s.raw(
        &format!(
            "POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {alice}\r\n\
             Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
            s.port
        ),
        b"hi",
    );
    assert_eq!(status, 415);
    s.get("/v1/nowhere", &alice).problem(404, "no_such_route");
    s.call("PUT", "/v1/search", Some(&alice), None, &[])
        .problem(405, "method_not_allowed");
    assert_eq!(h.fingerprint(), before, "nothing changed");
}
