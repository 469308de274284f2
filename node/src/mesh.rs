//! The mesh: sync sessions with peers over QUIC (DESIGN.md §7), the
//! `amos serve` listener and the `amos sync now|auto` pass.
//!
//! A session runs over one bidirectional QUIC stream (the dialling side opens
//! it); every frame carries one [`SyncMessage::V1`]. The protocol itself is
//! the sans-IO [`Session`] of `amos-sync`; this module only carries out its
//! actions:
//!
//! * the node work runs on blocking threads, each with its own [`Node`]
//!   opened from the [`Home`] (rusqlite is not `Sync`): one thread drives the
//!   session and applies the peer's batches, and a second one streams our
//!   export while the first keeps applying — so neither side can stall the
//!   other with a full pipe;
//! * two async tasks shuttle frames between the stream halves and bounded
//!   channels (backpressure, bounded memory); every wait on the peer has a
//!   timeout;
//! * every fact is verified before it is applied; any transport, protocol
//!   or verification error aborts the session, and the session guarantees
//!   no watermark moved past what committed.
//!
//! Completion: a side finishes its send stream only after its session
//! finished, so reading the peer's end of stream means the peer finished
//! too; the dialler then closes the connection.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amos_protocol::wire::{Epoch, SyncMessage, SyncV1, Watermark};
use amos_protocol::{NodeId, NodeIdentity};
use amos_sync::session::{Action, Event, Session, SessionError};
use amos_sync::transport::{
    self, TransportError, accept_incoming, read_frame, with_timeout, write_frame,
};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::node::Node;
use crate::replica::{self, PeerInfo};

/// Where `amos serve` listens by default (DESIGN.md §7: UDP 4747).
pub const DEFAULT_LISTEN: &str = "[::]:4747";
/// The longest wait for anything from the peer.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait for a handshake (an unreachable peer costs this much).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Facts per `Facts` message.
const EXPORT_BATCH: usize = 64;
/// Depth of the channels between the stream tasks and the node threads.
const CHANNEL_DEPTH: usize = 8;

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("a fact from the peer does not verify: {0}")]
    BadFact(String),
    #[error("the peer sent an undecodable message: {0}")]
    BadMessage(String),
    #[error("{0}")]
    Closed(String),
}

impl MeshError {
    /// How a pass reports this failure.
    fn result(&self) -> SyncResult {
        match self {
            MeshError::Transport(TransportError::Refused { .. })
            | MeshError::Session(SessionError::Refused(_)) => SyncResult::Refused,
            MeshError::Transport(TransportError::Unreachable { .. }) => SyncResult::Unreachable,
            _ => SyncResult::Failed,
        }
    }
}

/// What one session moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SessionStats {
    pub facts_in: u64,
    pub facts_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The outcome of syncing with one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncResult {
    Ok,
    Unreachable,
    Refused,
    Failed,
}

impl SyncResult {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncResult::Ok => "ok",
            SyncResult::Unreachable => "unreachable",
            SyncResult::Refused => "refused",
            SyncResult::Failed => "failed",
        }
    }
}

/// One peer's line in a sync pass report.
#[derive(Debug, Clone, Serialize)]
pub struct PeerOutcome {
    pub peer: String,
    pub name: String,
    pub addr: Option<String>,
    pub result: SyncResult,
    pub facts_in: u64,
    pub facts_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ---------------------------------------------------------------------------
// The session driver

/// What the session thread waits for.
enum Input {
    Msg(SyncV1),
    ExportDone(std::result::Result<(Watermark, u64), NodeError>),
    IoFailed(MeshError),
    Eof,
}

/// What the writer task sends, in order. The queue is unbounded but holds
/// at most a handful of items per session (hello, the export, done, finish):
/// the session thread never waits on the peer to send, only to receive, so
/// two sides busy applying each other's batches can never wait on each other.
/// The export's facts come through their own bounded channel (backpressure
/// on the export thread only).
enum Outgoing {
    Msg(SyncV1),
    /// Our export: write every batch from this channel until it closes.
    Facts(mpsc::Receiver<Vec<Vec<u8>>>),
    /// The session finished: end our send stream.
    Finish,
}

/// Run one sync session with the authenticated `peer` over a bidirectional
/// stream. On error the caller should close the connection.
pub async fn drive_session(
    home: Home,
    peer: NodeId,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) -> std::result::Result<SessionStats, MeshError> {
    let (in_tx, in_rx) = mpsc::channel::<Input>(CHANNEL_DEPTH);
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outgoing>();
    let bytes_in = Arc::new(AtomicU64::new(0));
    let bytes_out = Arc::new(AtomicU64::new(0));

    let writer = tokio::spawn({
        let bytes_out = bytes_out.clone();
        let in_tx = in_tx.clone();
        async move {
            let mut write = async |m: SyncV1| {
                let frame = SyncMessage::V1(m).encode();
                with_timeout(
                    PEER_TIMEOUT,
                    "sending to the peer",
                    write_frame(&mut send, &frame),
                )
                .await?;
                bytes_out.fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
                Ok::<(), TransportError>(())
            };
            let r: std::result::Result<bool, TransportError> = async {
                while let Some(o) = out_rx.recv().await {
                    match o {
                        Outgoing::Msg(m) => write(m).await?,
                        Outgoing::Facts(mut batches) => {
                            while let Some(facts) = batches.recv().await {
                                write(SyncV1::Facts { facts }).await?;
                            }
                        }
                        Outgoing::Finish => return Ok(true),
                    }
                }
                Ok(false)
            }
            .await;
            match r {
                Ok(true) => {
                    let _ = send.finish();
                    // Wait until the peer has the whole stream.
                    let _ = tokio::time::timeout(PEER_TIMEOUT, send.stopped()).await;
                    Ok(())
                }
                Ok(false) => Err(MeshError::Closed(
                    "the session ended without finishing".into(),
                )),
                Err(e) => {
                    let msg = e.to_string();
                    let _ = in_tx.send(Input::IoFailed(e.into())).await;
                    Err(MeshError::Closed(msg))
                }
            }
        }
    });
    let reader = tokio::spawn({
        let bytes_in = bytes_in.clone();
        let in_tx = in_tx.clone();
        async move {
            loop {
                let frame =
                    with_timeout(PEER_TIMEOUT, "waiting for the peer", read_frame(&mut recv)).await;
                match frame {
                    Ok(Some(bytes)) => {
                        bytes_in.fetch_add(bytes.len() as u64 + 4, Ordering::Relaxed);
                        let input = match SyncMessage::decode(&bytes) {
                            Ok(SyncMessage::V1(m)) => Input::Msg(m),
                            Err(e) => {
                                let e = MeshError::BadMessage(e.to_string());
                                let msg = e.to_string();
                                let _ = in_tx.send(Input::IoFailed(e)).await;
                                return Err(MeshError::BadMessage(msg));
                            }
                        };
                        // After the session finished nothing more may come;
                        // a closed channel just means it did.
                        let _ = in_tx.send(input).await;
                    }
                    Ok(None) => {
                        let _ = in_tx.send(Input::Eof).await;
                        return Ok(());
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        let _ = in_tx.send(Input::IoFailed(e.into())).await;
                        return Err(MeshError::Closed(msg));
                    }
                }
            }
        }
    });

    let abort = Arc::new(AtomicBool::new(false));
    let worker = tokio::task::spawn_blocking({
        let abort = abort.clone();
        move || {
            let r = session_thread(&home, peer, in_rx, in_tx, out_tx, abort.clone());
            if r.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            r
        }
    });
    let result = match worker.await {
        Ok(r) => r,
        Err(e) => Err(MeshError::Closed(format!("the session thread failed: {e}"))),
    };
    match result {
        Ok((facts_in, facts_out)) => {
            // Our last frames out, and the peer's end of stream (it finished too).
            match writer.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!("after the session finished: {e}"),
                Err(e) => debug!("writer task: {e}"),
            }
            match reader.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!("after the session finished: {e}"),
                Err(e) => debug!("reader task: {e}"),
            }
            Ok(SessionStats {
                facts_in,
                facts_out,
                bytes_in: bytes_in.load(Ordering::Relaxed),
                bytes_out: bytes_out.load(Ordering::Relaxed),
            })
        }
        Err(e) => {
            writer.abort();
            reader.abort();
            Err(e)
        }
    }
}

/// The blocking side of a session: returns (facts in, facts out).
fn session_thread(
    home: &Home,
    peer: NodeId,
    mut input: mpsc::Receiver<Input>,
    export_tx: mpsc::Sender<Input>,
    out: mpsc::UnboundedSender<Outgoing>,
    abort: Arc<AtomicBool>,
) -> std::result::Result<(u64, u64), MeshError> {
    let mut node = Node::open(home)?;
    let my_epoch = node.epoch_bytes()?;
    let (mut session, first) = Session::start(my_epoch, node.watermark_of(&peer)?);
    let mut todo: VecDeque<Action> = first.into();
    // Moved into the export thread: afterwards only the reader can feed us,
    // so its end (or abort) ends our wait.
    let mut export_tx = Some(export_tx);
    let (mut facts_in, mut facts_out) = (0u64, 0u64);
    let send = |m: Outgoing| {
        out.send(m)
            .map_err(|_| MeshError::Closed("the connection to the peer closed".into()))
    };
    loop {
        while let Some(action) = todo.pop_front() {
            match action {
                Action::Send(m) => send(Outgoing::Msg(m))?,
                Action::Export { since, peer_reset } => {
                    let tx = export_tx
                        .take()
                        .ok_or(MeshError::Session(SessionError::Protocol("second export")))?;
                    let (batches, rx) = mpsc::channel(CHANNEL_DEPTH);
                    send(Outgoing::Facts(rx))?;
                    spawn_export(
                        home.clone(),
                        peer,
                        my_epoch,
                        since,
                        peer_reset,
                        batches,
                        tx,
                        abort.clone(),
                    );
                }
                Action::Apply(facts) => {
                    facts_in += facts.len() as u64;
                    let verified = crate::verify::verify_facts(&facts)
                        .map_err(|e| MeshError::BadFact(e.to_string()))?;
                    let report = node.apply_from(&peer, verified)?;
                    debug!(?report, "applied a batch from {}", peer.short());
                }
                Action::SaveWatermark(w) => node.save_watermark(&peer, &w)?,
                Action::Finished => {
                    send(Outgoing::Finish)?;
                    return Ok((facts_in, facts_out));
                }
            }
        }
        match input.blocking_recv() {
            Some(Input::Msg(m)) => todo.extend(session.handle(Event::Received(m))?),
            Some(Input::ExportDone(Ok((upto, n)))) => {
                facts_out = n;
                todo.extend(session.handle(Event::ExportDone { upto })?);
            }
            Some(Input::ExportDone(Err(e))) => return Err(e.into()),
            Some(Input::IoFailed(e)) => return Err(e),
            Some(Input::Eof) | None => {
                return Err(MeshError::Closed(
                    "the peer ended the session before it finished".into(),
                ));
            }
        }
    }
}

/// Stream our facts for `peer` into `out` on a thread of its own (with its
/// own store connection), then report [`Input::ExportDone`].
#[allow(clippy::too_many_arguments)]
fn spawn_export(
    home: Home,
    peer: NodeId,
    epoch: Epoch,
    since: i64,
    peer_reset: bool,
    out: mpsc::Sender<Vec<Vec<u8>>>,
    done: mpsc::Sender<Input>,
    abort: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        let result = (|| {
            let node = Node::open(&home)?;
            let mut n = 0u64;
            let seq = node.export_for_session(&peer, since, peer_reset, EXPORT_BATCH, |facts| {
                if abort.load(Ordering::Relaxed) {
                    return Err(NodeError::Failed("the sync was aborted".into()));
                }
                n += facts.len() as u64;
                out.blocking_send(facts)
                    .map_err(|_| NodeError::Failed("the connection to the peer closed".into()))
            })?;
            Ok((Watermark { epoch, seq }, n))
        })();
        // Every batch is queued; closing the channel lets the writer move on
        // to what follows the export (done).
        drop(out);
        let _ = done.blocking_send(Input::ExportDone(result));
    });
}

// ---------------------------------------------------------------------------
// Dialling: one sync pass

/// Sync once with every registered peer that has an address (or only the
/// one named by `only`: NodeId, unique NodeId prefix, or name). Peers are
/// synced concurrently; one failing never stops the others. Outcomes come
/// back in the peers table's order.
pub async fn sync_pass(
    home: &Home,
    identity: Arc<NodeIdentity>,
    only: Option<&str>,
) -> Result<Vec<PeerOutcome>> {
    let peers = {
        let node = Node::open(home)?;
        node.peer_list()?
    };
    let chosen: Vec<PeerInfo> = match only {
        Some(want) => {
            let exact: Vec<&PeerInfo> = peers
                .iter()
                .filter(|p| p.node_id == want || p.name == want)
                .collect();
            let matches = if exact.is_empty() {
                peers
                    .iter()
                    .filter(|p| p.node_id.starts_with(want))
                    .collect()
            } else {
                exact
            };
            match matches.as_slice() {
                [p] if p.addr.is_some() => vec![(*p).clone()],
                [p] => {
                    return Err(NodeError::BadInput(format!(
                        "peer {} has no address (add one with `amos peers add ID ADDR --policy P`)",
                        p.node_id
                    )));
                }
                [] => return Err(NodeError::BadInput(format!("unknown peer {want:?}"))),
                _ => return Err(NodeError::BadInput(format!("ambiguous peer {want:?}"))),
            }
        }
        None => peers.into_iter().filter(|p| p.addr.is_some()).collect(),
    };
    let mut set = JoinSet::new();
    for (i, p) in chosen.into_iter().enumerate() {
        let home = home.clone();
        let identity = identity.clone();
        set.spawn(async move { (i, sync_with(&home, &identity, &p).await) });
    }
    let mut outcomes = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(o) => outcomes.push(o),
            Err(e) => return Err(NodeError::Failed(format!("a sync task failed: {e}"))),
        }
    }
    outcomes.sort_by_key(|(i, _)| *i);
    Ok(outcomes.into_iter().map(|(_, o)| o).collect())
}

/// Dial one peer and run a session; never fails, reports instead.
pub async fn sync_with(home: &Home, identity: &NodeIdentity, peer: &PeerInfo) -> PeerOutcome {
    let started = Instant::now();
    let r = dial_and_sync(home, identity, peer).await;
    let ms = started.elapsed().as_millis() as u64;
    let mut o = PeerOutcome {
        peer: peer.node_id.clone(),
        name: peer.name.clone(),
        addr: peer.addr.clone(),
        result: SyncResult::Ok,
        facts_in: 0,
        facts_out: 0,
        bytes_in: 0,
        bytes_out: 0,
        ms,
        error: None,
    };
    match r {
        Ok(s) => {
            info!(
                "synced with {}: {} facts in, {} out, {} ms",
                peer.node_id, s.facts_in, s.facts_out, ms
            );
            o.facts_in = s.facts_in;
            o.facts_out = s.facts_out;
            o.bytes_in = s.bytes_in;
            o.bytes_out = s.bytes_out;
        }
        Err((result, e)) => {
            warn!("sync with {}: {} ({e})", peer.node_id, result.as_str());
            o.result = result;
            o.error = Some(e);
        }
    }
    o
}

/// The endpoint's bind address for dialling `addr`.
fn bind_for(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_loopback() => SocketAddr::from(([127, 0, 0, 1], 0)),
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    }
}

async fn dial_and_sync(
    home: &Home,
    identity: &NodeIdentity,
    peer: &PeerInfo,
) -> std::result::Result<SessionStats, (SyncResult, String)> {
    let failed = |e: &dyn std::fmt::Display| (SyncResult::Failed, e.to_string());
    let unreachable = |e: &dyn std::fmt::Display| (SyncResult::Unreachable, e.to_string());
    let expected: NodeId = peer.node_id.parse().map_err(|e| failed(&e))?;
    let addr_text = peer
        .addr
        .as_deref()
        .ok_or_else(|| failed(&"the peer has no address"))?;
    let addr = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host(addr_text)).await
    {
        Ok(Ok(mut addrs)) => addrs
            .next()
            .ok_or_else(|| unreachable(&format!("{addr_text} resolves to no address")))?,
        Ok(Err(e)) => return Err(unreachable(&format!("cannot resolve {addr_text}: {e}"))),
        Err(_) => return Err(unreachable(&format!("resolving {addr_text} timed out"))),
    };
    let endpoint = transport::client_endpoint(
        bind_for(addr),
        identity,
        Arc::new(move |id: &NodeId| *id == expected),
    )
    .map_err(|e| failed(&e))?;
    let conn = match with_timeout(
        CONNECT_TIMEOUT,
        "the handshake",
        transport::connect(&endpoint, addr, expected),
    )
    .await
    {
        Ok(c) => c,
        Err(e @ TransportError::Refused { .. }) => {
            return Err((SyncResult::Refused, e.to_string()));
        }
        Err(e @ TransportError::Config(_)) => return Err(failed(&e)),
        Err(e) => return Err(unreachable(&e)),
    };
    let stream = with_timeout(PEER_TIMEOUT, "opening a stream", async {
        conn.open_bi()
            .await
            .map_err(|e| TransportError::Closed(e.to_string()))
    })
    .await;
    let result = match stream {
        Ok((send, recv)) => drive_session(home.clone(), expected, send, recv).await,
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(stats) => {
            conn.close(quinn::VarInt::from_u32(0), b"done");
            let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
            Ok(stats)
        }
        Err(e) => {
            conn.close(quinn::VarInt::from_u32(1), b"sync failed");
            let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
            Err((e.result(), e.to_string()))
        }
    }
}

/// Run [`sync_pass`] on a fresh runtime (for the CLI).
pub fn sync_pass_blocking(home: &Home, only: Option<&str>) -> Result<Vec<PeerOutcome>> {
    let identity = Arc::new(home.load_identity()?);
    runtime()?.block_on(sync_pass(home, identity, only))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(NodeError::io("starting the async runtime"))
}

// ---------------------------------------------------------------------------
// Serving

/// `amos serve` settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub sync_every: Option<Duration>,
    pub mdns: bool,
}

/// Run the node until SIGINT/SIGTERM: accept sessions from registered peers
/// (checked against the current peers table on every handshake), and with
/// `sync_every` run a sync pass periodically.
pub fn serve(home: &Home, opts: &ServeOptions) -> Result<()> {
    let rt = runtime()?;
    let r = rt.block_on(serve_async(home, opts));
    rt.shutdown_timeout(Duration::from_secs(5));
    r
}

async fn serve_async(home: &Home, opts: &ServeOptions) -> Result<()> {
    let identity = Arc::new(home.load_identity()?);
    // The acceptor's own connection: the peers table as it is at each handshake.
    let conn = rusqlite::Connection::open(home.db_path())?;
    conn.busy_timeout(Duration::from_secs(2))?;
    let conn = Mutex::new(conn);
    let acceptor = move |id: &NodeId| {
        let Ok(conn) = conn.lock() else {
            return false;
        };
        match replica::peer_policy(&conn, id) {
            Ok(Some(_)) => true,
            Ok(None) => {
                info!("refused a connection from {id}: not a registered peer");
                false
            }
            Err(e) => {
                warn!("refused a connection from {id}: cannot read the peers table: {e}");
                false
            }
        }
    };
    let endpoint = transport::server_endpoint(opts.listen, &identity, Arc::new(acceptor))
        .map_err(|e| NodeError::Failed(format!("cannot listen on {}: {e}", opts.listen)))?;
    let local = endpoint
        .local_addr()
        .map_err(NodeError::io("reading the listening address"))?;
    info!("node {} listening on {local}", identity.node_id());
    if opts.mdns {
        info!("mDNS discovery is not implemented yet; not advertising");
    } else {
        info!("mDNS disabled (--no-mdns)");
    }

    let mut sessions = JoinSet::new();
    let pass_running = Arc::new(AtomicBool::new(false));
    let mut ticker = opts.sync_every.map(|every| {
        info!(
            "syncing with every peer every {}",
            humantime::format_duration(every)
        );
        tokio::time::interval_at(tokio::time::Instant::now() + every, every)
    });
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => {
                info!("shutting down");
                break;
            }
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let home = home.clone();
                sessions.spawn(serve_connection(home, incoming));
            }
            _ = tick(&mut ticker) => {
                if !pass_running.swap(true, Ordering::SeqCst) {
                    let home = home.clone();
                    let identity = identity.clone();
                    let running = pass_running.clone();
                    sessions.spawn(async move {
                        match sync_pass(&home, identity, None).await {
                            Ok(outcomes) => {
                                for o in outcomes {
                                    info!("periodic sync with {}: {}", o.peer, o.result.as_str());
                                }
                            }
                            Err(e) => warn!("periodic sync: {e}"),
                        }
                        running.store(false, Ordering::SeqCst);
                    });
                }
            }
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
    endpoint.close(quinn::VarInt::from_u32(0), b"shutting down");
    let drain = async { while sessions.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        sessions.abort_all();
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    info!("stopped");
    Ok(())
}

/// One incoming connection: handshake, one session, close.
async fn serve_connection(home: Home, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let (conn, peer) =
        match with_timeout(CONNECT_TIMEOUT, "the handshake", accept_incoming(incoming)).await {
            Ok(c) => c,
            Err(e) => {
                info!("connection from {remote} not accepted: {e}");
                return;
            }
        };
    let stream = with_timeout(PEER_TIMEOUT, "waiting for a stream", async {
        conn.accept_bi()
            .await
            .map_err(|e| TransportError::Closed(e.to_string()))
    })
    .await;
    let (send, recv) = match stream {
        Ok(s) => s,
        Err(e) => {
            info!("{peer} at {remote} opened no session: {e}");
            conn.close(quinn::VarInt::from_u32(1), b"no session");
            return;
        }
    };
    let started = Instant::now();
    match drive_session(home, peer, send, recv).await {
        Ok(s) => {
            info!(
                "session with {peer} at {remote}: {} facts in, {} out, {} ms",
                s.facts_in,
                s.facts_out,
                started.elapsed().as_millis()
            );
            // The dialler closes once it has read our end of stream.
            let _ = tokio::time::timeout(PEER_TIMEOUT, conn.closed()).await;
        }
        Err(e) => {
            warn!("session with {peer} at {remote} failed: {e}");
            conn.close(quinn::VarInt::from_u32(1), b"sync failed");
        }
    }
}

/// The next tick, or never without a ticker.
async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Resolves on SIGINT or (on unix) SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                warn!("cannot watch SIGTERM: {e}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
