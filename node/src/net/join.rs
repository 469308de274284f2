//! Pairing over the wire (docs/design.md §7.6): the joiner dials the
//! inviter named in the code; the inviter answers the join.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::net::transport::{self, TransportError, read_frame, with_timeout, write_frame};
use amos_protocol::wire::{SyncMessage, SyncV1};
use amos_protocol::{NodeId, NodeIdentity};
use tracing::{info, warn};

use super::dial::sync_with;
use super::transport::endpoint::bind_for;
use super::{MeshError, PEER_TIMEOUT, connect_timeout, runtime};
use crate::api::node::Node;
use crate::api::pairing::{self, JoinReport, JoinRoute, MeshKeyOutcome, Welcome};
use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::events::Observer;
use crate::home::Home;
use crate::store::replica::PeerInfo;
// ---------------------------------------------------------------------------
// Pairing over the wire (docs/design.md §7)
//
// The joiner dials the inviter named in the code (its key is the only one it
// accepts), opens one stream and sends `Join`: the invite's public id and a
// proof of the secret bound to this TLS session's exported keying material
// (`amos_protocol::pairing::join_proof`), so the secret never crosses the
// wire and a proof cannot be replayed on another connection. The inviter
// answers `Welcome` (after recording the joiner) or `Refused`. The first
// sync then runs as an ordinary session on a fresh connection.

/// A serving inviter that took no join from us: it holds no pending invite.
const NO_JOINS: &str = "the inviter accepts no joins now (the code is unknown, used or expired): \
                        ask for a new code (`amos team invite TEAM` on the inviter, which must be \
                        serving)";

/// TLS exporter label for pairing proofs (RFC 5705/8446 §7.5).
pub(crate) const PAIRING_EXPORTER_LABEL: &[u8] = b"EXPORTER-amos-pairing-v1";

/// A `Join` as the inviter received it.
pub(crate) struct JoinRequest {
    pub(crate) invite: [u8; 16],
    pub(crate) proof: [u8; 32],
    pub(crate) name: String,
    /// Where the joiner serves: the address it came from, with its port.
    pub(crate) addr: Option<String>,
    /// The joiner's agent, to make a member of the invite's scopes.
    pub(crate) agent: Option<amos_protocol::AgentId>,
}

pub(crate) fn exported_key(conn: &quinn::Connection) -> std::result::Result<[u8; 32], MeshError> {
    let mut out = [0u8; 32];
    conn.export_keying_material(&mut out, PAIRING_EXPORTER_LABEL, b"")
        .map_err(|_| MeshError::Closed("cannot export keying material from TLS".into()))?;
    Ok(out)
}

/// The inviter's side of one join: check, record, answer; close.
pub(crate) async fn answer_join(
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
                Ok(Err(NodeError::Refused {
                    message: reason, ..
                })) => {
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

/// The joiner's agent (`amos join --as`, the console's join) after the join
/// rule: [`join_agent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinAgent {
    /// No agent was named.
    None,
    /// Sent with the join: the inviter makes it a member of the invite's
    /// team and project scopes.
    Carried(amos_protocol::AgentId),
    /// Named, but not sent, and why.
    LeftOut {
        /// The agent named.
        agent: amos_protocol::AgentId,
        /// Why it was not sent.
        why: AgentLeftOut,
    },
}

/// Why a joiner's agent is not carried by a join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentLeftOut {
    /// An offline join asks no inviter: its operator adds the agent.
    Offline,
    /// The invite's policy (given) names no team or project to join.
    NoOrgScope(String),
}

impl std::fmt::Display for AgentLeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentLeftOut::Offline => {
                f.write_str("an offline join asks no inviter; its operator adds the agent")
            }
            AgentLeftOut::NoOrgScope(policy) => {
                write!(f, "the invite's policy ({policy}) names no team or project")
            }
        }
    }
}

impl JoinAgent {
    /// The agent the join sends, if any.
    pub fn carried(&self) -> Option<&amos_protocol::AgentId> {
        match self {
            JoinAgent::Carried(a) => Some(a),
            JoinAgent::None | JoinAgent::LeftOut { .. } => None,
        }
    }

    /// The agent named (`--as`), carried or not: the join registers it
    /// on this node if it is not yet.
    pub fn named(&self) -> Option<&amos_protocol::AgentId> {
        match self {
            JoinAgent::Carried(a) | JoinAgent::LeftOut { agent: a, .. } => Some(a),
            JoinAgent::None => None,
        }
    }
}

/// The join rule (docs/design.md §7.6), for every front end that joins:
/// whether a join by `code_text` carries the joiner's `agent`. The agent is
/// one of the joiner's — who will read there what the scope brings — and the
/// join registers it here if it is not yet (agents are local: the
/// operator naming it with `--as` is the intent to act as it on this
/// node); a malformed id is bad input. An offline join carries none, nor
/// does a join whose invite's policy names no team or project (`full`,
/// `global`). A code that does not decode is left for the join itself to
/// report.
pub fn join_agent(code_text: &str, agent: Option<&str>, offline: bool) -> Result<JoinAgent> {
    let Some(name) = agent.map(str::trim).filter(|a| !a.is_empty()) else {
        return Ok(JoinAgent::None);
    };
    let agent = amos_protocol::AgentId::parse(name)?;
    if offline {
        return Ok(JoinAgent::LeftOut {
            agent,
            why: AgentLeftOut::Offline,
        });
    }
    let policy = amos_protocol::pairing::PairingCode::decode(code_text)
        .ok()
        .and_then(|c| c.policy.parse::<amos_acl::PeerPolicy>().ok());
    let names_org = |p: &amos_acl::PeerPolicy| {
        p.scopes().any(|s| {
            matches!(
                s,
                amos_protocol::Scope::Team(_) | amos_protocol::Scope::Project(_)
            )
        })
    };
    Ok(match policy {
        Some(p) if !names_org(&p) => JoinAgent::LeftOut {
            agent,
            why: AgentLeftOut::NoOrgScope(p.to_string()),
        },
        _ => JoinAgent::Carried(agent),
    })
}

/// `amos join CODE [--as AGENT]`: pair with the inviter, then run a first
/// sync (`observer` hears of its progress). `agent` is what [`join_agent`]
/// decided: a carried agent asks the inviter to make it a member of the
/// invite's scopes; a named one is registered here, once the inviter
/// welcomed us, if it is not yet.
pub fn join_blocking(
    home: &Home,
    code_text: &str,
    agent: &JoinAgent,
    observer: Option<Observer>,
) -> Result<JoinReport> {
    let named = agent.named().cloned();
    let agent = agent.carried();
    let identity = Arc::new(home.load_identity()?);
    let code = pairing::read_code(code_text, &identity.node_id(), SystemClock.now_ms())?;
    runtime()?.block_on(async {
        let (route, welcome) = dial_inviter(home, &identity, &code, agent).await?;
        let member_of = welcome.member_of.clone();
        let ((outcome, registered), peer) = tokio::task::spawn_blocking({
            let home = home.clone();
            let code = code.clone();
            let route = route.clone();
            let named = named.clone();
            move || -> Result<((MeshKeyOutcome, bool), PeerInfo)> {
                let mut node = Node::open(&home)?;
                let outcome = node.record_inviter(&code, &route, &welcome, named.as_ref())?;
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
        // As shown here, once the first sync brought the scopes' records.
        let member_of = match Node::open(home) {
            Ok(node) => member_of.iter().map(|s| node.org_scope_label(s)).collect(),
            Err(_) => member_of.iter().map(ToString::to_string).collect(),
        };
        Ok(JoinReport {
            peer: peer.node_id.clone(),
            name: peer.name.clone(),
            policy: peer.policy.clone(),
            addr: Some(route.describe()),
            mesh_key: outcome,
            agent: agent.map(ToString::to_string),
            member_of,
            registered: named.filter(|_| registered).map(|a| a.to_string()),
            first_sync: Some(first),
        })
    })
}

/// Try the code's relay first, if it names one (docs/design.md §7.11),
/// then its addresses in order; the first inviter that answers decides.
/// Refusals are bad input (exit 2), unreachable is a failure.
pub(crate) async fn dial_inviter(
    home: &Home,
    identity: &NodeIdentity,
    code: &amos_protocol::pairing::PairingCode,
    agent: Option<&amos_protocol::AgentId>,
) -> Result<(JoinRoute, Welcome)> {
    let me = JoinerInfo {
        name: home.info()?.name,
        listen_port: pairing::recorded_listen(home).map(|a| a.port()),
        agent: agent.cloned(),
    };
    let inviter = code.inviter;
    let mut unreachable = Vec::new();
    let through = code.via.iter().flat_map(|v| {
        v.addrs.iter().map(move |a| JoinRoute::Via {
            relay: v.relay,
            addr: a.clone(),
        })
    });
    let direct = code.addrs.iter().cloned().map(JoinRoute::Direct);
    for route in through.chain(direct) {
        let hint = route.describe();
        let (endpoint, addr, relayed) = match &route {
            JoinRoute::Direct(_) => (None, None, None),
            JoinRoute::Via { relay, addr } => {
                match super::relay::client::dial_via(identity, *relay, addr, inviter).await {
                    Ok(r) => (Some(r.endpoint.clone()), Some(r.addr), Some(r)),
                    Err(TransportError::Refused { reason, .. }) => {
                        return Err(NodeError::BadInput(format!(
                            "pairing refused by the relay: {reason} (its operator must add \
                             this node with `amos peers add ID --policy none --relay`); nothing \
                             was recorded"
                        )));
                    }
                    Err(e) => {
                        unreachable.push(format!("{hint}: {e}"));
                        continue;
                    }
                }
            }
        };
        let (endpoint, addr) = match (endpoint, addr) {
            (Some(e), Some(a)) => (e, a),
            _ => {
                let JoinRoute::Direct(hint) = &route else {
                    continue;
                };
                let addr =
                    match tokio::time::timeout(connect_timeout(), tokio::net::lookup_host(hint))
                        .await
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
                (endpoint, addr)
            }
        };
        let r = join_at(&endpoint, addr, identity, code, &me).await;
        // A handshake that never completed leaves nothing to drain.
        if !matches!(r, Err(JoinFailure::Unreachable(_))) {
            let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        }
        drop(relayed);
        match r {
            Ok(w) => return Ok((route, w)),
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
    Err(NodeError::Unreachable {
        peer: inviter,
        message: format!(
            "cannot reach the inviter ({}); nothing was recorded",
            unreachable.join("; ")
        ),
    })
}

/// What a joiner tells the inviter about itself.
pub(crate) struct JoinerInfo {
    name: String,
    listen_port: Option<u16>,
    agent: Option<amos_protocol::AgentId>,
}

pub(crate) enum JoinFailure {
    Unreachable(String),
    Refused(String),
    Failed(String),
}

pub(crate) async fn join_at(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    identity: &NodeIdentity,
    code: &amos_protocol::pairing::PairingCode,
    joiner: &JoinerInfo,
) -> std::result::Result<Welcome, JoinFailure> {
    use amos_protocol::pairing::{ProofBinding, invite_id, join_proof, proof_key};
    let conn = match with_timeout(
        connect_timeout(),
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
                "the node at {addr} is not the inviter this code names (forged or stale code): \
                 ask the inviter for a fresh code"
            )));
        }
        Err(TransportError::Refused { .. }) => {
            return Err(JoinFailure::Refused(NO_JOINS.into()));
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
            return Err(JoinFailure::Refused(NO_JOINS.into()));
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
    use amos_protocol::AgentId;
    use amos_protocol::pairing::PairingCode;

    use super::*;

    /// The join rule's table: which agent a join carries, for each kind of
    /// invite and join.
    #[test]
    fn the_join_rule_carries_an_agent_only_to_a_team_or_project() {
        let code = |policy: &str| {
            PairingCode {
                inviter: NodeIdentity::from_secret([7; 32]).node_id(),
                addrs: vec!["127.0.0.1:4747".into()],
                secret: [1; 16],
                policy: policy.into(),
                expires_ms: u64::MAX / 4,
                via: None,
            }
            .encode()
        };
        let bob = AgentId::parse("bob").unwrap();
        let carried = JoinAgent::Carried(bob.clone());
        let left = |why| JoinAgent::LeftOut {
            agent: bob.clone(),
            why,
        };
        let no_org = |p: &str| left(AgentLeftOut::NoOrgScope(p.into()));
        for (code, agent, offline, want) in [
            (code("team:apollo"), Some("bob"), false, carried.clone()),
            (code("project:ui"), Some(" bob "), false, carried.clone()),
            (
                code("global,team:apollo"),
                Some("bob"),
                false,
                carried.clone(),
            ),
            (code("global"), Some("bob"), false, no_org("global")),
            (code("full"), Some("bob"), false, no_org("full")),
            (
                code("team:apollo"),
                Some("bob"),
                true,
                left(AgentLeftOut::Offline),
            ),
            (code("team:apollo"), None, false, JoinAgent::None),
            (code("team:apollo"), Some("  "), true, JoinAgent::None),
            // The join itself reports a code that does not decode.
            ("amos1-garbage".into(), Some("bob"), false, carried.clone()),
        ] {
            let got = join_agent(&code, agent, offline).unwrap();
            assert_eq!(got, want, "{agent:?} offline={offline} {code}");
        }
        // An agent not registered here yet is named too (the join
        // registers it); a malformed id is bad input.
        let zed = AgentId::parse("zed").unwrap();
        let got = join_agent(&code("team:apollo"), Some("zed"), false).unwrap();
        assert_eq!(got, JoinAgent::Carried(zed.clone()));
        assert_eq!(got.named(), Some(&zed));
        let e = join_agent(&code("team:apollo"), Some("Not An Id!"), false).unwrap_err();
        assert!(matches!(e, NodeError::BadInput(_)), "{e}");
    }
}
