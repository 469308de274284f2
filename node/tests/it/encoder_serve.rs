//! `amos serve`'s background encoder catch-up (issue 39, items 2 and 4): a
//! real `amos serve --no-mdns` process encodes what a bulk import left
//! pending, more than one batch of it, without being asked; wakes for a
//! second import; reports the encoder on `amos status` (JSON and text) and
//! on `/metrics`; and stops cleanly. Waits are bounded polls, no timing
//! assertions.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Home;
use crate::common::server::Server;

/// Longest a catch-up may take here (debug build, shared machine).
const CATCH_UP_BOUND: Duration = Duration::from_secs(240);
const POLL: Duration = Duration::from_millis(100);

/// Import `texts` for `agent` from a Mem0 export (a bulk path: pending).
fn import_mem0(h: &Home, agent: &str, name: &str, texts: &[String]) {
    let file = h.path().join(format!("{name}.json"));
    let rows: Vec<Value> = texts.iter().map(|t| json!({"memory": t})).collect();
    std::fs::write(&file, serde_json::to_string(&rows).unwrap()).unwrap();
    h.json(&["import", "mem0", file.to_str().unwrap(), "--as", agent]);
}

fn texts(from: usize, n: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| {
            format!(
                "note {i}: the shuttle to depot {i} leaves at {} o'clock",
                i % 12 + 1
            )
        })
        .collect()
}

/// `amos --json status`'s encoder object.
fn encoder(h: &Home) -> Value {
    h.json(&["status"])["encoder"].clone()
}

/// Poll `amos --json status` until nothing is pending (bounded).
fn wait_until_encoded(h: &Home, server: &mut Server, want: u64) -> Value {
    let deadline = Instant::now() + CATCH_UP_BOUND;
    loop {
        let e = encoder(h);
        if e["pending"] == 0 && e["encoded"] == want {
            return e;
        }
        assert!(server.is_running(), "serve stopped: {}", server.log());
        assert!(
            Instant::now() < deadline,
            "still pending after {CATCH_UP_BOUND:?}: {e}\n{}",
            server.log()
        );
        std::thread::sleep(POLL);
    }
}

/// `GET /metrics`: its sample lines.
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read the response");
    raw
}

fn gauge(body: &str, name: &str) -> Option<u64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn serve_encodes_what_a_bulk_import_left_pending() {
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    // More than one batch of 64.
    import_mem0(&h, "bob", "first", &texts(0, 70));
    let e = encoder(&h);
    assert!(
        e["model"].as_str().is_some_and(|m| m.contains("minilm")),
        "{e}"
    );
    assert_eq!(
        e["pending"], 70,
        "a bulk import leaves its memories pending: {e}"
    );
    assert_eq!(e["encoded"], 0, "{e}");
    let text = h.ok(&["status"]).stdout;
    assert!(
        text.lines()
            .any(|l| l.starts_with("encoder ") && l.contains("pending 70")),
        "{text}"
    );

    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let addr = format!("127.0.0.1:{}", crate::common::server::free_port());
    let mut server = Server::start_with(
        h.path(),
        None,
        &addr,
        &["--no-mdns", "--no-push", "--metrics", &metrics],
    );
    // Nobody asked: serve's background catch-up encodes them all.
    wait_until_encoded(&h, &mut server, 70);

    // Idle now; a second import wakes it.
    import_mem0(&h, "bob", "second", &texts(70, 3));
    wait_until_encoded(&h, &mut server, 73);
    let text = h.ok(&["status"]).stdout;
    assert!(
        text.lines()
            .any(|l| l.starts_with("encoder ") && l.contains("encoded 73  pending 0")),
        "{text}"
    );

    // The gauges say what the catch-up counted last (set just after its
    // last batch was saved: polled, bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let body = scrape(&metrics);
        if gauge(&body, "amos_encoder_encoded") == Some(73) || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(POLL);
    };
    assert_eq!(gauge(&body, "amos_encoder_pending"), Some(0), "{body}");
    assert_eq!(gauge(&body, "amos_encoder_encoded"), Some(73), "{body}");
    // Each memory encoded once: no process saved an empty pair over the
    // catch-up's work (a pair with nothing encoded did not read back, so
    // every `amos status` started afresh and saved one: 143 here in CI).
    assert_eq!(
        gauge(&body, "amos_encoder_encoded_total"),
        Some(73),
        "{body}\n{}",
        server.log()
    );

    // SIGTERM: it stops cleanly, the catch-up with it.
    let status = server.stop().expect("serve stopped within the bound");
    assert!(status.success(), "{status:?}: {}", server.log());
    assert!(
        !server.log().contains("catch-up:"),
        "no error: {}",
        server.log()
    );
}

/// With the encoder off, status says so (null, "encoder off"), serve runs
/// and its catch-up does nothing: the memories are not encoded behind the
/// setting's back.
#[test]
fn with_the_encoder_off_serve_encodes_nothing() {
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    h.ok(&["config", "set", "encoder", "off"]);
    import_mem0(&h, "bob", "first", &texts(0, 3));
    assert!(encoder(&h).is_null(), "{}", h.json(&["status"]));
    assert!(
        h.ok(&["status"]).stdout.lines().any(|l| l == "encoder off"),
        "text status"
    );
    let mut server = Server::start(h.path());
    h.add("bob", "one more note about the depot shuttle", &[]);
    assert!(server.is_running());
    let status = server.stop().expect("serve stopped within the bound");
    assert!(status.success(), "{status:?}: {}", server.log());
    // On again: the import and the add made while it was off are all
    // pending; nothing encoded them behind the setting's back.
    h.ok(&["config", "set", "encoder", "on"]);
    let e = encoder(&h);
    assert_eq!(e["pending"], 4, "{e}");
    assert_eq!(e["encoded"], 0, "{e}");
}

/// The console's node page shows the encoder's pending memories, and that
/// every memory is encoded once a catch-up ran.
#[test]
fn the_console_shows_pending_memories() {
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    import_mem0(&h, "bob", "first", &texts(0, 2));
    let c = crate::common::console::Console::start(h.path());
    let page = c.get("/node");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("2 memories pending"), "{}", page.body);
    assert!(page.body.contains("minilm"), "the encoder's name");
    assert_eq!(h.json(&["index", "catch-up"])["encoded"], 2);
    // A console started after the catch-up (a long-lived node does not yet
    // take up another process's encoding: index/encoded.rs reloads its
    // files only when it saves them itself).
    drop(c);
    let c = crate::common::console::Console::start(h.path());
    let page = c.get("/node");
    assert!(!page.body.contains("memories pending"), "{}", page.body);
    assert!(page.body.contains("every memory encoded"), "{}", page.body);
}
