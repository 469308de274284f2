//! `/node`: this node at a glance — NodeId (and its QR code for pairing),
//! version, uptime, store and index size, index lag, the encoder's pending
//! memories, clock health, mesh key, the listener, metrics and console
//! addresses.
//!
//! Must never: change anything (it reads `Node::status_peek`, which leaves
//! the "new refusals" mark of `amos status` alone).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;

use super::App;
use super::i18n::Locale;
use super::page::{Chrome, PageError, html, with_node};
use crate::api::pairing::recorded_listen;

#[derive(Template)]
#[template(path = "console/node.html")]
struct NodePage {
    chrome: Chrome,
    node_id: String,
    name: String,
    version: &'static str,
    uptime: String,
    home: String,
    store_bytes: String,
    index_bytes: String,
    memories: i64,
    agents: i64,
    teams: i64,
    projects: i64,
    peers: usize,
    index_lag: i64,
    /// The encoder's name (empty: off) and its pending memories.
    encoder: String,
    encoder_pending: u64,
    clock: String,
    clock_ok: bool,
    quarantined: usize,
    refusals: i64,
    mesh_key: bool,
    listener: String,
    metrics: String,
    console: String,
    qr: String,
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
) -> Result<Response, PageError> {
    let page = with_node(&app, move |node, app| {
        let s = node.status_peek()?;
        let ahead = crate::ops::doctor::clock_ahead_s(node)?;
        let home = node.home().clone();
        let listener = match &app.serving {
            Some(s) => Some(s.listen.to_string()),
            None => {
                recorded_listen(&home).map(|a| format!("{a} ({})", loc.lang.t("node.last_serve")))
            }
        };
        Ok(NodePage {
            chrome: Chrome::new(app, node, "node", "", &loc)?,
            qr: super::qr::svg(&s.node_id).unwrap_or_default(),
            node_id: s.node_id,
            name: s.name,
            version: env!("CARGO_PKG_VERSION"),
            uptime: humantime::format_duration(std::time::Duration::from_secs(
                app.started.elapsed().as_secs(),
            ))
            .to_string(),
            home: s.home,
            store_bytes: bytes(db_bytes(&home)),
            index_bytes: bytes(dir_bytes(&home.index_dir())),
            memories: s.memories,
            agents: s.agents,
            teams: s.teams,
            projects: s.projects,
            peers: s.peers.len(),
            index_lag: s.index_lag,
            encoder_pending: s.encoder.as_ref().map_or(0, |e| e.progress.pending),
            encoder: s.encoder.map(|e| e.model).unwrap_or_default(),
            clock_ok: ahead.is_none(),
            clock: match ahead {
                None => loc.lang.t("node.clock_ok").into(),
                Some(s) => format!("{}: {s} s", loc.lang.t("node.clock_ahead")),
            },
            quarantined: s.quarantined.len(),
            refusals: s.audit_refusals,
            mesh_key: node.mesh_key()?.is_some(),
            listener: listener.unwrap_or_else(|| loc.lang.t("node.not_serving").into()),
            metrics: app
                .serving
                .as_ref()
                .and_then(|s| s.metrics)
                .map_or_else(|| loc.lang.t("dash.encoder_off").into(), |m| m.to_string()),
            console: app.addr.to_string(),
        })
    })
    .await?;
    html(&page)
}

fn db_bytes(home: &crate::home::Home) -> u64 {
    let db = home.db_path();
    let mut total = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    for ext in ["-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(ext);
        total += std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    }
    total
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
