//! The relay client's side (docs/design.md §7.11): dial a peer through a
//! relay ([`dial_via`]: a pipe, and a normal endpoint over it), and keep a
//! standing connection to each relay peer with an address so that peers can
//! reach this node through it ([`keep_standing`], run by `amos serve`).
//!
//! Must never trust the relay: the pipe's header naming who asked is a
//! claim; the connection inside is authenticated end to end by the same
//! key check as a direct one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use amos_protocol::{NodeId, NodeIdentity};
use quinn::{Connection, Endpoint, RecvStream, SendStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::socket::{PipeSocket, far_addr};
use super::{Answer, HEADER, Request, decode_from};
use crate::home::Home;
use crate::net::transport::endpoint::{
    bind_for, connect_relay, pipe_endpoint, relay_client_endpoint,
};
use crate::net::transport::{PeerAcceptor, TransportError, from_connection_error, with_timeout};
use crate::net::{PEER_TIMEOUT, connect_timeout};
use crate::store::Watch;

/// How often the standing connections are checked against the peers table.
const RECHECK: Duration = Duration::from_secs(10);
/// The longest wait between two attempts to reach a relay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A peer reached through a relay: the endpoint to dial it on (its socket
/// is the pipe) and the address to dial; holds the relay connection open.
pub(crate) struct Relayed {
    /// The endpoint over the pipe: dial [`Relayed::addr`] on it.
    pub(crate) endpoint: Endpoint,
    /// The pipe's far end, for quinn.
    pub(crate) addr: SocketAddr,
    relay: Connection,
    _relay_endpoint: Endpoint,
    done: Arc<Notify>,
}

impl Drop for Relayed {
    fn drop(&mut self) {
        self.relay.close(quinn::VarInt::from_u32(0), b"done");
        self.done.notify_one();
    }
}

/// Resolve `addr_text` within the dial's bound.
async fn resolve(addr_text: &str) -> Result<SocketAddr, TransportError> {
    let unreachable = |reason: String| TransportError::Unreachable {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        reason,
    };
    match tokio::time::timeout(connect_timeout(), tokio::net::lookup_host(addr_text)).await {
        Ok(Ok(mut a)) => a
            .next()
            .ok_or_else(|| unreachable(format!("{addr_text} resolves to no address"))),
        Ok(Err(e)) => Err(unreachable(format!("cannot resolve {addr_text}: {e}"))),
        Err(_) => Err(unreachable(format!("resolving {addr_text} timed out"))),
    }
}

/// Open a relay connection to `relay` at `addr_text`.
pub(super) async fn relay_connection(
    identity: &NodeIdentity,
    relay: NodeId,
    addr_text: &str,
) -> Result<(Endpoint, Connection, SocketAddr), TransportError> {
    let addr = resolve(addr_text).await?;
    let endpoint = relay_client_endpoint(
        bind_for(addr),
        identity,
        Arc::new(move |id: &NodeId| *id == relay),
    )?;
    let conn = with_timeout(
        connect_timeout(),
        "the relay's handshake",
        connect_relay(&endpoint, addr, relay),
    )
    .await?;
    Ok((endpoint, conn, addr))
}

/// Send `request` on a new stream of `conn`; the relay's answer.
async fn ask(
    conn: &Connection,
    request: Request,
) -> Result<(SendStream, RecvStream, Answer), TransportError> {
    with_timeout(PEER_TIMEOUT, "the relay's answer", async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(from_connection_error)?;
        send.write_all(&request.encode())
            .await
            .map_err(|e| TransportError::Closed(format!("asking the relay: {e}")))?;
        let mut b = [0u8; 1];
        recv.read_exact(&mut b)
            .await
            .map_err(|e| TransportError::Closed(format!("the relay did not answer: {e}")))?;
        let answer = Answer::decode(b[0])
            .ok_or_else(|| TransportError::Protocol(format!("the relay answered {}", b[0])))?;
        Ok((send, recv, answer))
    })
    .await
}

/// Reach `target` through `relay` (at `relay_addr`): a pipe, and an endpoint
/// over it that dials `target` only. The caller dials with
/// [`crate::net::transport::connect`] as it would directly.
pub(crate) async fn dial_via(
    identity: &NodeIdentity,
    relay: NodeId,
    relay_addr: &str,
    target: NodeId,
) -> Result<Relayed, TransportError> {
    let (relay_endpoint, conn, addr) = relay_connection(identity, relay, relay_addr).await?;
    let (send, recv, answer) = ask(&conn, Request::Connect(target)).await?;
    match answer {
        Answer::Ok => {}
        Answer::NotConnected => {
            conn.close(quinn::VarInt::from_u32(0), b"done");
            return Err(TransportError::Unreachable {
                addr,
                reason: format!("through relay {}: {}", relay.short(), answer.describe()),
            });
        }
        other => {
            conn.close(quinn::VarInt::from_u32(0), b"done");
            return Err(TransportError::Refused {
                by: crate::net::transport::RefusedBy::Peer,
                reason: format!("relay {}: {}", relay.short(), other.describe()),
            });
        }
    }
    let (socket, ended) = PipeSocket::new(send, recv);
    let endpoint = pipe_endpoint(
        socket,
        identity,
        Arc::new(move |id: &NodeId| *id == target),
        false,
    )?;
    close_when_ended(&endpoint, ended.clone());
    Ok(Relayed {
        endpoint,
        addr: far_addr(),
        relay: conn,
        _relay_endpoint: relay_endpoint,
        done: ended,
    })
}

/// Close `endpoint` once its pipe ended (or its owner is done with it): the
/// connection inside fails at once when a relay cut or dropped the pipe,
/// instead of by its idle timeout; after a normal end this only lets go.
fn close_when_ended(endpoint: &Endpoint, ended: Arc<Notify>) {
    let endpoint = endpoint.clone();
    tokio::spawn(async move {
        ended.notified().await;
        endpoint.close(quinn::VarInt::from_u32(1), b"the relay pipe ended");
    });
}

/// What serves a connection that arrived through a pipe (the accepting
/// side's session or pairing: `net::accept::serve_pipe`), handed in by
/// `serve` so that this module, which `net::dial` and `net::join` use to
/// dial through a relay, does not depend on the acceptor that uses them.
pub(crate) type ServePipe =
    fn(Home, quinn::Incoming) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Keep a standing connection to every relay peer with an address (the
/// current peers table, re-read every [`RECHECK`]), and serve the pipes
/// each relay offers as connections to this node with `serve_pipe`, with
/// `acceptor` deciding on the key inside as it does for direct ones. Runs
/// until dropped.
pub(crate) async fn keep_standing(
    home: Home,
    identity: Arc<NodeIdentity>,
    acceptor: Arc<dyn PeerAcceptor>,
    serve_pipe: ServePipe,
) {
    let store = match Watch::open(&home.db_path()) {
        Ok(s) => s,
        Err(e) => {
            warn!("relay links are off: cannot read the peers table: {e}");
            return;
        }
    };
    let store = Arc::new(std::sync::Mutex::new(store));
    let mut standing: HashMap<NodeId, (String, JoinHandle<()>)> = HashMap::new();
    loop {
        let wanted = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                let conn = store.lock().unwrap_or_else(|e| e.into_inner());
                crate::store::peers::relays_to_keep(&*conn)
            })
            .await
        };
        match wanted {
            Ok(Ok(wanted)) => {
                let wanted: HashMap<NodeId, String> = wanted.into_iter().collect();
                standing.retain(|id, (addr, task)| {
                    let keep = wanted.get(id) == Some(addr) && !task.is_finished();
                    if !keep {
                        task.abort();
                    }
                    keep
                });
                for (id, addr) in wanted {
                    standing.entry(id).or_insert_with(|| {
                        let task = tokio::spawn(stand(
                            home.clone(),
                            identity.clone(),
                            acceptor.clone(),
                            serve_pipe,
                            id,
                            addr.clone(),
                        ));
                        (addr, task)
                    });
                }
            }
            Ok(Err(e)) => warn!("relay links: cannot read the peers table: {e}"),
            Err(e) => warn!("relay links: {e}"),
        }
        tokio::time::sleep(RECHECK).await;
    }
}

/// One standing connection to `relay`, re-made after it drops (with a
/// backoff of 1 s doubling to [`MAX_BACKOFF`]).
async fn stand(
    home: Home,
    identity: Arc<NodeIdentity>,
    acceptor: Arc<dyn PeerAcceptor>,
    serve_pipe: ServePipe,
    relay: NodeId,
    addr: String,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        match listen(&identity, relay, &addr).await {
            Ok((endpoint, conn)) => {
                info!("listening through relay {} at {addr}", relay.short());
                backoff = Duration::from_secs(1);
                serve_offers(&home, &identity, &acceptor, serve_pipe, &conn).await;
                info!("the connection to relay {} ended", relay.short());
                drop(endpoint);
            }
            Err(e) => debug!(
                "cannot listen through relay {} at {addr}: {e}",
                relay.short()
            ),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn listen(
    identity: &NodeIdentity,
    relay: NodeId,
    addr: &str,
) -> Result<(Endpoint, Connection), TransportError> {
    let (endpoint, conn, _) = relay_connection(identity, relay, addr).await?;
    match ask(&conn, Request::Listen).await? {
        (_, _, Answer::Ok) => Ok((endpoint, conn)),
        (_, _, a) => Err(TransportError::Refused {
            by: crate::net::transport::RefusedBy::Peer,
            reason: a.describe().into(),
        }),
    }
}

/// Serve each pipe the relay opens on `conn` until the connection ends.
async fn serve_offers(
    home: &Home,
    identity: &Arc<NodeIdentity>,
    acceptor: &Arc<dyn PeerAcceptor>,
    serve_pipe: ServePipe,
    conn: &Connection,
) {
    while let Ok((send, mut recv)) = conn.accept_bi().await {
        let home = home.clone();
        let identity = identity.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let mut b = [0u8; HEADER];
            let header = tokio::time::timeout(PEER_TIMEOUT, recv.read_exact(&mut b)).await;
            let Some(from) = header
                .ok()
                .and_then(|r| r.ok())
                .and_then(|_| decode_from(&b))
            else {
                info!("a relay offered a pipe without a valid header: ignored");
                return;
            };
            let (socket, ended) = PipeSocket::new(send, recv);
            let endpoint = match pipe_endpoint(socket, &identity, acceptor, true) {
                Ok(e) => e,
                Err(e) => {
                    warn!("cannot serve a pipe: {e}");
                    return;
                }
            };
            close_when_ended(&endpoint, ended.clone());
            debug!("a pipe from {} (the relay says)", from.short());
            match tokio::time::timeout(PEER_TIMEOUT, endpoint.accept()).await {
                Ok(Some(incoming)) => serve_pipe(home, incoming).await,
                _ => info!("a pipe carried no connection"),
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
            // Done with it, whatever the relay does with the pipe.
            ended.notify_one();
        });
    }
}
