//! Waits and lines a new user meets on the network (issue 44, items 7 and
//! 2), through the real binary over loopback QUIC: a dial to a peer that
//! does not answer reports once (the result line, no warn log besides),
//! `--connect-timeout` bounds it and a malformed one is refused; `amos
//! serve` says what it serves in one line once it listens, and on SIGTERM
//! drops a push still dialling instead of waiting it out, prints `stopped`
//! and exits 0.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::common::server::{free_port, id};
use crate::common::{Home, amos_bin};

/// A home with one peer that never answers: a real NodeId at a loopback
/// port nobody listens on.
fn with_dead_peer() -> (Home, String) {
    let h = Home::apollo();
    let ghost = Home::new();
    let ghost_id = id(&ghost);
    let addr = format!("127.0.0.1:{}", free_port());
    h.ok(&["peers", "add", &ghost_id, &addr, "--policy", "full"]);
    (h, ghost_id)
}

#[test]
fn an_unreachable_peer_is_reported_once_within_the_connect_timeout() {
    let (h, ghost) = with_dead_peer();
    let r = h.run(&["sync", "now"]);
    assert_eq!(r.code, 1, "{r:?}");
    let said = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(said.matches("did not complete").count(), 1, "{r:?}");
    assert!(r.stdout.contains(&format!("{ghost}  unreachable")), "{r:?}");
    assert!(!r.stderr.contains("WARN"), "no warn log besides: {r:?}");
    // The default bound, and a longer one asked for.
    assert!(r.stdout.contains("within 2.5s"), "{r:?}");
    let r = h.run(&["sync", "now", "--connect-timeout", "1s"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("within 1s"), "{r:?}");
    let r = h.run(&["sync", "auto", "--connect-timeout", "1s"]);
    assert!(r.stdout.contains("within 1s"), "{r:?}");
    // Malformed or zero: one line, exit 2, before any dial.
    for (cmd, bad) in [
        (&["sync", "now"][..], "soon"),
        (&["sync", "now"], "0s"),
        (&["doctor"], "soon"),
        (&["join", "amos1-x"], "soon"),
        (&["serve", "--no-mdns"], "soon"),
        (&["console"], "soon"),
    ] {
        let mut a = cmd.to_vec();
        a.extend_from_slice(&["--connect-timeout", bad]);
        let r = h.run(&a);
        assert_eq!(r.code, 2, "{a:?}: {r:?}");
        assert_eq!(
            r.stderr.trim(),
            format!("amos: malformed --connect-timeout {bad:?}: use a duration, e.g. 10s"),
            "{a:?}"
        );
    }
    // doctor's probe takes the bound too.
    let r = h.run(&["doctor", "--connect-timeout", "1s"]);
    assert!(r.stdout.contains("does not answer"), "{r:?}");
}

#[test]
fn a_join_to_a_dead_inviter_takes_the_connect_timeout_and_records_nothing() {
    let a = Home::apollo();
    let dead = format!("127.0.0.1:{}", free_port());
    let code = a.json(&["team", "invite", "apollo", "--addr", &dead])["code"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = Home::new();
    let r = b.run(&["join", &code, "--connect-timeout", "1s"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr.trim(),
        format!(
            "amos: cannot reach the inviter ({dead}: timed out: the handshake did not complete \
             within 1s); nothing was recorded"
        )
    );
    assert_eq!(b.json(&["peers", "list"])["peers"], serde_json::json!([]));
}

/// `amos serve` on a free loopback port with `args`, its stdout and
/// stderr read line by line as they come.
struct Serving {
    child: Child,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
}

impl Serving {
    fn start(h: &Home, log: &str, args: &[&str]) -> Serving {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut child = Command::new(amos_bin())
            .env("AMOS_HOME", h.path())
            .env_remove("AMOS_AGENT")
            .env("AMOS_LOG", log)
            .args(["serve", "--no-mdns", "--listen", &addr])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn amos serve");
        let lines = |r: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            rx
        };
        let out = lines(Box::new(child.stdout.take().unwrap()));
        let err = lines(Box::new(child.stderr.take().unwrap()));
        Serving { child, out, err }
    }

    /// The next line on stdout; a bound, not a wait: it fails a serve that
    /// never says it is up instead of hanging.
    fn line(&self) -> String {
        self.out
            .recv_timeout(Duration::from_secs(60))
            .expect("a line on stdout")
    }

    /// SIGTERM; the exit code and the rest of stdout and stderr.
    fn term(mut self) -> (Option<i32>, Vec<String>, Vec<String>) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        let code = self.child.wait().expect("wait").code();
        (code, self.out.iter().collect(), self.err.iter().collect())
    }
}

impl Drop for Serving {
    /// A test that failed midway leaves no server behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_says_what_it_serves_and_stops_on_sigterm() {
    let h = Home::new();
    let me = id(&h);
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let s = Serving::start(&h, "warn", &["--metrics", &metrics, "--sync-every", "1h"]);
    let line = s.line();
    let (start, rest) = line.split_once(" on 127.0.0.1:").expect(&line);
    assert_eq!(start, format!("serving node {me}"));
    assert!(
        rest.ends_with(&format!(
            " (QUIC); push on; sync every 1h; mDNS off; metrics http://{metrics}/metrics"
        )),
        "{line}"
    );
    let (code, out, err) = s.term();
    assert_eq!(code, Some(0), "{out:?} {err:?}");
    assert_eq!(out, ["stopped"]);
    assert!(
        err.is_empty(),
        "nothing logged at the default level: {err:?}"
    );

    // --json: one object per line; push off and the console's address.
    let s = Serving::start(
        &h,
        "warn",
        &["--json", "--no-push", "--console", "127.0.0.1:0"],
    );
    let json = |line: String| -> Value { serde_json::from_str(&line).expect(&line) };
    let console = json(s.line());
    let serving = json(s.line());
    let url = console["console"].as_str().unwrap();
    let v = &serving["serving"];
    assert_eq!(v["node_id"], me.as_str());
    assert_eq!(v["push"], false);
    assert_eq!(v["mdns"], false);
    assert_eq!(v["metrics"], Value::Null);
    let at = v["console"].as_str().unwrap();
    assert!(url.starts_with(at), "{url} {at}");
    let (code, out, _) = s.term();
    assert_eq!(code, Some(0));
    assert_eq!(out, [r#"{"stopped":true}"#]);
}

#[test]
fn sigterm_drops_a_push_still_dialling_a_dead_peer() {
    let (h, ghost) = with_dead_peer();
    // The push would wait 20 s for the handshake.
    let s = Serving::start(
        &h,
        "warn,amos_node::ops::serve=debug",
        &["--connect-timeout", "20s", "--push-debounce", "1ms"],
    );
    assert!(s.line().starts_with("serving node "));
    h.add("alice", "a change to push", &[]);
    let dialling = format!("pushing to {ghost}");
    let mut seen = Vec::new();
    // Bounded: a serve that never dials fails here instead of hanging.
    while let Ok(line) = s.err.recv_timeout(Duration::from_secs(60)) {
        let done = line.contains(&dialling);
        seen.push(line);
        if done {
            break;
        }
    }
    assert!(seen.last().unwrap().contains(&dialling), "{seen:?}");
    let (code, out, err) = s.term();
    assert_eq!(code, Some(0), "{err:?}");
    assert_eq!(out, ["stopped"]);
    assert!(
        err.iter()
            .any(|l| l.contains("dropping 1 sessions still running")),
        "{err:?}"
    );
}
