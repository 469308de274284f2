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
//!   no watermark moved past what committed;
//! * a dialler may pass a [`SyncObserver`] that hears of every batch applied
//!   and sent (the CLI's progress line); the sans-IO session knows nothing
//!   of it.
//!
//! Completion: a side finishes its send stream only after its session
//! finished, so reading the peer's end of stream means the peer finished
//! too; the dialler then closes the connection.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::net::transport::{
    self, TransportError, accept_incoming, read_frame, with_timeout, write_frame,
};
use amos_protocol::wire::{Epoch, SyncMessage, SyncV1, Watermark};
use amos_protocol::{NodeId, NodeIdentity};
use amos_sync::session::{Action, Event, Session, SessionError};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::events::{self, Observer, PeerOutcome, Role, SessionStats, SyncEvent, SyncResult};
use crate::home::Home;
use crate::node::Node;
use crate::pairing::{self, JoinReport, MeshKeyOutcome, Welcome};
use crate::replica::{self, PeerInfo};

/// Where `amos serve` listens by default (DESIGN.md §7: UDP 4747).
pub const DEFAULT_LISTEN: &str = "[::]:4747";
/// The longest wait for anything from the peer.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait for the peer's end of stream after its `Done` (it
/// comes once the peer has received our whole export).
const AFTER_DONE_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
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
///
/// `first` is a message the caller already read from `recv` (the server
/// reads one to tell a sync from a pairing); `observer` hears of every batch
/// applied and sent. The peer's listen addresses are not recorded: a
/// dialler reached the peer at the address it has.
pub async fn drive_session(
    home: Home,
    peer: NodeId,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    first: Option<SyncV1>,
    observer: Option<Observer>,
) -> std::result::Result<SessionStats, MeshError> {
    drive(home, peer, send, recv, first, observer, None).await
}

/// Like [`drive_session`], for a session the registered `peer` opened from
/// `remote`: where it says it serves is recorded as its address
/// ([`learned_addr`]).
pub async fn drive_accepted_session(
    home: Home,
    peer: NodeId,
    remote: SocketAddr,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    first: SyncV1,
) -> std::result::Result<SessionStats, MeshError> {
    drive(home, peer, send, recv, Some(first), None, Some(remote)).await
}

/// Where to dial a peer that says it serves at `listen` and was seen
/// connecting from `remote`: an unspecified IP (`0.0.0.0`, `::`) becomes
/// `remote`'s IP with the announced port; a loopback address is of no use
/// unless the peer came over loopback; multicast and broadcast never are.
/// An address on the IP the peer came from is preferred (that one routes);
/// otherwise the first usable one, in the peer's order.
pub fn learned_addr(listen: &[SocketAddr], remote: SocketAddr) -> Option<SocketAddr> {
    let seen = remote.ip().to_canonical();
    let usable = |a: &SocketAddr| -> Option<SocketAddr> {
        let ip = a.ip().to_canonical();
        if a.port() == 0 || ip.is_multicast() {
            return None;
        }
        if ip.is_unspecified() {
            return Some(SocketAddr::new(seen, a.port()));
        }
        let broadcast = matches!(ip, std::net::IpAddr::V4(v4) if v4.is_broadcast());
        if broadcast || (ip.is_loopback() && !seen.is_loopback()) {
            return None;
        }
        Some(SocketAddr::new(ip, a.port()))
    };
    let candidates: Vec<SocketAddr> = listen.iter().filter_map(usable).collect();
    candidates
        .iter()
        .find(|a| a.ip() == seen)
        .or(candidates.first())
        .copied()
}

async fn drive(
    home: Home,
    peer: NodeId,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    first: Option<SyncV1>,
    observer: Option<Observer>,
    learn_from: Option<SocketAddr>,
) -> std::result::Result<SessionStats, MeshError> {
    let (in_tx, in_rx) = mpsc::channel::<Input>(CHANNEL_DEPTH);
    if let Some(m) = first {
        // The channel is empty and nothing reads it yet: this cannot wait.
        let _ = in_tx.send(Input::Msg(m)).await;
    }
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
            // Once the peer said Done, all that is left to read is its end of
            // stream, which it sends only when it has received all of our
            // export — however long that takes. The per-read timeout would
            // cut a long export short; a dead peer still ends the wait
            // through the connection's idle timeout.
            let mut peer_done = false;
            loop {
                let limit = if peer_done {
                    AFTER_DONE_TIMEOUT
                } else {
                    PEER_TIMEOUT
                };
                let frame =
                    with_timeout(limit, "waiting for the peer", read_frame(&mut recv)).await;
                match frame {
                    Ok(Some(bytes)) => {
                        bytes_in.fetch_add(bytes.len() as u64 + 4, Ordering::Relaxed);
                        let input = match SyncMessage::decode(&bytes) {
                            Ok(SyncMessage::V1(m)) => {
                                peer_done |= matches!(m, SyncV1::Done { .. });
                                Input::Msg(m)
                            }
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
            let r = session_thread(
                &home,
                peer,
                in_rx,
                in_tx,
                out_tx,
                abort.clone(),
                observer,
                learn_from,
            );
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
/// `learn_from`: the peer dialled us from there; record where it serves.
#[allow(clippy::too_many_arguments)]
fn session_thread(
    home: &Home,
    peer: NodeId,
    mut input: mpsc::Receiver<Input>,
    export_tx: mpsc::Sender<Input>,
    out: mpsc::UnboundedSender<Outgoing>,
    abort: Arc<AtomicBool>,
    observer: Option<Observer>,
    learn_from: Option<SocketAddr>,
) -> std::result::Result<(u64, u64), MeshError> {
    let mut node = Node::open(home)?;
    let my_epoch = node.epoch_bytes()?;
    // Where `amos serve` last said it listens (none if it never served).
    let listen: Vec<SocketAddr> = pairing::recorded_listen(home).into_iter().collect();
    let (mut session, first) = Session::start(my_epoch, node.watermark_of(&peer)?, &listen);
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
                        observer.clone(),
                    );
                }
                Action::Apply(facts) => {
                    let n = facts.len() as u64;
                    facts_in += n;
                    let verified = amos_protocol::verify_all(&facts)
                        .map_err(|e| MeshError::BadFact(e.to_string()))?;
                    let report = node.apply_from(&peer, verified)?;
                    events::emit(SyncEvent::Applied(&report));
                    if let Some(o) = &observer {
                        o.applied(&peer, n, &report);
                    }
                    debug!(?report, "applied a batch from {}", peer.short());
                }
                Action::PeerListens(addrs) => match learn_from {
                    // Only the peer the handshake authenticated, only if
                    // registered (never adds one), never its policy.
                    Some(remote) => match learned_addr(&addrs, remote) {
                        Some(a) => {
                            if node.peer_learn_addr(&peer, a)? {
                                info!("{} serves at {a}: recorded", peer.short());
                            }
                        }
                        None => debug!("{} serves nowhere we can dial: {addrs:?}", peer.short()),
                    },
                    None => debug!("{} serves at {addrs:?}", peer.short()),
                },
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
    observer: Option<Observer>,
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
                if let Some(o) = &observer {
                    o.sent(&peer, facts.len() as u64);
                }
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
    observer: Option<Observer>,
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
    Ok(sync_peers(home, identity, chosen, observer).await)
}

/// Sync with each of `peers` concurrently; outcomes in the same order.
pub async fn sync_peers(
    home: &Home,
    identity: Arc<NodeIdentity>,
    peers: Vec<PeerInfo>,
    observer: Option<Observer>,
) -> Vec<PeerOutcome> {
    let mut set = JoinSet::new();
    for (i, p) in peers.into_iter().enumerate() {
        let home = home.clone();
        let identity = identity.clone();
        let observer = observer.clone();
        set.spawn(async move { (i, sync_with(&home, &identity, &p, observer).await) });
    }
    let mut outcomes = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(o) => outcomes.push(o),
            // sync_with never fails; a panicked task is a bug, reported.
            Err(e) => warn!("a sync task failed: {e}"),
        }
    }
    outcomes.sort_by_key(|(i, _)| *i);
    outcomes.into_iter().map(|(_, o)| o).collect()
}

/// The periodic loop's pacing (`amos serve --sync-every`): each pass after
/// the period ±10 % (so a fleet started together does not dial in step),
/// and a peer that failed `n` passes in a row is tried only every `2^n`
/// periods (at most 32) until it answers again.
#[derive(Debug, Default)]
pub struct Pacing {
    failing: std::collections::HashMap<String, (u32, u64)>,
}

impl Pacing {
    /// The wait before the next pass; `unit` in [0, 1) is the random draw.
    pub fn next_wait(period: Duration, unit: f64) -> Duration {
        period.mul_f64(0.9 + 0.2 * unit.clamp(0.0, 1.0))
    }

    /// Whether `peer` is due for a sync at `now_ms`.
    pub fn due(&self, peer: &str, now_ms: u64) -> bool {
        self.failing
            .get(peer)
            .is_none_or(|&(_, next_ms)| now_ms >= next_ms)
    }

    /// Record a pass's outcome for `peer`.
    pub fn record(&mut self, peer: &str, result: SyncResult, now_ms: u64, period: Duration) {
        if result == SyncResult::Ok {
            self.failing.remove(peer);
            return;
        }
        let n = self
            .failing
            .get(peer)
            .map_or(1, |&(n, _)| n.saturating_add(1));
        let periods = 1u64 << n.min(5);
        let wait = (period.as_millis() as u64).saturating_mul(periods);
        // Due half a period early, so the pass that many periods on (give or
        // take the jitter) tries it.
        let half = period.as_millis() as u64 / 2;
        let next = now_ms.saturating_add(wait).saturating_sub(half);
        self.failing.insert(peer.to_owned(), (n, next));
    }
}

/// One periodic pass: every due peer with an address, outcomes recorded in
/// `pacing`.
async fn periodic_pass(
    home: &Home,
    identity: Arc<NodeIdentity>,
    pacing: &Mutex<Pacing>,
    period: Duration,
) -> Result<Vec<PeerOutcome>> {
    let peers = {
        let home = home.clone();
        tokio::task::spawn_blocking(move || Node::open(&home)?.peer_list())
            .await
            .map_err(|e| NodeError::Failed(format!("listing peers: {e}")))??
    };
    let now = SystemClock.now_ms();
    let due: Vec<PeerInfo> = {
        let p = pacing.lock().unwrap_or_else(|e| e.into_inner());
        peers
            .into_iter()
            .filter(|x| x.addr.is_some() && p.due(&x.node_id, now))
            .collect()
    };
    let outcomes = sync_peers(home, identity, due, None).await;
    let now = SystemClock.now_ms();
    let mut p = pacing.lock().unwrap_or_else(|e| e.into_inner());
    for o in &outcomes {
        p.record(&o.peer, o.result, now, period);
    }
    Ok(outcomes)
}

/// Dial one peer and run a session; never fails, reports instead.
pub async fn sync_with(
    home: &Home,
    identity: &NodeIdentity,
    peer: &PeerInfo,
    observer: Option<Observer>,
) -> PeerOutcome {
    let started = Instant::now();
    let r = dial_and_sync(home, identity, peer, observer).await;
    let elapsed = started.elapsed();
    let ms = elapsed.as_millis() as u64;
    events::emit(SyncEvent::Finished {
        peer: &peer.node_id,
        role: Role::Dial,
        result: r
            .as_ref()
            .map_or_else(|(result, _)| *result, |_| SyncResult::Ok),
        elapsed,
        stats: r.as_ref().ok(),
    });
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
    record_result(home, &peer.node_id, o.result).await;
    o
}

/// Note the outcome in the peers table (`amos peers list`, `amos status`);
/// a failure to note it is logged, never fatal to the pass.
async fn record_result(home: &Home, peer: &str, result: SyncResult) {
    let Ok(id) = peer.parse::<NodeId>() else {
        return;
    };
    let home = home.clone();
    let r = tokio::task::spawn_blocking(move || {
        Node::open(&home)?.peer_record_result(&id, result.as_str())
    })
    .await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!("cannot record the sync result for {peer}: {e}"),
        Err(e) => warn!("cannot record the sync result for {peer}: {e}"),
    }
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
    observer: Option<Observer>,
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
            .map_err(transport::from_connection_error)
    })
    .await;
    let result = match stream {
        Ok((send, recv)) => drive_session(home.clone(), expected, send, recv, None, observer).await,
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

/// What a handshake-only probe of a node found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// It answered with the expected key and accepted ours.
    Accepted,
    /// It answered with the expected key but refused ours.
    RefusedUs,
    /// No answer, or another key answered.
    Unreachable,
}

/// Handshake with `expected` at `addr` and close at once (no session):
/// for `amos doctor`.
pub fn probe_blocking(home: &Home, targets: &[(NodeId, String)]) -> Result<Vec<Probe>> {
    let identity = home.load_identity()?;
    runtime()?.block_on(async {
        let mut out = Vec::new();
        for (expected, addr_text) in targets {
            let expected = *expected;
            let addr = match tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host(addr_text.as_str()),
            )
            .await
            {
                Ok(Ok(mut a)) => a.next(),
                _ => None,
            };
            let Some(addr) = addr else {
                out.push(Probe::Unreachable);
                continue;
            };
            let Ok(endpoint) = transport::client_endpoint(
                bind_for(addr),
                &identity,
                Arc::new(move |id: &NodeId| *id == expected),
            ) else {
                out.push(Probe::Unreachable);
                continue;
            };
            let r = with_timeout(
                Duration::from_secs(2),
                "the handshake",
                transport::connect(&endpoint, addr, expected),
            )
            .await;
            out.push(match r {
                Ok(conn) => {
                    // TLS 1.3: the server's verdict on our key may come only
                    // after the handshake; give it a moment to say no.
                    let refused = tokio::time::timeout(Duration::from_millis(300), conn.closed())
                        .await
                        .is_ok_and(|e| {
                            matches!(
                                transport::from_connection_error(e),
                                TransportError::Refused { .. }
                            )
                        });
                    conn.close(quinn::VarInt::from_u32(0), b"probe");
                    if refused {
                        Probe::RefusedUs
                    } else {
                        Probe::Accepted
                    }
                }
                Err(TransportError::Refused {
                    by: transport::RefusedBy::Peer,
                    ..
                }) => Probe::RefusedUs,
                Err(_) => Probe::Unreachable,
            });
            let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        }
        Ok(out)
    })
}

/// Run [`sync_pass`] on a fresh runtime (for the CLI).
pub fn sync_pass_blocking(
    home: &Home,
    only: Option<&str>,
    observer: Option<Observer>,
) -> Result<Vec<PeerOutcome>> {
    let identity = Arc::new(home.load_identity()?);
    runtime()?.block_on(sync_pass(home, identity, only, observer))
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
    /// Serve `/metrics` and `/healthz` over HTTP here.
    pub metrics: Option<SocketAddr>,
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
    let fleet = crate::fleet::apply(&mut Node::open(home)?, home)?;
    for change in &fleet.changes {
        info!("agents.toml: {change}");
    }
    // The acceptor's own connection: the peers table as it is at each handshake.
    let conn = rusqlite::Connection::open(home.db_path())?;
    conn.busy_timeout(Duration::from_secs(2))?;
    let conn = Mutex::new(conn);
    let clock = SystemClock;
    let acceptor = move |id: &NodeId| {
        let Ok(conn) = conn.lock() else {
            return false;
        };
        match replica::peer_policy(&conn, id) {
            Ok(Some(_)) => true,
            // A stranger may only pair, and only while an invite is pending;
            // serve_connection lets such a connection do nothing else.
            Ok(None) => match pairing::invites_pending(&conn, clock.now_ms()) {
                Ok(true) => {
                    info!("accepting a handshake from {id}: not a peer, may only pair");
                    true
                }
                Ok(false) => {
                    info!("refused a connection from {id}: not a registered peer");
                    false
                }
                Err(e) => {
                    warn!("refused a connection from {id}: cannot read the invites: {e}");
                    false
                }
            },
            Err(e) => {
                warn!("refused a connection from {id}: cannot read the peers table: {e}");
                false
            }
        }
    };
    // Bound before "listening on" is logged: ready means both are up.
    let _metrics = match opts.metrics {
        Some(addr) => Some(crate::metrics::start(home, addr).await?),
        None => None,
    };
    let endpoint = transport::server_endpoint(opts.listen, &identity, Arc::new(acceptor))
        .map_err(|e| NodeError::Failed(format!("cannot listen on {}: {e}", opts.listen)))?;
    let local = endpoint
        .local_addr()
        .map_err(NodeError::io("reading the listening address"))?;
    // Recorded before "listening" is logged: whoever waits for that line
    // can make a pairing code at once.
    if let Err(e) = pairing::record_listen(home, local) {
        warn!("cannot record the listening address for pairing codes: {e}");
    }
    info!("node {} listening on {local}", identity.node_id());
    let discovery = if opts.mdns {
        crate::discovery::Discovery::start(home, local)
            .inspect_err(|e| warn!("mDNS discovery is off: {e}"))
            .ok()
    } else {
        info!("mDNS disabled (--no-mdns)");
        None
    };

    let mut sessions = JoinSet::new();
    let pass_running = Arc::new(AtomicBool::new(false));
    if let Some(every) = opts.sync_every {
        info!(
            "syncing with every peer every {} (±10 %, backing off from dead peers)",
            humantime::format_duration(every)
        );
    }
    let pacing = Arc::new(Mutex::new(Pacing::default()));
    let jitter = || rand::random::<f64>();
    let next_pass = tokio::time::sleep(
        opts.sync_every
            .map(|every| Pacing::next_wait(every, jitter()))
            .unwrap_or(Duration::MAX / 4),
    );
    tokio::pin!(next_pass);
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
            _ = &mut next_pass, if opts.sync_every.is_some() => {
                let every = opts.sync_every.unwrap_or(Duration::from_secs(30));
                next_pass
                    .as_mut()
                    .reset(tokio::time::Instant::now() + Pacing::next_wait(every, jitter()));
                if !pass_running.swap(true, Ordering::SeqCst) {
                    let home = home.clone();
                    let identity = identity.clone();
                    let running = pass_running.clone();
                    let pacing = pacing.clone();
                    sessions.spawn(async move {
                        match periodic_pass(&home, identity, &pacing, every).await {
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
    if let Some(d) = discovery {
        let _ = tokio::task::spawn_blocking(move || d.stop()).await;
    }
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
            .map_err(transport::from_connection_error)
    })
    .await;
    let (mut send, mut recv) = match stream {
        Ok(s) => s,
        Err(e) => {
            info!("{peer} at {remote} opened no session: {e}");
            conn.close(quinn::VarInt::from_u32(1), b"no session");
            return;
        }
    };
    // The first message tells a pairing from a sync.
    let first = match with_timeout(PEER_TIMEOUT, "waiting for the peer", read_frame(&mut recv))
        .await
        .map_err(MeshError::from)
        .and_then(|f| f.ok_or_else(|| MeshError::Closed("the peer sent nothing".into())))
        .and_then(|b| SyncMessage::decode(&b).map_err(|e| MeshError::BadMessage(e.to_string())))
    {
        Ok(SyncMessage::V1(m)) => m,
        Err(e) => {
            warn!("session with {peer} at {remote} failed: {e}");
            conn.close(quinn::VarInt::from_u32(1), b"sync failed");
            return;
        }
    };
    if let SyncV1::Join {
        invite,
        proof,
        name,
        listen_port,
        agent,
    } = first
    {
        let join = JoinRequest {
            invite,
            proof,
            name,
            addr: listen_port.map(|p| SocketAddr::new(remote.ip(), p).to_string()),
            agent,
        };
        answer_join(home, &conn, peer, join, send).await;
        return;
    }
    let registered = tokio::task::spawn_blocking({
        let home = home.clone();
        move || Node::open(&home).and_then(|n| n.peer_policy(&peer))
    })
    .await;
    if !matches!(registered, Ok(Ok(Some(_)))) {
        info!("{peer} at {remote} is not a registered peer: no sync");
        let _ = write_frame(
            &mut send,
            &SyncMessage::V1(SyncV1::Refused {
                reason: "not a registered peer".into(),
            })
            .encode(),
        )
        .await;
        let _ = send.finish();
        let _ = tokio::time::timeout(PEER_TIMEOUT, conn.closed()).await;
        return;
    }
    let started = Instant::now();
    let session = drive_accepted_session(home, peer, remote, send, recv, first).await;
    events::emit(SyncEvent::Finished {
        peer: &peer.to_string(),
        role: Role::Accept,
        result: session
            .as_ref()
            .map_or_else(|e| e.result(), |_| SyncResult::Ok),
        elapsed: started.elapsed(),
        stats: session.as_ref().ok(),
    });
    match session {
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

// ---------------------------------------------------------------------------
// Pairing over the wire (DESIGN.md §7)
//
// The joiner dials the inviter named in the code (its key is the only one it
// accepts), opens one stream and sends `Join`: the invite's public id and a
// proof of the secret bound to this TLS session's exported keying material
// (`amos_protocol::pairing::join_proof`), so the secret never crosses the
// wire and a proof cannot be replayed on another connection. The inviter
// answers `Welcome` (after recording the joiner) or `Refused`. The first
// sync then runs as an ordinary session on a fresh connection.

/// TLS exporter label for pairing proofs (RFC 5705/8446 §7.5).
const PAIRING_EXPORTER_LABEL: &[u8] = b"EXPORTER-amos-pairing-v1";

/// A `Join` as the inviter received it.
struct JoinRequest {
    invite: [u8; 16],
    proof: [u8; 32],
    name: String,
    /// Where the joiner serves: the address it came from, with its port.
    addr: Option<String>,
    /// The joiner's agent, to make a member of the invite's scopes.
    agent: Option<amos_protocol::AgentId>,
}

fn exported_key(conn: &quinn::Connection) -> std::result::Result<[u8; 32], MeshError> {
    let mut out = [0u8; 32];
    conn.export_keying_material(&mut out, PAIRING_EXPORTER_LABEL, b"")
        .map_err(|_| MeshError::Closed("cannot export keying material from TLS".into()))?;
    Ok(out)
}

/// The inviter's side of one join: check, record, answer; close.
async fn answer_join(
    home: Home,
    conn: &quinn::Connection,
    joiner: NodeId,
    join: JoinRequest,
    mut send: quinn::SendStream,
) {
    let remote = conn.remote_address();
    let reply = match exported_key(conn) {
        Err(e) => SyncV1::Refused {
            reason: e.to_string(),
        },
        Ok(exported) => {
            let decided = tokio::task::spawn_blocking(move || {
                let mut node = Node::open(&home)?;
                node.accept_join_as(
                    &joiner,
                    &join.invite,
                    &join.proof,
                    amos_protocol::pairing::ProofBinding::Session(&exported),
                    &join.name,
                    join.addr.as_deref(),
                    join.agent.as_ref(),
                )
            })
            .await;
            match decided {
                Ok(Ok(w)) => {
                    info!("paired with {joiner} at {remote} (policy {})", w.policy);
                    for s in &w.member_of {
                        info!("the joiner's agent is a member of {s}");
                    }
                    SyncV1::Welcome {
                        policy: w.policy.to_string(),
                        name: w.name,
                        mesh_key: w.mesh_key.map(|k| *k.as_bytes()),
                        member_of: w.member_of,
                    }
                }
                Ok(Err(NodeError::Refused(reason))) => {
                    info!("refused a join from {joiner} at {remote}: {reason}");
                    SyncV1::Refused { reason }
                }
                Ok(Err(e)) => {
                    warn!("a join from {joiner} at {remote} failed: {e}");
                    SyncV1::Refused {
                        reason: "the inviter could not record the pairing".into(),
                    }
                }
                Err(e) => {
                    warn!("a join from {joiner} at {remote} failed: {e}");
                    SyncV1::Refused {
                        reason: "the inviter could not record the pairing".into(),
                    }
                }
            }
        }
    };
    let frame = SyncMessage::V1(reply).encode();
    if with_timeout(
        PEER_TIMEOUT,
        "answering a join",
        write_frame(&mut send, &frame),
    )
    .await
    .is_ok()
    {
        let _ = send.finish();
        // The joiner closes once it has read the answer.
        let _ = tokio::time::timeout(PEER_TIMEOUT, conn.closed()).await;
    }
}

/// `amos join CODE [--as AGENT]`: pair with the inviter, then run a first
/// sync (`observer` hears of its progress). `agent` (one of ours) asks the
/// inviter to make it a member of the invite's scopes; the caller drops it
/// for a `full` invite, which names none.
pub fn join_blocking(
    home: &Home,
    code_text: &str,
    agent: Option<&amos_protocol::AgentId>,
    observer: Option<Observer>,
) -> Result<JoinReport> {
    let identity = Arc::new(home.load_identity()?);
    let code = pairing::read_code(code_text, &identity.node_id(), SystemClock.now_ms())?;
    runtime()?.block_on(async {
        let (addr, welcome) = dial_inviter(home, &identity, &code, agent).await?;
        let member_of: Vec<String> = welcome.member_of.iter().map(ToString::to_string).collect();
        let (outcome, peer) = tokio::task::spawn_blocking({
            let home = home.clone();
            let code = code.clone();
            let addr = addr.clone();
            move || -> Result<(MeshKeyOutcome, PeerInfo)> {
                let mut node = Node::open(&home)?;
                let outcome = node.record_inviter(&code, &addr, &welcome)?;
                let peer = node
                    .peer_list()?
                    .into_iter()
                    .find(|p| p.node_id == code.inviter.to_string())
                    .ok_or_else(|| NodeError::Failed("the inviter was not recorded".into()))?;
                Ok((outcome, peer))
            }
        })
        .await
        .map_err(|e| NodeError::Failed(format!("recording the inviter: {e}")))??;
        let first = sync_with(home, &identity, &peer, observer).await;
        Ok(JoinReport {
            peer: peer.node_id.clone(),
            name: peer.name.clone(),
            policy: peer.policy.clone(),
            addr: Some(addr),
            mesh_key: outcome,
            agent: agent.map(ToString::to_string),
            member_of,
            first_sync: Some(first),
        })
    })
}

/// Try the code's addresses in order; the first inviter that answers
/// decides. Refusals are bad input (exit 2), unreachable is a failure.
async fn dial_inviter(
    home: &Home,
    identity: &NodeIdentity,
    code: &amos_protocol::pairing::PairingCode,
    agent: Option<&amos_protocol::AgentId>,
) -> Result<(String, Welcome)> {
    let me = JoinerInfo {
        name: home.info()?.name,
        listen_port: pairing::recorded_listen(home).map(|a| a.port()),
        agent: agent.cloned(),
    };
    let inviter = code.inviter;
    let mut unreachable = Vec::new();
    for hint in &code.addrs {
        let addr = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host(hint)).await
        {
            Ok(Ok(mut a)) => match a.next() {
                Some(a) => a,
                None => {
                    unreachable.push(format!("{hint}: resolves to no address"));
                    continue;
                }
            },
            Ok(Err(e)) => {
                unreachable.push(format!("{hint}: {e}"));
                continue;
            }
            Err(_) => {
                unreachable.push(format!("{hint}: resolving timed out"));
                continue;
            }
        };
        let endpoint = transport::client_endpoint(
            bind_for(addr),
            identity,
            Arc::new(move |id: &NodeId| *id == inviter),
        )
        .map_err(|e| NodeError::Failed(e.to_string()))?;
        let r = join_at(&endpoint, addr, identity, code, &me).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        match r {
            Ok(w) => return Ok((hint.clone(), w)),
            Err(JoinFailure::Unreachable(e)) => unreachable.push(format!("{hint}: {e}")),
            Err(JoinFailure::Refused(reason)) => {
                return Err(NodeError::BadInput(format!(
                    "pairing refused: {reason}; nothing was recorded"
                )));
            }
            Err(JoinFailure::Failed(e)) => {
                return Err(NodeError::Failed(format!(
                    "pairing with {hint} failed: {e}; nothing was recorded"
                )));
            }
        }
    }
    Err(NodeError::Failed(format!(
        "cannot reach the inviter ({}); nothing was recorded",
        unreachable.join("; ")
    )))
}

/// What a joiner tells the inviter about itself.
struct JoinerInfo {
    name: String,
    listen_port: Option<u16>,
    agent: Option<amos_protocol::AgentId>,
}

enum JoinFailure {
    Unreachable(String),
    Refused(String),
    Failed(String),
}

async fn join_at(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    identity: &NodeIdentity,
    code: &amos_protocol::pairing::PairingCode,
    joiner: &JoinerInfo,
) -> std::result::Result<Welcome, JoinFailure> {
    use amos_protocol::pairing::{ProofBinding, invite_id, join_proof, proof_key};
    let conn = match with_timeout(
        CONNECT_TIMEOUT,
        "the handshake",
        transport::connect(endpoint, addr, code.inviter),
    )
    .await
    {
        Ok(c) => c,
        Err(TransportError::Refused {
            by: transport::RefusedBy::Us,
            ..
        }) => {
            return Err(JoinFailure::Refused(format!(
                "the node at {addr} is not the inviter this code names (forged or stale code)"
            )));
        }
        Err(TransportError::Refused { .. }) => {
            return Err(JoinFailure::Refused(
                "the inviter accepts no joins now (the code is unknown, used or expired)".into(),
            ));
        }
        Err(e @ TransportError::Config(_)) => return Err(JoinFailure::Failed(e.to_string())),
        Err(e) => return Err(JoinFailure::Unreachable(e.to_string())),
    };
    let exported = exported_key(&conn).map_err(|e| JoinFailure::Failed(e.to_string()))?;
    let me = identity.node_id();
    let secret = code.secret;
    let join = SyncV1::Join {
        invite: invite_id(&secret),
        proof: join_proof(
            &proof_key(&secret),
            ProofBinding::Session(&exported),
            &me,
            &code.inviter,
            &code.policy,
        ),
        name: joiner.name.clone(),
        listen_port: joiner.listen_port,
        agent: joiner.agent.clone(),
    };
    let exchange = async {
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(transport::from_connection_error)?;
        write_frame(&mut send, &SyncMessage::V1(join).encode()).await?;
        let _ = send.finish();
        read_frame(&mut recv).await
    };
    let answer = with_timeout(PEER_TIMEOUT, "waiting for the inviter", exchange).await;
    conn.close(quinn::VarInt::from_u32(0), b"done");
    let bytes = match answer {
        Ok(Some(b)) => b,
        Ok(None) => return Err(JoinFailure::Failed("the inviter answered nothing".into())),
        // TLS 1.3: the inviter's refusal of our key may surface only here.
        Err(TransportError::Refused { .. }) | Err(TransportError::Closed(_)) => {
            return Err(JoinFailure::Refused(
                "the inviter accepts no joins now (the code is unknown, used or expired)".into(),
            ));
        }
        Err(e) => return Err(JoinFailure::Failed(e.to_string())),
    };
    match SyncMessage::decode(&bytes) {
        Ok(SyncMessage::V1(SyncV1::Welcome {
            policy,
            name,
            mesh_key,
            member_of,
        })) => Ok(Welcome {
            policy: policy.parse().map_err(|_| {
                JoinFailure::Failed(format!("the inviter sent a bad policy {policy:?}"))
            })?,
            name,
            mesh_key: mesh_key.map(amos_protocol::MeshKey::from_bytes),
            member_of,
        }),
        Ok(SyncMessage::V1(SyncV1::Refused { reason })) => Err(JoinFailure::Refused(reason)),
        Ok(_) => Err(JoinFailure::Failed(
            "the inviter answered out of turn".into(),
        )),
        Err(e) => Err(JoinFailure::Failed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_address_is_where_the_peer_came_from_unless_it_names_one() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let lan = a("192.0.2.7:50000");
        // A wildcard becomes the source IP with the announced port.
        assert_eq!(
            learned_addr(&[a("0.0.0.0:4747")], lan),
            Some(a("192.0.2.7:4747"))
        );
        assert_eq!(
            learned_addr(&[a("[::]:4747")], lan),
            Some(a("192.0.2.7:4747"))
        );
        // A v4-mapped source is recorded as plain IPv4.
        let mapped = a("[::ffff:192.0.2.7]:50000");
        assert_eq!(
            learned_addr(&[a("[::]:4747")], mapped),
            Some(a("192.0.2.7:4747"))
        );
        // An explicit address is recorded as given; one on the source IP wins.
        assert_eq!(
            learned_addr(&[a("198.51.100.1:4747")], lan),
            Some(a("198.51.100.1:4747"))
        );
        assert_eq!(
            learned_addr(&[a("198.51.100.1:4747"), a("192.0.2.7:4748")], lan),
            Some(a("192.0.2.7:4748"))
        );
        // Loopback only helps a peer on this machine; multicast, broadcast never.
        assert_eq!(learned_addr(&[a("127.0.0.1:4747")], lan), None);
        assert_eq!(
            learned_addr(&[a("127.0.0.1:4747")], a("127.0.0.1:50000")),
            Some(a("127.0.0.1:4747"))
        );
        assert_eq!(
            learned_addr(&[a("224.0.0.1:4747"), a("255.255.255.255:4747")], lan),
            None
        );
        assert_eq!(learned_addr(&[], lan), None);
    }

    #[test]
    fn passes_are_jittered_within_ten_percent() {
        let p = Duration::from_secs(30);
        assert_eq!(Pacing::next_wait(p, 0.0), Duration::from_secs(27));
        assert_eq!(Pacing::next_wait(p, 0.5), Duration::from_secs(30));
        assert!(Pacing::next_wait(p, 0.999) < Duration::from_secs(33));
        assert_eq!(Pacing::next_wait(p, 7.0), Duration::from_secs(33));
    }

    #[test]
    fn a_dead_peer_is_tried_exponentially_less_often_until_it_answers() {
        let period = Duration::from_secs(10);
        let mut p = Pacing::default();
        let mut now = 1_000_000;
        assert!(p.due("a", now));
        // Count the passes (one per period) at which "a" is tried while it fails.
        let mut tried = Vec::new();
        for pass in 0..80u64 {
            now += 10_000;
            if p.due("a", now) {
                tried.push(pass);
                p.record("a", SyncResult::Unreachable, now, period);
            }
            p.record("b", SyncResult::Ok, now, period);
            assert!(p.due("b", now + 1));
        }
        let gaps: Vec<u64> = tried.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&gaps[..5], &[2, 4, 8, 16, 32], "{tried:?}");
        assert!(gaps[5..].iter().all(|&g| g == 32), "capped: {gaps:?}");
        // One success and it is back to every period.
        p.record("a", SyncResult::Ok, now, period);
        assert!(p.due("a", now));
    }
}
