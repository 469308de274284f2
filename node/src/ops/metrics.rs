//! Observability for `amos serve --metrics ADDR`: process counters that the
//! mesh updates through small hooks ([`facts_applied`], [`session_finished`]),
//! gauges read from the store at scrape time (with the recall latency
//! histogram, which the processes that search record in the store:
//! `crate::recall::latency`), the Prometheus text format (written by hand),
//! and a minimal HTTP/1.1 responder for `GET /metrics` and `GET /healthz`.
//!
//! The responder reads at most [`MAX_REQUEST`] bytes of request head within
//! [`REQUEST_TIMEOUT`], serves at most [`MAX_CONNECTIONS`] connections at
//! once, answers one request per connection and closes it.
//!
//! It must never expose memory content, agent, team or project names, or
//! anything else a requester gate guards: labels are peer NodeIds (the
//! operator's own wiring) and fixed reason classes only, never the free text
//! of a refusal.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amos_sync::{ApplyReport, DeferReason, Refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::error::{NodeError, Result};
use crate::events::{self, Listener, Role, SessionStats, SyncEvent, SyncResult};
use crate::home::Home;
use crate::index::RecallIndex;
use crate::recall::latency;
use crate::store::{Store, Watch, status};

/// The longest request head the responder reads.
pub const MAX_REQUEST: usize = 8 * 1024;
/// How long a client has to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed unanswered.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a scrape may take to read the store.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Upper bounds (seconds) of the sync duration histogram.
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Cumulative counts are computed when written; these are per bucket.
    buckets: [u64; DURATION_BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if let Some(i) = DURATION_BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i] += 1;
        }
        self.sum += secs;
        self.count += 1;
    }
}

/// The counters of this process.
#[derive(Debug, Default)]
struct Counters {
    /// Facts received from peers, by what the import did with them.
    applied: u64,
    stale: u64,
    refused: u64,
    deferred: u64,
    /// (peer, role, result) → sessions.
    rounds: BTreeMap<(String, Role, &'static str), u64>,
    /// (peer, role) → durations.
    durations: BTreeMap<(String, Role), Histogram>,
    /// (peer, direction) → facts / bytes moved by sessions that finished.
    facts: BTreeMap<(String, &'static str), u64>,
    bytes: BTreeMap<(String, &'static str), u64>,
    /// The encoder's memories (encoded, pending) as `serve`'s background
    /// catch-up last counted them; `None`: not counted (encoder off, or no
    /// catch-up running in this process).
    encoder: Option<(u64, u64)>,
    /// Memories the background catch-up encoded since start.
    encoded: u64,
}

static COUNTERS: Mutex<Counters> = Mutex::new(Counters {
    applied: 0,
    stale: 0,
    refused: 0,
    deferred: 0,
    rounds: BTreeMap::new(),
    durations: BTreeMap::new(),
    facts: BTreeMap::new(),
    bytes: BTreeMap::new(),
    encoder: None,
    encoded: 0,
});

fn counters() -> std::sync::MutexGuard<'static, Counters> {
    // A panic while holding the lock leaves plain numbers behind: keep counting.
    COUNTERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The counters' ear: registered once per process by [`start`].
struct Counting;

impl Listener for Counting {
    fn event(&self, e: &SyncEvent<'_>) {
        match *e {
            SyncEvent::Applied(r) => facts_applied(r),
            SyncEvent::Stored { .. } => {}
            SyncEvent::Finished {
                peer,
                role,
                result,
                elapsed,
                stats,
            } => session_finished(peer, role, result, elapsed, stats),
        }
    }
}

/// Start counting this process's sync events (idempotent).
pub fn count_sync_events() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| events::listen(Arc::new(Counting)));
}

/// A batch from a peer went through the import gate.
fn facts_applied(r: &ApplyReport) {
    let mut c = counters();
    c.applied += r.applied;
    c.stale += r.stale;
    c.refused += r.refused;
    c.deferred += r.deferred;
}

/// `serve`'s background catch-up counted the encoder's memories
/// (`None`: the encoder is off) and has just encoded `encoded` more.
pub fn encoder_progress(progress: Option<(u64, u64)>, encoded: u64) {
    let mut c = counters();
    c.encoder = progress;
    c.encoded += encoded;
}

/// A sync session with `peer` ended (`stats` only when it succeeded).
fn session_finished(
    peer: &str,
    role: Role,
    result: SyncResult,
    elapsed: Duration,
    stats: Option<&SessionStats>,
) {
    let peer = peer.to_string();
    let mut c = counters();
    *c.rounds
        .entry((peer.clone(), role, result.as_str()))
        .or_default() += 1;
    c.durations
        .entry((peer.clone(), role))
        .or_default()
        .observe(elapsed.as_secs_f64());
    if let Some(s) = stats {
        for (dir, facts, bytes) in [
            ("in", s.facts_in, s.bytes_in),
            ("out", s.facts_out, s.bytes_out),
        ] {
            *c.facts.entry((peer.clone(), dir)).or_default() += facts;
            *c.bytes.entry((peer.clone(), dir)).or_default() += bytes;
        }
    }
}

// ---------------------------------------------------------------------------
// Store gauges

/// What a scrape reads from the store.
#[derive(Debug, Default)]
struct StoreGauges {
    memories: i64,
    peers: i64,
    /// Facts held back for peers lacking a feature (docs/design.md §13).
    held_back: i64,
    index_lag: i64,
    store_bytes: u64,
    /// reason class → distinct refused facts in the audit log.
    refused_by_reason: BTreeMap<&'static str, i64>,
    /// reason class → facts held aside.
    quarantined_by_reason: BTreeMap<&'static str, i64>,
    /// Recall latency, per kind (recorded by every process that searched).
    recall: Vec<latency::Histogram>,
}

/// Count rows per stable code (`amos_sync::Refusal::code`,
/// `amos_sync::DeferReason::code`); a code this binary does not know
/// (written by a newer one) counts as `other`. Never free text.
fn grouped(rows: Vec<(String, i64)>, known: &[&'static str]) -> BTreeMap<&'static str, i64> {
    let mut out = BTreeMap::new();
    for (code, n) in rows {
        let class = known
            .iter()
            .find(|k| **k == code)
            .copied()
            .unwrap_or("other");
        *out.entry(class).or_default() += n;
    }
    out
}

/// Read the gauges. Read-only: a scrape changes nothing (not even what
/// `amos status` counts as seen).
fn read_store(home: &Home) -> Result<StoreGauges> {
    let store = Store::open(&home.db_path())?;
    let index_lag = RecallIndex::open(home)?.lag(&store)?;
    let db = home.db_path();
    let store_bytes = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let mut p = db.clone().into_os_string();
            p.push(suffix);
            std::fs::metadata(p).ok().map(|m| m.len())
        })
        .sum();
    Ok(StoreGauges {
        memories: store.read(|r| status::live_memories(r))?,
        peers: store.read(|r| status::peer_count(r))?,
        held_back: store.read(|r| status::held_back(r))?,
        index_lag,
        store_bytes,
        refused_by_reason: grouped(store.read(|r| status::audit_codes(r))?, &Refusal::CODES),
        quarantined_by_reason: grouped(
            store.read(|r| status::deferred_codes(r))?,
            &DeferReason::CODES,
        ),
        recall: store.read(|r| latency::read(r))?,
    })
}

// ---------------------------------------------------------------------------
// The text format

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Render every metric in the Prometheus text exposition format (0.0.4).
fn render(store: Option<&StoreGauges>) -> String {
    let c = counters();
    let mut o = String::with_capacity(4096);
    header(
        &mut o,
        "amos_up",
        "gauge",
        "1 while the node serves; store gauges below are present only when the store could be read.",
    );
    let _ = writeln!(o, "amos_up 1");
    header(
        &mut o,
        "amos_build_info",
        "gauge",
        "The running amos version.",
    );
    let _ = writeln!(
        o,
        "amos_build_info{{version=\"{}\"}} 1",
        label(env!("CARGO_PKG_VERSION"))
    );

    header(
        &mut o,
        "amos_facts_received_total",
        "counter",
        "Facts received from peers since start, by what the import gate and merge did with them.",
    );
    for (outcome, n) in [
        ("applied", c.applied),
        ("stale", c.stale),
        ("refused", c.refused),
        ("deferred", c.deferred),
    ] {
        let _ = writeln!(o, "amos_facts_received_total{{outcome=\"{outcome}\"}} {n}");
    }

    header(
        &mut o,
        "amos_sync_rounds_total",
        "counter",
        "Sync sessions since start, by peer, role (dial/accept) and result.",
    );
    for ((peer, role, result), n) in &c.rounds {
        let _ = writeln!(
            o,
            "amos_sync_rounds_total{{peer=\"{}\",role=\"{}\",result=\"{result}\"}} {n}",
            label(peer),
            role.as_str()
        );
    }

    header(
        &mut o,
        "amos_sync_duration_seconds",
        "histogram",
        "Sync session durations since start, by peer and role.",
    );
    for ((peer, role), h) in &c.durations {
        let labels = format!("peer=\"{}\",role=\"{}\"", label(peer), role.as_str());
        let mut cumulative = 0;
        for (bound, n) in DURATION_BUCKETS.iter().zip(h.buckets) {
            cumulative += n;
            let _ = writeln!(
                o,
                "amos_sync_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            o,
            "amos_sync_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(o, "amos_sync_duration_seconds_sum{{{labels}}} {}", h.sum);
        let _ = writeln!(
            o,
            "amos_sync_duration_seconds_count{{{labels}}} {}",
            h.count
        );
    }

    for (name, help, map) in [
        (
            "amos_sync_facts_total",
            "Facts moved by finished sync sessions since start, by peer and direction.",
            &c.facts,
        ),
        (
            "amos_sync_bytes_total",
            "Bytes moved by finished sync sessions since start, by peer and direction.",
            &c.bytes,
        ),
    ] {
        header(&mut o, name, "counter", help);
        for ((peer, dir), n) in map {
            let _ = writeln!(
                o,
                "{name}{{peer=\"{}\",direction=\"{dir}\"}} {n}",
                label(peer)
            );
        }
    }
    if let Some((encoded, pending)) = c.encoder {
        for (name, help, v) in [
            (
                "amos_encoder_pending",
                "Live memories waiting for the sentence encoder (found by their static vectors until encoded), as the background catch-up last counted them.",
                pending,
            ),
            (
                "amos_encoder_encoded",
                "Live memories with the sentence encoder's vectors for their current text, as the background catch-up last counted them.",
                encoded,
            ),
        ] {
            header(&mut o, name, "gauge", help);
            let _ = writeln!(o, "{name} {v}");
        }
        header(
            &mut o,
            "amos_encoder_encoded_total",
            "counter",
            "Memories the background catch-up encoded since start.",
        );
        let _ = writeln!(o, "amos_encoder_encoded_total {}", c.encoded);
    }
    drop(c);

    if let Some(s) = store {
        header(
            &mut o,
            "amos_facts_refused_total",
            "counter",
            "Distinct facts refused from peers (the audit log), by reason.",
        );
        for reason in Refusal::CODES.iter().chain(&["other"]) {
            let n = s.refused_by_reason.get(reason).copied().unwrap_or(0);
            let _ = writeln!(o, "amos_facts_refused_total{{reason=\"{reason}\"}} {n}");
        }
        header(
            &mut o,
            "amos_quarantined_facts",
            "gauge",
            "Facts from peers held aside to retry later, by reason.",
        );
        for reason in DeferReason::CODES.iter().chain(&["other"]) {
            let n = s.quarantined_by_reason.get(reason).copied().unwrap_or(0);
            let _ = writeln!(o, "amos_quarantined_facts{{reason=\"{reason}\"}} {n}");
        }
        header(
            &mut o,
            "amos_recall_duration_seconds",
            "histogram",
            "Search and context pack latency (to the ranked answer), by kind, from every process that recalled on this home (CLI, MCP, bench).",
        );
        for h in &s.recall {
            let kind = h.kind.as_str();
            for (bound, n) in &h.buckets {
                let _ = writeln!(
                    o,
                    "amos_recall_duration_seconds_bucket{{kind=\"{kind}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                o,
                "amos_recall_duration_seconds_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                o,
                "amos_recall_duration_seconds_sum{{kind=\"{kind}\"}} {}",
                h.sum_seconds
            );
            let _ = writeln!(
                o,
                "amos_recall_duration_seconds_count{{kind=\"{kind}\"}} {}",
                h.count
            );
        }
        for (name, kind, help, v) in [
            (
                "amos_store_bytes",
                "gauge",
                "Size of the SQLite store with its WAL, in bytes.",
                s.store_bytes as i64,
            ),
            (
                "amos_index_lag",
                "gauge",
                "Store changes the recall index has not caught up with yet.",
                s.index_lag,
            ),
            (
                "amos_memories",
                "gauge",
                "Live memories in the store.",
                s.memories,
            ),
            ("amos_peers", "gauge", "Registered peers.", s.peers),
            (
                "amos_facts_held_back",
                "gauge",
                "Facts held back for peers whose protocol lacks a feature they need; sent once they have it.",
                s.held_back,
            ),
        ] {
            header(&mut o, name, kind, help);
            let _ = writeln!(o, "{name} {v}");
        }
    }
    o
}

// ---------------------------------------------------------------------------
// The HTTP responder

/// A running metrics listener; stops when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Where it listens (the bound address, with the real port for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bind `addr` and serve `/metrics` and `/healthz` for `home` until dropped.
pub async fn start(home: &Home, addr: SocketAddr) -> Result<MetricsServer> {
    count_sync_events();
    let listener = TcpListener::bind(addr)
        .await
        .map_err(NodeError::io(format!(
            "cannot listen for metrics on {addr}"
        )))?;
    let addr = listener
        .local_addr()
        .map_err(NodeError::io("reading the metrics address"))?;
    info!("metrics on http://{addr}/metrics");
    let home = home.clone();
    let task = tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let (stream, remote) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    warn!("metrics listener: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                debug!("metrics: too many connections, closing one from {remote}");
                continue;
            };
            let home = home.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(stream, &home).await {
                    debug!("metrics request from {remote}: {e}");
                }
                drop(permit);
            });
        }
    });
    Ok(MetricsServer { addr, task })
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics,
    Health,
    NotFound,
    BadMethod,
    Malformed,
}

/// Parse the request line of a complete head.
fn parse_head(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return Request::Malformed;
    };
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Request::Malformed;
    };
    if parts.next().is_some() || !version.starts_with("HTTP/1.") {
        return Request::Malformed;
    }
    if method != "GET" && method != "HEAD" {
        return Request::BadMethod;
    }
    match target.split('?').next().unwrap_or("") {
        "/metrics" => Request::Metrics,
        "/healthz" => Request::Health,
        _ => Request::NotFound,
    }
}

/// Read a request head: bytes up to the blank line, at most [`MAX_REQUEST`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(buf));
        }
        if buf.len() >= MAX_REQUEST {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn answer(mut stream: TcpStream, home: &Home) -> std::io::Result<()> {
    let head = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await {
        Ok(r) => r?,
        Err(_) => return respond(&mut stream, 408, "text/plain", "request timeout\n", true).await,
    };
    let Some(head) = head else {
        return respond(&mut stream, 400, "text/plain", "bad request\n", true).await;
    };
    let head_only = head.starts_with(b"HEAD ");
    match parse_head(&head) {
        Request::Metrics => {
            let store = scrape_store(home).await;
            let body = render(store.as_ref());
            respond(
                &mut stream,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
                head_only,
            )
            .await
        }
        Request::Health => {
            let (code, body) = match health(home).await {
                Ok(()) => (200, "ok\n".to_owned()),
                Err(e) => (503, format!("unhealthy: {e}\n")),
            };
            respond(&mut stream, code, "text/plain", &body, head_only).await
        }
        Request::NotFound => {
            respond(&mut stream, 404, "text/plain", "not found\n", head_only).await
        }
        Request::BadMethod => {
            respond(
                &mut stream,
                405,
                "text/plain",
                "method not allowed\n",
                false,
            )
            .await
        }
        Request::Malformed => respond(&mut stream, 400, "text/plain", "bad request\n", false).await,
    }
}

/// The store gauges, or `None` (logged) if the store cannot be read in time.
async fn scrape_store(home: &Home) -> Option<StoreGauges> {
    let home = home.clone();
    let read = tokio::task::spawn_blocking(move || read_store(&home));
    match tokio::time::timeout(SCRAPE_TIMEOUT, read).await {
        Ok(Ok(Ok(g))) => Some(g),
        Ok(Ok(Err(e))) => {
            warn!("metrics: cannot read the store: {e}");
            None
        }
        Ok(Err(e)) => {
            warn!("metrics: the store reader failed: {e}");
            None
        }
        Err(_) => {
            warn!("metrics: reading the store timed out");
            None
        }
    }
}

/// Healthy = the store opens and answers a query.
async fn health(home: &Home) -> std::result::Result<(), String> {
    let home = home.clone();
    let check = tokio::task::spawn_blocking(move || -> Result<()> {
        let watch = Watch::open(&home.db_path())?;
        status::peer_count(&watch)?;
        Ok(())
    });
    match tokio::time::timeout(SCRAPE_TIMEOUT, check).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the store did not answer in time".into()),
    }
}

async fn respond(
    stream: &mut TcpStream,
    code: u16,
    content_type: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut msg = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if code == 405 {
        msg.push_str("Allow: GET, HEAD\r\n");
    }
    msg.push_str("\r\n");
    if !head_only {
        msg.push_str(body);
    }
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        stream.write_all(msg.as_bytes()).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "writing the response"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_parsed_strictly() {
        let cases: &[(&[u8], Request)] = &[
            (
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                Request::Metrics,
            ),
            (b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", Request::Metrics),
            (b"HEAD /healthz HTTP/1.1\r\n\r\n", Request::Health),
            (b"GET / HTTP/1.1\r\n\r\n", Request::NotFound),
            (b"POST /metrics HTTP/1.1\r\n\r\n", Request::BadMethod),
            (b"GET /metrics\r\n\r\n", Request::Malformed),
            (b"GET /metrics SPDY/3\r\n\r\n", Request::Malformed),
            (b"\xff\xfe\r\n\r\n", Request::Malformed),
        ];
        for (head, want) in cases {
            assert_eq!(
                &parse_head(head),
                want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn refusals_are_counted_by_code_never_by_text() {
        let rows = [
            ("not_origin", 2),
            ("org_not_origin", 1),
            ("from_the_future", 1),
        ];
        let got = grouped(
            rows.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
            &Refusal::CODES,
        );
        let want: BTreeMap<&str, i64> =
            [("not_origin", 2), ("org_not_origin", 1), ("other", 1)].into();
        assert_eq!(got, want);
        // Every code is a Prometheus-safe label value.
        for c in Refusal::CODES.iter().chain(&DeferReason::CODES) {
            assert!(
                c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{c}"
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let mut h = Histogram::default();
        for s in [0.001, 0.2, 0.2, 100.0] {
            h.observe(s);
        }
        assert_eq!(h.count, 4);
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets.iter().sum::<u64>(), 3, "100 s is only in +Inf");
    }
}
