//! Dialling: a sync pass over the peers with addresses (`amos sync now`,
//! `serve --sync-every`), fed to the pacing and backoff of
//! `amos_sync::Pacing` (the rule is there, shared with the simulator), and
//! reachability probes (`amos doctor`).

use crate::error::UnknownKind;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::net::transport::endpoint::bind_for;
use crate::net::transport::{self, TransportError, with_timeout};
use amos_protocol::{NodeId, NodeIdentity};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::session::drive_session;
use super::{PEER_TIMEOUT, connect_timeout, runtime};
use crate::api::node::Node;
use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::events::{self, Observer, PeerOutcome, Role, SessionStats, SyncEvent, SyncResult};
use crate::home::Home;
use crate::store::replica::PeerInfo;
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
            let matches = crate::store::replica::peers_named(&peers, want);
            match matches.as_slice() {
                [p] if p.dialable() => vec![(*p).clone()],
                [p] if !p.syncs() => {
                    return Err(NodeError::BadInput(format!(
                        "peer {} has policy none: a relay link carries no facts, so there is \
                         nothing to sync with it",
                        p.node_id
                    )));
                }
                [p] => {
                    return Err(NodeError::BadInput(format!(
                        "peer {} has no address (add one with `amos peers add ID ADDR --policy P`)",
                        p.node_id
                    )));
                }
                [] => {
                    return Err(NodeError::unknown_with(
                        UnknownKind::Peer,
                        want,
                        format!("unknown peer {want:?}"),
                    ));
                }
                _ => return Err(NodeError::BadInput(format!("ambiguous peer {want:?}"))),
            }
        }
        None => peers.into_iter().filter(PeerInfo::dialable).collect(),
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

/// The periodic loop's pacing (`amos serve --sync-every`, docs/design.md
/// §7.8): the shared `amos_sync::Pacing` — each pass after the period
/// ±10 %, a peer that failed `n` passes in a row tried only every `2^n`
/// periods (at most 32) — with peers named by NodeId text.
pub type Pacing = amos_sync::Pacing<String>;

/// One periodic pass: every due peer with an address, outcomes recorded in
/// `pacing`.
pub(crate) async fn periodic_pass(
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
            .filter(|x| x.dialable() && p.due(&x.node_id, now))
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
    let started_ms = SystemClock.now_ms();
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
        digest_agree: None,
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
            o.digest_agree = s.digest_agree;
        }
        Err((result, e)) => {
            // The caller reports the outcome (a command's result line,
            // serve's log): said once, not also here at warn.
            info!("sync with {}: {} ({e})", peer.node_id, result.as_str());
            o.result = result;
            o.error = Some(e);
        }
    }
    record_result(home, &peer.node_id, o.result, started_ms).await;
    o
}

/// Note the outcome of a sync that started at `started_ms` in the peers
/// table (`amos peers list`, `amos status`); a failure never hides a
/// success recorded since that start. A failure to note it is logged,
/// never fatal to the pass.
pub(crate) async fn record_result(home: &Home, peer: &str, result: SyncResult, started_ms: u64) {
    let Ok(id) = peer.parse::<NodeId>() else {
        return;
    };
    super::session::note(home, &format!("the sync result for {peer}"), move |n| {
        n.peer_record_result_since(&id, result.as_str(), started_ms)
    })
    .await;
}

pub(crate) async fn dial_and_sync(
    home: &Home,
    identity: &NodeIdentity,
    peer: &PeerInfo,
    observer: Option<Observer>,
) -> std::result::Result<SessionStats, (SyncResult, String)> {
    let failed = |e: &dyn std::fmt::Display| (SyncResult::Failed, e.to_string());
    let unreachable = |e: &dyn std::fmt::Display| (SyncResult::Unreachable, e.to_string());
    let expected: NodeId = peer.node_id.parse().map_err(|e| failed(&e))?;
    // Through a relay (docs/design.md §7.11): an endpoint over a pipe,
    // then the very same dial as a direct one.
    let relayed = match &peer.via {
        Some(via) => {
            let relay: NodeId = via.parse().map_err(|e| failed(&e))?;
            let relay_addr = peer.via_addr.as_deref().ok_or_else(|| {
                unreachable(&format!(
                    "its relay {} is not a registered peer with an address",
                    relay.short()
                ))
            })?;
            match super::relay::client::dial_via(identity, relay, relay_addr, expected).await {
                Ok(r) => Some(r),
                Err(e @ TransportError::Refused { .. }) => {
                    return Err((SyncResult::Refused, e.to_string()));
                }
                Err(e @ TransportError::Config(_)) => return Err(failed(&e)),
                Err(e) => return Err(unreachable(&e)),
            }
        }
        None => None,
    };
    let (endpoint, addr) = match &relayed {
        Some(r) => (r.endpoint.clone(), r.addr),
        None => {
            let addr_text = peer
                .addr
                .as_deref()
                .ok_or_else(|| failed(&"the peer has no address"))?;
            let addr =
                match tokio::time::timeout(connect_timeout(), tokio::net::lookup_host(addr_text))
                    .await
                {
                    Ok(Ok(mut addrs)) => addrs.next().ok_or_else(|| {
                        unreachable(&format!("{addr_text} resolves to no address"))
                    })?,
                    Ok(Err(e)) => {
                        return Err(unreachable(&format!("cannot resolve {addr_text}: {e}")));
                    }
                    Err(_) => return Err(unreachable(&format!("resolving {addr_text} timed out"))),
                };
            let endpoint = transport::client_endpoint(
                bind_for(addr),
                identity,
                Arc::new(move |id: &NodeId| *id == expected),
            )
            .map_err(|e| failed(&e))?;
            (endpoint, addr)
        }
    };
    let conn = match with_timeout(
        connect_timeout(),
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
        Ok((send, recv)) => {
            // `connect` accepted only an id we offered: `amos/1` at the least.
            let version = transport::negotiated(&conn).unwrap_or(1);
            drive_session(home.clone(), expected, version, send, recv, None, observer).await
        }
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

/// Handshake with each of `targets` (NodeId, address) and close at once
/// (no session), all at once: for `amos doctor`. Each waits at most
/// [`connect_timeout`] for its address and its handshake.
pub fn probe_blocking(home: &Home, targets: &[(NodeId, String)]) -> Result<Vec<Probe>> {
    let identity = Arc::new(home.load_identity()?);
    runtime()?.block_on(async {
        let mut set = JoinSet::new();
        for (i, (expected, addr_text)) in targets.iter().cloned().enumerate() {
            let identity = identity.clone();
            set.spawn(async move { (i, probe(&identity, expected, &addr_text).await) });
        }
        let mut out = vec![Probe::Unreachable; targets.len()];
        while let Some(r) = set.join_next().await {
            match r {
                Ok((i, p)) => out[i] = p,
                // A panicked probe is a bug; its target reads unreachable.
                Err(e) => warn!("a probe failed: {e}"),
            }
        }
        Ok(out)
    })
}

/// Handshake with `expected` at `addr_text` and close at once.
async fn probe(identity: &NodeIdentity, expected: NodeId, addr_text: &str) -> Probe {
    let addr =
        match tokio::time::timeout(connect_timeout(), tokio::net::lookup_host(addr_text)).await {
            Ok(Ok(mut a)) => a.next(),
            _ => None,
        };
    let Some(addr) = addr else {
        return Probe::Unreachable;
    };
    let Ok(endpoint) = transport::client_endpoint(
        bind_for(addr),
        identity,
        Arc::new(move |id: &NodeId| *id == expected),
    ) else {
        return Probe::Unreachable;
    };
    let r = with_timeout(
        connect_timeout(),
        "the handshake",
        transport::connect(&endpoint, addr, expected),
    )
    .await;
    let probe = match r {
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
        // Nothing answered: nothing to drain either.
        Err(_) => return Probe::Unreachable,
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    probe
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Push makes sessions with one peer overlap: a dial that failed
    /// before a later one got through must not leave the peer marked dead.
    #[test]
    fn a_failure_never_hides_a_success_recorded_after_it_started() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::new(tmp.path().join("home"));
        Node::init(&home, None).unwrap();
        let mut node = Node::open(&home).unwrap();
        let peer = NodeId([5; 32]);
        node.peer_add(&peer.to_string(), Some("127.0.0.1:9"), "full")
            .unwrap();
        let last = |node: &Node| node.peer_list().unwrap()[0].last_result.clone();
        // Never succeeded: any failure is recorded.
        node.peer_record_result_since(&peer, "unreachable", 0)
            .unwrap();
        assert_eq!(last(&node).as_deref(), Some("unreachable"));
        node.peer_record_result_since(&peer, "ok", 0).unwrap();
        // A failure of a dial started before that success: not recorded.
        node.peer_record_result_since(&peer, "unreachable", 1)
            .unwrap();
        assert_eq!(last(&node).as_deref(), Some("ok"));
        // One started after it: recorded.
        let later = SystemClock.now_ms() + 60_000;
        node.peer_record_result_since(&peer, "refused", later)
            .unwrap();
        assert_eq!(last(&node).as_deref(), Some("refused"));
    }
}
