//! `amos serve`: the long-running node — the QUIC listener, periodic sync,
//! push on change, the deferred facts' retry timer, the `/metrics` endpoint, mDNS discovery and
//! `agents.toml` — composed from the network layer (`crate::net`) and the
//! operations around it.
//!
//! Push on change (docs/design.md §7.10): a watcher thread reads the store's
//! `seq` counter every [`SEQ_POLL`] (any process on the home may write), a
//! [`Listener`] hears which `seq`s batches from which peer took and which
//! sessions ended, and the sans-IO [`PushScheduler`] says whom to dial
//! when; this module only carries that out.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::net::transport::{self};
use amos_protocol::NodeId;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::api::node::Node;
use crate::api::pairing::{self};
use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::events::{self, Listener, SyncEvent, SyncResult};
use crate::home::Home;
use crate::net::Pacing;
use crate::net::accept::{serve_incoming, shutdown_signal};
use crate::net::dial::{periodic_pass, sync_with};
use crate::net::push::{PushConfig, PushScheduler};
use crate::net::relay::Hub;
use crate::net::runtime;
use crate::store::Watch;
use crate::store::replica::PeerInfo;
use crate::store::replica::{self};
// ---------------------------------------------------------------------------
// Serving

/// `amos serve` settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The UDP address the QUIC listener binds (port 0: any free one).
    pub listen: SocketAddr,
    /// Also sync with every peer this often (`--sync-every`).
    pub sync_every: Option<Duration>,
    /// Advertise and browse over mDNS (`--no-mdns`: off).
    pub mdns: bool,
    /// Serve `/metrics` and `/healthz` over HTTP here.
    pub metrics: Option<SocketAddr>,
    /// Push on change (docs/design.md §7.10); `None`: `--no-push`.
    pub push: Option<PushConfig>,
    /// What this node allows each relay peer it relays for
    /// (docs/design.md §7.11: `--relay-rate`, `--relay-quota`).
    pub relay_limits: crate::net::relay::Limits,
}

pub use crate::store::SEQ_POLL;

/// After SIGINT/SIGTERM, how long the sessions in flight (a push still
/// dialling a dead peer, a sync half done) may take to end before they are
/// dropped: a dropped session moved no watermark past what committed
/// (docs/design.md §7), so the next one takes up where it stopped.
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(500);
/// Then how long closed connections, and the runtime's blocking work,
/// may take to wind down: `serve` exits within a second of the signal.
pub(crate) const STOP_IDLE: Duration = Duration::from_millis(200);

/// What a started `amos serve` does (its start line): known once its
/// sockets are bound.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Started {
    /// This node's NodeId.
    pub node_id: String,
    /// The QUIC listener's address.
    pub listen: SocketAddr,
    /// Push on change on (`--no-push`: off).
    pub push: bool,
    /// The periodic sync's period (`--sync-every`), in ms.
    pub sync_every_ms: Option<u64>,
    /// Where `/metrics` is served.
    pub metrics: Option<SocketAddr>,
    /// mDNS discovery on (`--no-mdns`: off).
    pub mdns: bool,
}

/// What the push loop hears.
enum PushInput {
    /// The store's `seq` now, and the peers we can dial.
    Seq(i64, Vec<PeerInfo>),
    /// A batch from `peer` took `seq`s `first..=last`.
    Stored(String, i64, i64),
    /// A session with `peer` just ended, after `elapsed`.
    Ended(String, SyncResult, Duration),
    /// Our push to `peer` ended.
    Pushed(String, SyncResult),
}

/// The push loop's ear on this process's sync events.
struct PushEar(mpsc::UnboundedSender<PushInput>);

impl Listener for PushEar {
    fn event(&self, e: &SyncEvent<'_>) {
        let input = match *e {
            SyncEvent::Stored { peer, first, last } => {
                PushInput::Stored(peer.to_string(), first, last)
            }
            SyncEvent::Finished {
                peer,
                result,
                elapsed,
                ..
            } => PushInput::Ended(peer.to_owned(), result, elapsed),
            SyncEvent::Applied(_) => return,
        };
        // After serve stopped nobody listens: fine.
        let _ = self.0.send(input);
    }
}

/// Read the store's `seq` every [`SEQ_POLL`] on a thread of its own (its
/// own connection) and report it, with the dialable peers, whenever it
/// moved (and once at start: the baseline). Ends when `stop` is set or the
/// loop is gone.
fn watch_seq(
    home: &Home,
    tx: mpsc::UnboundedSender<PushInput>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let conn = Watch::open(&home.db_path())?;
    std::thread::Builder::new()
        .name("amos-seq-watch".into())
        .spawn(move || {
            let mut last = None;
            while !stop.load(Ordering::Relaxed) {
                match crate::store::max_seq(&conn) {
                    Ok(seq) if last != Some(seq) => {
                        let peers = match replica::list_peers(&conn) {
                            Ok(p) => p.into_iter().filter(PeerInfo::dialable).collect(),
                            Err(e) => {
                                warn!("push: cannot read the peers table: {e}");
                                Vec::new()
                            }
                        };
                        if tx.send(PushInput::Seq(seq, peers)).is_err() {
                            return;
                        }
                        last = Some(seq);
                    }
                    Ok(_) => {}
                    Err(e) => debug!("push: cannot read the store's seq: {e}"),
                }
                std::thread::sleep(SEQ_POLL);
            }
        })
        .map_err(NodeError::io("starting the seq watcher"))?;
    Ok(())
}

/// Run the node until SIGINT/SIGTERM: accept sessions from registered peers
/// (checked against the current peers table on every handshake), and with
/// `sync_every` run a sync pass periodically. `ready` hears what it does
/// once its sockets are bound.
pub fn serve(home: &Home, opts: &ServeOptions, ready: impl FnOnce(&Started)) -> Result<()> {
    let rt = runtime()?;
    let r = rt.block_on(serve_async(home, opts, ready));
    // A session's node work still running on a blocking thread ends with
    // the process: its transaction commits whole or not at all.
    rt.shutdown_timeout(STOP_IDLE);
    r
}

pub(crate) async fn serve_async(
    home: &Home,
    opts: &ServeOptions,
    ready: impl FnOnce(&Started),
) -> Result<()> {
    // Watching for SIGINT/SIGTERM from before the start line.
    let shutdown = shutdown_signal();
    let identity = Arc::new(home.load_identity()?);
    let fleet = crate::ops::fleet::apply(&mut Node::open(home)?, home)?;
    for change in &fleet.changes {
        info!("agents.toml: {change}");
    }
    // The acceptor's own connection: the peers table as it is at each handshake.
    let conn = Mutex::new(Watch::open(&home.db_path())?);
    let clock = SystemClock;
    let acceptor = move |id: &NodeId| {
        let Ok(conn) = conn.lock() else {
            return false;
        };
        match replica::peer_policy(&*conn, id) {
            Ok(Some(_)) => true,
            // A stranger may only pair, and only while an invite is pending;
            // serve_connection lets such a connection do nothing else.
            Ok(None) => match pairing::invites_pending(&*conn, clock.now_ms()) {
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
    let metrics = match opts.metrics {
        Some(addr) => Some(crate::ops::metrics::start(home, addr).await?),
        None => None,
    };
    let acceptor: Arc<dyn transport::PeerAcceptor> = Arc::new(acceptor);
    let hub = Arc::new(Hub::new(
        home,
        opts.relay_limits,
        crate::net::relay::Fault::from_env(),
    )?);
    let endpoint = transport::server_endpoint(opts.listen, &identity, acceptor.clone())
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
    ready(&Started {
        node_id: identity.node_id().to_string(),
        listen: local,
        push: opts.push.is_some(),
        sync_every_ms: opts.sync_every.map(|d| d.as_millis() as u64),
        metrics: metrics.as_ref().map(|m| m.local_addr()),
        mdns: opts.mdns,
    });
    let discovery = if opts.mdns {
        crate::net::discovery::Discovery::start(home, local)
            .inspect_err(|e| warn!("mDNS discovery is off: {e}"))
            .ok()
    } else {
        info!("mDNS disabled (--no-mdns)");
        None
    };

    // Standing connections to the relay peers with an address, serving
    // the pipes they offer as connections here (docs/design.md §7.11).
    let standing = tokio::spawn(crate::net::relay::client::keep_standing(
        home.clone(),
        identity.clone(),
        acceptor.clone(),
        |home, incoming| Box::pin(crate::net::accept::serve_pipe(home, incoming)),
    ));
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
    // Push on change: the scheduler, its inputs and its timer.
    let (push_tx, mut push_rx) = mpsc::unbounded_channel::<PushInput>();
    let watch_stop = Arc::new(AtomicBool::new(false));
    let mut push = opts.push.map(PushScheduler::new);
    if let Some(cfg) = opts.push {
        events::listen(Arc::new(PushEar(push_tx.clone())));
        watch_seq(home, push_tx.clone(), watch_stop.clone())?;
        info!(
            "pushing changes to peers {} after a change (at most {} sessions at once)",
            humantime::format_duration(Duration::from_millis(cfg.debounce_ms)),
            cfg.max_sessions
        );
    } else {
        info!("push on change disabled (--no-push)");
    }
    let epoch = Instant::now();
    let now_ms = move || epoch.elapsed().as_millis() as u64;
    let mut dialable: HashMap<String, PeerInfo> = HashMap::new();
    let far = || tokio::time::Instant::now() + Duration::from_secs(24 * 3600);
    let push_wake = tokio::time::sleep_until(far());
    tokio::pin!(push_wake);

    // Deferred facts are retried after every session and on this timer: a
    // fact from a clock ahead of ours becomes applicable by time alone.
    let mut retry_tick = tokio::time::interval_at(
        tokio::time::Instant::now() + crate::api::RETRY_EVERY,
        crate::api::RETRY_EVERY,
    );
    retry_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // Encodes what bulk paths left pending; stopped and joined when dropped.
    let _encoder = crate::ops::encoder::start(home);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = retry_tick.tick() => {
                let home = home.clone();
                sessions.spawn(async move {
                    let r = tokio::task::spawn_blocking(move || Node::open(&home)?.retry()).await;
                    match r {
                        Ok(Ok(r)) if r.retried > 0 => info!(
                            "retried {} deferred facts: {} applied, {} still deferred",
                            r.retried, r.applied, r.still_deferred
                        ),
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => warn!("retrying the deferred facts: {e}"),
                        Err(e) => warn!("retrying the deferred facts: {e}"),
                    }
                });
            }
            _ = &mut shutdown => {
                info!("shutting down");
                break;
            }
            Some(input) = push_rx.recv() => {
                let Some(sched) = push.as_mut() else { continue };
                let now = now_ms();
                match input {
                    PushInput::Seq(seq, peers) => {
                        sched.set_peers(peers.iter().map(|p| p.node_id.as_str()));
                        dialable = peers.into_iter().map(|p| (p.node_id.clone(), p)).collect();
                        sched.observe_seq(seq, now);
                    }
                    PushInput::Stored(peer, first, last) => sched.stored(&peer, first, last),
                    PushInput::Ended(peer, result, elapsed) => {
                        let started = now.saturating_sub(elapsed.as_millis() as u64);
                        sched.session_ended(&peer, result, started);
                    }
                    PushInput::Pushed(peer, result) => {
                        info!("pushed to {peer}: {}", result.as_str());
                        sched.push_finished(&peer, result, now);
                    }
                }
                start_pushes(sched, now, &dialable, &mut sessions, home, &identity, &push_tx);
                push_wake.as_mut().reset(wake_at(sched, epoch).unwrap_or_else(far));
            }
            _ = &mut push_wake => {
                push_wake.as_mut().reset(far());
                if let Some(sched) = push.as_mut() {
                    start_pushes(sched, now_ms(), &dialable, &mut sessions, home, &identity, &push_tx);
                    push_wake.as_mut().reset(wake_at(sched, epoch).unwrap_or_else(far));
                }
            }
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let home = home.clone();
                sessions.spawn(serve_incoming(home, incoming, hub.clone()));
            }
            _ = &mut next_pass, if opts.sync_every.is_some() => {
                let every = opts.sync_every.unwrap_or(Duration::from_secs(30));
                next_pass
                    .as_mut()
                    .reset(tokio::time::Instant::now() + Pacing::next_wait(every, jitter()));
                if !pass_running.swap(true, Ordering::SeqCst) {
                    let home = home.clone();
                    let identity = identity.clone();
                    let identity_m = identity.clone();
                    let running = pass_running.clone();
                    let pacing = pacing.clone();
                    sessions.spawn(async move {
                        match periodic_pass(&home, identity, &pacing, every).await {
                            Ok(outcomes) => {
                                for o in outcomes {
                                    match &o.error {
                                        Some(e) => warn!(
                                            "periodic sync with {}: {} ({e})",
                                            o.peer,
                                            o.result.as_str()
                                        ),
                                        None => info!(
                                            "periodic sync with {}: {}",
                                            o.peer,
                                            o.result.as_str()
                                        ),
                                    }
                                }
                            }
                            Err(e) => warn!("periodic sync: {e}"),
                        }
                        // Then the mailboxes (docs/design.md §8.2): in
                        // directories and on relays.
                        match crate::net::relay::mailbox::mailbox_pass(&home, identity_m, None)
                            .await
                        {
                            Ok(outcomes) => {
                                for o in outcomes.iter().filter(|o| {
                                    o.imported + o.posted > 0 || o.error.is_some() || !o.left.is_empty()
                                }) {
                                    info!("{}", crate::api::mailbox_line(o));
                                }
                            }
                            Err(e) => warn!("mailbox pass: {e}"),
                        }
                        running.store(false, Ordering::SeqCst);
                    });
                }
            }
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
    watch_stop.store(true, Ordering::Relaxed);
    standing.abort();
    endpoint.close(quinn::VarInt::from_u32(0), b"shutting down");
    let drain = async { while sessions.join_next().await.is_some() {} };
    if tokio::time::timeout(STOP_GRACE, drain).await.is_err() {
        info!("dropping {} sessions still running", sessions.len());
        sessions.abort_all();
    }
    let _ = tokio::time::timeout(STOP_IDLE, endpoint.wait_idle()).await;
    if let Some(d) = discovery {
        let _ = tokio::task::spawn_blocking(move || d.stop()).await;
    }
    info!("stopped");
    Ok(())
}

/// When the scheduler wants to be polled next, on tokio's clock.
fn wake_at(sched: &PushScheduler, epoch: Instant) -> Option<tokio::time::Instant> {
    let at = sched.next_wake()?;
    Some(tokio::time::Instant::from_std(
        epoch + Duration::from_millis(at),
    ))
}

/// Dial every peer the scheduler says is due; each reports back as
/// [`PushInput::Pushed`].
fn start_pushes(
    sched: &mut PushScheduler,
    now: u64,
    dialable: &HashMap<String, PeerInfo>,
    sessions: &mut JoinSet<()>,
    home: &Home,
    identity: &Arc<amos_protocol::NodeIdentity>,
    report: &mpsc::UnboundedSender<PushInput>,
) {
    for id in sched.poll(now) {
        let Some(peer) = dialable.get(&id).cloned() else {
            sched.push_finished(&id, SyncResult::Failed, now);
            continue;
        };
        debug!("pushing to {id}");
        let home = home.clone();
        let identity = identity.clone();
        let report = report.clone();
        sessions.spawn(async move {
            let o = sync_with(&home, &identity, &peer, None).await;
            if let Some(e) = &o.error {
                warn!("push to {id}: {} ({e})", o.result.as_str());
            }
            let _ = report.send(PushInput::Pushed(id, o.result));
        });
    }
}
