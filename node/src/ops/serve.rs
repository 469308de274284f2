//! `amos serve`: the long-running node — the QUIC listener, periodic sync,
//! the `/metrics` endpoint, mDNS discovery and `agents.toml` — composed
//! from the network layer (`crate::net`) and the operations around it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::net::transport::{self};
use amos_protocol::NodeId;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::api::node::Node;
use crate::api::pairing::{self};
use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::net::Pacing;
use crate::net::accept::{serve_connection, shutdown_signal};
use crate::net::dial::periodic_pass;
use crate::net::runtime;
use crate::store::replica::{self};
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

pub(crate) async fn serve_async(home: &Home, opts: &ServeOptions) -> Result<()> {
    let identity = Arc::new(home.load_identity()?);
    let fleet = crate::ops::fleet::apply(&mut Node::open(home)?, home)?;
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
        Some(addr) => Some(crate::ops::metrics::start(home, addr).await?),
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
        crate::net::discovery::Discovery::start(home, local)
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
