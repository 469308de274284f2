//! `amos serve --metrics ADDR`: a real node on 127.0.0.1 serves Prometheus
//! text on `/metrics` and answers `/healthz`; a sync from a peer moves the
//! session and fact counters; searches and packs run by other processes on
//! the same home show in the recall latency histogram (and leave the digest
//! alone); `--log-format json` makes every log line on stderr a JSON object.
//! Scraped with a plain TCP client.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::Home;
use crate::common::server::{Server, free_port, id};

/// A free TCP port on 127.0.0.1 (bound, read, released).
fn free_tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// One HTTP/1.1 request: (status code, body).
fn http(addr: &str, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read the response");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head/body split: {raw:?}"));
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head:?}"));
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length: {head:?}"));
    assert_eq!(body.len(), len, "Content-Length matches the body");
    (status, body.to_owned())
}

fn get(addr: &str, path: &str) -> (u16, String) {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

/// Parse the text format strictly: `# HELP`/`# TYPE` comments, and samples
/// `name{label="value",...} number`. Returns `name{labels}` → value.
fn parse_exposition(body: &str) -> BTreeMap<String, f64> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut typed = std::collections::BTreeSet::new();
    let mut samples = BTreeMap::new();
    for line in body.lines() {
        if let Some(c) = line.strip_prefix("# ") {
            let mut parts = c.splitn(3, ' ');
            let kind = parts.next().unwrap_or("");
            let name = parts.next().unwrap_or("");
            assert!(kind == "HELP" || kind == "TYPE", "comment {line:?}");
            assert!(name_ok(name), "metric name in {line:?}");
            if kind == "TYPE" {
                let t = parts.next().unwrap_or("");
                assert!(
                    ["counter", "gauge", "histogram"].contains(&t),
                    "type in {line:?}"
                );
                typed.insert(name.to_owned());
            }
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("sample without a value: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("value in {line:?} is not a number")),
        };
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line:?}"));
                for pair in labels.split(',') {
                    let (k, v) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("label without '=': {line:?}"));
                    assert!(name_ok(k), "label name in {line:?}");
                    assert!(
                        v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                        "label value in {line:?}"
                    );
                }
                name
            }
            None => series,
        };
        assert!(name_ok(name), "metric name in {line:?}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(typed.contains(family), "{name} has a # TYPE line before it");
        samples.insert(series.to_owned(), value);
    }
    samples
}

/// Scrape until `ready` holds (the server notes a session just after the
/// dialler has its answer), at most 20 s.
fn scrape_until(
    addr: &str,
    ready: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, body) = get(addr, "/metrics");
        assert_eq!(code, 200, "{body}");
        let samples = parse_exposition(&body);
        if ready(&samples) || Instant::now() > deadline {
            return samples;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_move_with_a_sync_and_healthz_answers() {
    let a = Home::apollo();
    let b = Home::apollo();
    let metrics = format!("127.0.0.1:{}", free_tcp_port());
    let listen = format!("127.0.0.1:{}", free_port());
    let server = Server::start_with(
        a.path(),
        None,
        &listen,
        &["--no-mdns", "--metrics", &metrics, "--log-format", "json"],
    );
    let (ida, idb) = (id(&a), id(&b));
    a.ok(&["peers", "add", &idb, "--policy", "full"]);
    b.ok(&["peers", "add", &ida, &listen, "--policy", "full"]);

    let (code, body) = get(&metrics, "/healthz");
    assert_eq!((code, body.as_str()), (200, "ok\n"));

    let before = scrape_until(&metrics, |_| true);
    let applied = "amos_facts_received_total{outcome=\"applied\"}";
    assert_eq!(before.get(applied), Some(&0.0), "{before:#?}");
    let rounds = format!("amos_sync_rounds_total{{peer=\"{idb}\",role=\"accept\",result=\"ok\"}}");
    assert!(!before.contains_key(&rounds), "{before:#?}");
    assert_eq!(before.get("amos_peers"), Some(&1.0), "{before:#?}");
    assert_eq!(before.get("amos_memories"), Some(&0.0), "{before:#?}");
    assert!(
        before.get("amos_store_bytes").is_some_and(|b| *b > 0.0),
        "{before:#?}"
    );
    assert!(before.contains_key("amos_index_lag"), "{before:#?}");
    assert_eq!(
        before.get("amos_facts_refused_total{reason=\"outside_policy\"}"),
        Some(&0.0)
    );
    assert_eq!(
        before.get("amos_quarantined_facts{reason=\"clock_skew\"}"),
        Some(&0.0)
    );

    // b writes two memories and syncs with a.
    b.add("alice", "metrics orion launch window", &["team:apollo"]);
    b.add("alice", "metrics orion fuel plan", &["team:apollo"]);
    let r = b.json(&["sync", "now"]);
    assert_eq!(r["peers"][0]["result"], "ok", "{r}\n{}", server.log());

    let after = scrape_until(&metrics, |s| s.get(&rounds) == Some(&1.0));
    assert_eq!(
        after.get(&rounds),
        Some(&1.0),
        "{after:#?}\n{}",
        server.log()
    );
    assert!(
        after.get(applied).is_some_and(|n| *n >= 2.0),
        "b's facts were applied on a: {after:#?}"
    );
    let count = format!("amos_sync_duration_seconds_count{{peer=\"{idb}\",role=\"accept\"}}");
    let inf =
        format!("amos_sync_duration_seconds_bucket{{peer=\"{idb}\",role=\"accept\",le=\"+Inf\"}}");
    assert_eq!(after.get(&count), Some(&1.0), "{after:#?}");
    assert_eq!(after.get(&inf), Some(&1.0), "{after:#?}");
    let facts_in = format!("amos_sync_facts_total{{peer=\"{idb}\",direction=\"in\"}}");
    assert!(
        after.get(&facts_in).is_some_and(|n| *n >= 2.0),
        "{after:#?}"
    );
    assert_eq!(after.get("amos_memories"), Some(&2.0), "{after:#?}");

    // Anything else is refused politely, and the listener keeps serving.
    assert_eq!(get(&metrics, "/nope").0, 404);
    assert_eq!(
        http(
            &metrics,
            "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        )
        .0,
        405
    );
    assert_eq!(http(&metrics, "garbage\r\n\r\n").0, 400);
    let oversized = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let mut s = TcpStream::connect(&metrics).expect("connect");
    // The server may close before reading everything: a reset is fine too.
    let _ = s.write_all(oversized.as_bytes());
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    assert!(
        raw.is_empty() || raw.starts_with("HTTP/1.1 400"),
        "an oversized head is not served: {raw:?}"
    );
    assert_eq!(get(&metrics, "/healthz").0, 200);

    // --log-format json: every line on stderr is one JSON object.
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.iter().any(|l| l.contains("metrics on http://")),
        "{log}"
    );
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line:?}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
}

#[test]
fn a_metrics_address_already_taken_stops_serve_with_a_clear_error() {
    let a = Home::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let r = a.run(&[
        "serve",
        "--no-mdns",
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
        "--metrics",
        &addr,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("cannot listen for metrics"), "{r:?}");
    let r = a.run(&["serve", "--no-mdns", "--metrics", "not-an-addr"]);
    assert_eq!(r.code, 2, "{r:?}");
}

/// `amos_recall_duration_seconds{kind}`: (le → cumulative count) in bound
/// order, then count and sum.
fn recall_histogram(s: &BTreeMap<String, f64>, kind: &str) -> (Vec<(f64, f64)>, f64, f64) {
    let prefix = format!("amos_recall_duration_seconds_bucket{{kind=\"{kind}\",le=\"");
    let mut buckets: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|(series, n)| {
            let le = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            let le = match le {
                "+Inf" => f64::INFINITY,
                le => le.parse().expect("le is a number"),
            };
            Some((le, *n))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let get = |suffix: &str| {
        *s.get(&format!(
            "amos_recall_duration_seconds_{suffix}{{kind=\"{kind}\"}}"
        ))
        .unwrap_or_else(|| panic!("no {suffix} for {kind}: {s:#?}"))
    };
    (buckets, get("count"), get("sum"))
}

#[test]
fn recall_latency_counts_every_search_and_pack_and_leaves_the_digest_alone() {
    let a = Home::apollo();
    a.add("alice", "orion launch window is at dawn", &["team:apollo"]);
    a.add("alice", "orion fuel plan needs review", &[]);
    let digest = |h: &Home| h.json(&["digest"])["digest"].clone();
    let (before, before_team) = (digest(&a), a.digest("team:apollo"));
    let metrics = format!("127.0.0.1:{}", free_tcp_port());
    let server = Server::start_with(
        a.path(),
        None,
        &format!("127.0.0.1:{}", free_port()),
        &["--no-mdns", "--metrics", &metrics],
    );

    let idle = scrape_until(&metrics, |_| true);
    for kind in ["search", "pack"] {
        let (buckets, count, _) = recall_histogram(&idle, kind);
        assert_eq!(count, 0.0, "{kind}: {idle:#?}");
        assert!(buckets.len() > 2 && buckets.iter().all(|b| b.1 == 0.0));
    }

    // Four searches (one finds nothing, one prints JSON) and two packs; a
    // refused search (bad input) is no recall.
    a.ok(&["search", "orion", "--as", "alice"]);
    a.ok(&["search", "orion launch", "--as", "alice", "--explain"]);
    a.ok(&["search", "nothing-matches-this", "--as", "alice"]);
    a.json(&["search", "fuel", "--as", "alice"]);
    a.ok(&["pack", "orion", "--as", "alice", "--budget", "200"]);
    a.ok(&[
        "pack", "fuel", "--as", "alice", "--budget", "200", "--report",
    ]);
    assert_eq!(
        a.run(&["search", "orion", "--as", "alice", "-k", "0"]).code,
        2
    );

    // Each call committed its sample before it exited: one scrape sees all.
    let after = scrape_until(&metrics, |_| true);
    for (kind, calls) in [("search", 4.0), ("pack", 2.0)] {
        let (buckets, count, sum) = recall_histogram(&after, kind);
        assert_eq!(count, calls, "{kind}: {after:#?}\n{}", server.log());
        let (last_le, inf) = *buckets.last().expect("buckets");
        assert_eq!(
            (last_le, inf),
            (f64::INFINITY, calls),
            "{kind}: +Inf = count"
        );
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{kind}: buckets are cumulative: {buckets:?}"
        );
        assert!(sum > 0.0, "{kind}: the sum is the time spent: {sum}");
    }
    // Local-only: recalling replicates nothing.
    assert_eq!(digest(&a), before);
    assert_eq!(a.digest("team:apollo"), before_team);
}
