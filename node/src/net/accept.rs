//! Accepting: one incoming connection — handshake, then one sync session
//! or one pairing, or a relay client's connection (handed to the relay
//! hub) — the one connection a relay pipe carries, and the shutdown signal
//! `amos serve` waits for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::net::transport::endpoint::accept_any;
use crate::net::transport::{self, accept_incoming, read_frame, with_timeout, write_frame};
use amos_protocol::wire::{SyncMessage, SyncV1};
use tracing::{info, warn};

use super::join::{JoinRequest, answer_join};
use super::relay::Hub;
use super::session::drive_accepted_session;
use super::{CONNECT_TIMEOUT, MeshError, PEER_TIMEOUT};
use crate::api::node::Node;
use crate::events::{self, Role, SyncEvent, SyncResult};
use crate::home::Home;
/// One incoming connection: handshake, then a relay client's connection
/// (served by `hub`, docs/design.md §7.11) or one session, close.
pub(crate) async fn serve_incoming(home: Home, incoming: quinn::Incoming, hub: Arc<Hub>) {
    let remote = incoming.remote_address();
    let (conn, peer) =
        match with_timeout(CONNECT_TIMEOUT, "the handshake", accept_any(incoming)).await {
            Ok(c) => c,
            Err(e) => {
                info!("connection from {remote} not accepted: {e}");
                return;
            }
        };
    if transport::endpoint::is_relay(&conn) {
        hub.serve(conn, peer, remote).await;
        return;
    }
    if let Err(e) = transport::endpoint::check_alpn(&conn) {
        info!("connection from {remote} not accepted: {e}");
        return;
    }
    serve_connection(home, conn, peer, Some(remote)).await;
}

/// The one connection a relay pipe carries (its endpoint's `incoming`):
/// the same handshake and session as a direct one, but nothing is learnt
/// from its address.
pub(crate) async fn serve_pipe(home: Home, incoming: quinn::Incoming) {
    let (conn, peer) =
        match with_timeout(CONNECT_TIMEOUT, "the handshake", accept_incoming(incoming)).await {
            Ok(c) => c,
            Err(e) => {
                info!("connection through a relay not accepted: {e}");
                return;
            }
        };
    serve_connection(home, conn, peer, None).await;
}

/// One session (or pairing) on an accepted connection from `peer`, which
/// came from `remote` (`None`: through a relay pipe).
async fn serve_connection(
    home: Home,
    conn: quinn::Connection,
    peer: amos_protocol::NodeId,
    remote: Option<SocketAddr>,
) {
    let remote_text = remote.map_or_else(|| "a relay".to_owned(), |r| r.to_string());
    let remote_text = remote_text.as_str();
    let stream = with_timeout(PEER_TIMEOUT, "waiting for a stream", async {
        conn.accept_bi()
            .await
            .map_err(transport::from_connection_error)
    })
    .await;
    let (mut send, mut recv) = match stream {
        Ok(s) => s,
        Err(e) => {
            info!("{peer} at {remote_text} opened no session: {e}");
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
            warn!("session with {peer} at {remote_text} failed: {e}");
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
            // Through a relay: no address to dial it back at.
            addr: remote
                .zip(listen_port)
                .map(|(r, p)| SocketAddr::new(r.ip(), p).to_string()),
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
    let refusal = match registered {
        Ok(Ok(Some(policy))) if policy.is_none() => {
            Some("the policy here is none: a relay link carries no facts")
        }
        Ok(Ok(Some(_))) => None,
        _ => Some("not a registered peer"),
    };
    if let Some(reason) = refusal {
        info!("{peer} at {remote_text}: no sync ({reason})");
        let _ = write_frame(
            &mut send,
            &SyncMessage::V1(SyncV1::Refused {
                reason: reason.into(),
            })
            .encode(),
        )
        .await;
        let _ = send.finish();
        let _ = tokio::time::timeout(PEER_TIMEOUT, conn.closed()).await;
        return;
    }
    let started = Instant::now();
    // The handshake accepted only an id we offered: `amos/1` at the least.
    let version = transport::negotiated(&conn).unwrap_or(1);
    let session = drive_accepted_session(home, peer, version, remote, send, recv, first).await;
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
                "session with {peer} at {remote_text}: {} facts in, {} out, {} ms",
                s.facts_in,
                s.facts_out,
                started.elapsed().as_millis()
            );
            // The dialler closes once it has read our end of stream.
            let _ = tokio::time::timeout(PEER_TIMEOUT, conn.closed()).await;
        }
        Err(e) => {
            warn!("session with {peer} at {remote_text} failed: {e}");
            conn.close(quinn::VarInt::from_u32(1), b"sync failed");
        }
    }
}

/// Resolves on SIGINT or (on unix) SIGTERM. The handlers are installed
/// when this is called, not when it is first polled: a process that calls
/// it before it says it is ready (`amos serve`'s start line, the console's
/// URL) stops cleanly on a signal that comes right after. Call it inside
/// the runtime.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |kind: SignalKind, name: &str| {
            signal(kind)
                .inspect_err(|e| warn!("cannot watch {name}: {e}"))
                .ok()
        };
        let (mut int, mut term) = (
            watch(SignalKind::interrupt(), "SIGINT"),
            watch(SignalKind::terminate(), "SIGTERM"),
        );
        async move {
            tokio::select! {
                _ = heard(int.as_mut()) => {}
                _ = heard(term.as_mut()) => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves when signal `s` comes; never, without one.
#[cfg(unix)]
async fn heard(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}
