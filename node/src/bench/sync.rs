//! The `sync` section of `amos bench`: live sync sessions between two
//! in-process nodes over loopback QUIC, through the same code `amos serve`
//! and `amos sync now` run (`net::session::drive_session` on both sides).
//!
//! Node A is the bench's loaded home, serving on 127.0.0.1 (an ephemeral
//! port); node B is a fresh home that dials it (`amos sync now`'s way). Four sessions are timed:
//! the initial sync (every fact of A to B, signed by A and verified by B),
//! an incremental sync after A changed some memories (facts move: no
//! digests are compared), an idle sync with nothing to move (its bytes must
//! not grow with the store; the digests are compared, each side scanning
//! what the other's policy admits, as the store changed since the last
//! comparison), and a second idle sync (the digests come from the cache:
//! the steady state of `sync auto`). Each is timed from dialling until both
//! sides finished the session.
//!
//! Boundary: this module only sets up the two homes and drives sessions; it
//! never talks to anything but its own loopback endpoint, and it never
//! bypasses verification or the import gate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::transport::{self, accept_incoming, with_timeout};
use amos_protocol::NodeId;
use serde::Serialize;
use tokio::runtime::Runtime;

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::events::SessionStats;
use crate::home::Home;
use crate::net::session as mesh;

/// How long the bench waits for one session end to end.
const SESSION_LIMIT: Duration = Duration::from_secs(600);

/// What the `sync` section of the bench report holds.
#[derive(Debug, Clone, Serialize)]
pub struct SyncReport {
    /// Initial sync of the whole store from A to the fresh B.
    pub initial_s: f64,
    /// Facts B received in the initial sync.
    pub initial_facts: u64,
    /// Frame bytes (both directions, length prefixes included) of the initial sync.
    pub initial_bytes: u64,
    /// Memories changed on A before the incremental sync.
    pub incremental_changed: usize,
    /// The incremental sync's wall time.
    pub incremental_ms: f64,
    /// Facts B received in the incremental sync.
    pub incremental_facts: u64,
    /// Whether the incremental sync compared digests: false when correct
    /// (facts moved).
    pub incremental_compared: bool,
    /// The first idle sync after the incremental one: digests computed.
    pub idle_ms: f64,
    /// Whether B's digest comparison in the first idle sync agreed (null: not
    /// compared); true when correct.
    pub idle_digest_agree: Option<bool>,
    /// A second idle sync: digests read from the cache.
    pub idle_cached_ms: f64,
    /// Facts moved (both directions) by the idle sync: 0 when correct.
    pub idle_facts: u64,
    /// Frame bytes (both directions) of the idle sync.
    pub idle_bytes: u64,
    /// Correctness: B's convergence digest equals A's after the initial sync
    /// and again after the incremental and idle ones.
    pub digests_equal: bool,
    /// Facts covered by A's digest (all of A's replicated facts).
    pub digest_facts: usize,
}

/// A loopback server for `home`, accepting only `peer`; runs until the
/// runtime shuts down.
fn serve_loopback(rt: &Runtime, home: &Home, peer: NodeId) -> Result<SocketAddr> {
    let identity = home.load_identity()?;
    let _guard = rt.enter();
    let endpoint = transport::server_endpoint(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &identity,
        Arc::new(move |id: &NodeId| *id == peer),
    )
    .map_err(|e| NodeError::Failed(format!("bench: cannot listen on loopback: {e}")))?;
    let addr = endpoint
        .local_addr()
        .map_err(NodeError::io("reading the bench listener's address"))?;
    let home = home.clone();
    rt.spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let home = home.clone();
            tokio::spawn(async move {
                let Ok((conn, peer)) =
                    with_timeout(SESSION_LIMIT, "the handshake", accept_incoming(incoming)).await
                else {
                    return;
                };
                let Ok((send, recv)) = conn.accept_bi().await else {
                    return;
                };
                let version = transport::negotiated(&conn).unwrap_or(1);
                match mesh::drive_session(home, peer, version, send, recv, None, None).await {
                    // The dialler closes once it has read our end of stream.
                    Ok(_) => {
                        let _ = tokio::time::timeout(SESSION_LIMIT, conn.closed()).await;
                    }
                    Err(e) => {
                        tracing::warn!("bench sync: the serving side failed: {e}");
                        conn.close(quinn::VarInt::from_u32(1), b"sync failed");
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// One session B → A over a fresh connection, as `amos sync now` runs it
/// (`net::session::drive_session` on the dialling side). Timed from creating the
/// endpoint until both sides finished the session; closing the connection
/// afterwards (quinn's draining period, about three probe timeouts) is not
/// part of the figure.
fn session(rt: &Runtime, b: &Home, a: NodeId, addr: SocketAddr) -> Result<(SessionStats, f64)> {
    let identity = b.load_identity()?;
    let failed = |e: &dyn std::fmt::Display| NodeError::Failed(format!("bench: sync failed: {e}"));
    rt.block_on(async {
        let t0 = Instant::now();
        let endpoint = transport::client_endpoint(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &identity,
            Arc::new(move |id: &NodeId| *id == a),
        )
        .map_err(|e| failed(&e))?;
        let conn = with_timeout(
            SESSION_LIMIT,
            "the handshake",
            transport::connect(&endpoint, addr, a),
        )
        .await
        .map_err(|e| failed(&e))?;
        let (send, recv) = conn.open_bi().await.map_err(|e| failed(&e))?;
        let version = transport::negotiated(&conn).unwrap_or(1);
        let result = mesh::drive_session(b.clone(), a, version, send, recv, None, None).await;
        let s = t0.elapsed().as_secs_f64();
        conn.close(quinn::VarInt::from_u32(u32::from(result.is_err())), b"done");
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
        Ok((result.map_err(|e| failed(&e))?, s))
    })
}

/// Run the sync section: `a` is the loaded node, `changes` the memories to
/// edit on A (owner, id) before the incremental sync; `dir` holds B's home.
pub fn run(
    a: &mut Node,
    changes: &[(String, String)],
    dir: &std::path::Path,
) -> Result<SyncReport> {
    let b_home = Home::new(dir.join("sync-peer"));
    Node::init(&b_home, Some("bench-sync-peer"))?;
    let mut b = Node::open(&b_home)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(NodeError::io("starting the async runtime"))?;
    let addr = serve_loopback(&rt, a.home(), b.node_id())?;
    a.peer_add(&b.node_id().to_string(), None, "full")?;
    b.peer_add(&a.node_id().to_string(), Some(&addr.to_string()), "full")?;
    let a_id = a.node_id();

    let (initial, initial_s) = session(&rt, &b_home, a_id, addr)?;
    let (digest_a, digest_facts) = a.digest(&[])?;
    let mut digests_equal = digest_a == b.digest(&[])?.0;

    for (owner, id) in changes {
        let who = a.requester(owner)?;
        let rec = a.get(&who, id)?;
        let text = format!("{} (revised)", rec.content);
        a.update(&who, id, &text)?;
    }
    let (incremental, incremental_s) = session(&rt, &b_home, a_id, addr)?;

    // The check of the digests waits until after the idle syncs: it would
    // fill the digest cache the first idle sync is meant to fill itself.
    let (idle, idle_s) = session(&rt, &b_home, a_id, addr)?;
    let (_, idle_cached_s) = session(&rt, &b_home, a_id, addr)?;
    digests_equal &= a.digest(&[])?.0 == b.digest(&[])?.0;
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(SyncReport {
        initial_s,
        initial_facts: initial.facts_in,
        initial_bytes: initial.bytes_in + initial.bytes_out,
        incremental_changed: changes.len(),
        incremental_ms: incremental_s * 1e3,
        incremental_facts: incremental.facts_in,
        incremental_compared: incremental.digest_agree.is_some(),
        idle_ms: idle_s * 1e3,
        idle_digest_agree: idle.digest_agree,
        idle_cached_ms: idle_cached_s * 1e3,
        idle_facts: idle.facts_in + idle.facts_out,
        idle_bytes: idle.bytes_in + idle.bytes_out,
        digests_equal,
        digest_facts,
    })
}
