//! Pairing (docs/design.md §7), the node's side: one-time invites
//! (`amos team invite`), the inviter's check of a joiner's proof, and the
//! joiner's record of its inviter. The network exchange lives in `net::join`;
//! the code format and the proof in `amos_protocol::pairing`.
//!
//! Invariant: an invite pairs at most one node, before it expires; checking
//! a proof, marking the invite used and recording the joiner happen in one
//! transaction, so a failed or refused join records nothing.
//! Invariant: the secret is never stored; the inviter keeps only the key
//! proofs are checked with (`pairing::proof_key`), until the invite is used.
//! Invariant: a joiner's agent (`amos join --as`) becomes a member only of
//! the scopes the invite's policy names, written by the inviter as its own
//! org facts in the transaction that accepts the join; a joiner can never
//! make one of the inviter's own agents a member of anything. The joiner
//! registers its own `--as` agent, in the transaction that records the
//! inviter (agents are local: a roster names agents, a node registers them).
//! Boundary: no sockets; a join's network leg passes in what it saw.

use crate::error::{Rule, UnknownKind};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use amos_acl::PeerPolicy;
use amos_protocol::pairing::{self, PairingCode, ProofBinding};
use amos_protocol::{AgentId, FactBody, MeshKey, NodeId, OrgScope, Scope};
use rand::RngExt;
use serde::Serialize;

use crate::api::node::Node;
use crate::api::org::{AgentAt, project_member_fact, team_member_fact};
use crate::api::peers::upsert_peer;
use crate::error::{NodeError, Result};
use crate::events::PeerOutcome;
use crate::home::{Home, write_atomic};
use crate::store::{Readable, invites, org, peers};

/// Longest life of an invite.
pub const MAX_INVITE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A freshly made invite: what `amos team invite` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Invite {
    /// The pairing code to give the joiner.
    pub code: String,
    /// Unix milliseconds.
    pub expires: u64,
    /// The team it invites into.
    pub team: String,
    /// The policy each side gives the other (`team:TEAM` by default).
    pub policy: String,
    /// Addresses the joiner may dial, carried in the code.
    pub addrs: Vec<String>,
}

/// What the inviter answers a valid join with.
pub struct Welcome {
    /// The invite's policy.
    pub policy: PeerPolicy,
    /// The inviter's name.
    pub name: String,
    /// The inviter's mesh key, if it has one.
    pub mesh_key: Option<MeshKey>,
    /// The scopes the joiner's agent is a member of on the inviter now.
    pub member_of: Vec<OrgScope>,
}

/// What `amos join` reports.
#[derive(Debug, Clone, Serialize)]
pub struct JoinReport {
    /// The inviter's node id.
    pub peer: String,
    /// Its name, as registered here.
    pub name: String,
    /// The policy we give it.
    pub policy: String,
    /// The address it answered on.
    pub addr: Option<String>,
    /// What happened to our mesh key.
    pub mesh_key: MeshKeyOutcome,
    /// The joiner's agent (`--as`) the inviter made a member, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The scopes the inviter made it a member of (`team:T`, `project:P`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub member_of: Vec<String>,
    /// The agent named by `--as` that this join registered on this node
    /// (absent when it was registered already): agents are local, and the
    /// joiner's operator named it to act as it here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registered: Option<String>,
    /// The first sync (`None` for `--offline`).
    pub first_sync: Option<PeerOutcome>,
}

impl JoinReport {
    /// `paired with ID (NAME) at ADDR, policy P`: the line `amos join` and
    /// the console print (no parentheses when the inviter gave no name).
    pub fn paired_line(&self) -> String {
        let name = match self.name.as_str() {
            "" => String::new(),
            n => format!(" ({n})"),
        };
        format!(
            "paired with {}{name} at {}, policy {}",
            self.peer,
            self.addr.as_deref().unwrap_or("no address"),
            self.policy
        )
    }
}

/// What happened to the joiner's mesh key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MeshKeyOutcome {
    /// We had none and took the inviter's.
    Adopted,
    /// We already had the same one.
    Same,
    /// We have another one and kept it (bundles between the two will not
    /// decrypt until the operator sets one key on both).
    KeptOwn,
    /// The inviter has none.
    None,
}

/// How a joiner reached its inviter: at one of the code's addresses, or
/// through the code's relay at one of its addresses (docs/design.md §7.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinRoute {
    /// Dialled directly at this address.
    Direct(String),
    /// Through `relay`, dialled at `addr`.
    Via {
        /// The relay.
        relay: NodeId,
        /// Where it answered.
        addr: String,
    },
}

impl JoinRoute {
    /// As a join's report shows it.
    pub fn describe(&self) -> String {
        match self {
            JoinRoute::Direct(a) => a.clone(),
            JoinRoute::Via { relay, addr } => format!("relay {} at {addr}", relay.short()),
        }
    }
}

/// The refusal of a wrong secret or an unknown invite (one answer for both).
const UNKNOWN_CODE: &str =
    "unknown pairing code: ask the inviter for a new one (`amos team invite TEAM`)";
/// The refusal of a code that already paired a node.
const CODE_USED: &str = "this pairing code was already used (a code pairs one node): ask the \
                         inviter for a new one (`amos team invite TEAM`)";
/// The refusal of an expired code.
const CODE_EXPIRED: &str = "this pairing code has expired: ask the inviter for a new one \
                            (`amos team invite TEAM --ttl 1h`)";

impl Node {
    /// Make a one-time invite into `team` (docs/design.md §7). `policy` defaults to
    /// `team:TEAM`; `addrs` default to where `amos serve` last listened.
    pub fn team_invite(
        &mut self,
        team: &str,
        policy: Option<&str>,
        ttl: Duration,
        addrs: &[String],
    ) -> Result<Invite> {
        self.team_invite_via(team, policy, ttl, addrs, None)
    }

    /// [`Node::team_invite`] whose code also names `via`, a relay peer
    /// (NodeId, unique prefix or name) with an address, through which the
    /// joiner reaches this node (`amos team invite --via`, docs/design.md
    /// §7.11). The relay must serve the joiner too: its operator registers
    /// the joiner as a relay link before it joins.
    pub fn team_invite_via(
        &mut self,
        team: &str,
        policy: Option<&str>,
        ttl: Duration,
        addrs: &[String],
        via: Option<&str>,
    ) -> Result<Invite> {
        let via = match via {
            None => None,
            Some(v) => {
                let peers = self.peer_list()?;
                let named = crate::store::replica::peers_named(&peers, v);
                match named.as_slice() {
                    [r] if r.relay && r.addr.is_some() => Some(pairing::RelayHint {
                        relay: r
                            .node_id
                            .parse()
                            .map_err(|e| NodeError::Corrupt(format!("stored peer id: {e}")))?,
                        addrs: r.addr.iter().cloned().collect(),
                    }),
                    [r] => {
                        return Err(NodeError::BadInput(format!(
                            "peer {} is not a relay link with an address: add it with \
                             `amos peers add RELAY_ID ADDR --policy none --relay`",
                            r.node_id
                        )));
                    }
                    [] => {
                        return Err(NodeError::unknown_with(
                            UnknownKind::Peer,
                            v,
                            format!("unknown relay {v:?}"),
                        ));
                    }
                    _ => return Err(NodeError::BadInput(format!("ambiguous relay {v:?}"))),
                }
            }
        };
        let team_id = self.store().read(|r| {
            crate::api::scopes::resolve_team(r, team, crate::api::scopes::Unheld::AsTyped)
        })?;
        if !self.store().read(|r| Ok(org::team_present(r, &team_id)))? {
            return Err(NodeError::unknown_with(
                UnknownKind::Team,
                &team_id,
                format!("no such team: {team_id}"),
            ));
        }
        // Invites for a team come from its origin (or a full peer of it).
        self.store().read(|r| {
            crate::api::org::check_org_authority(
                r,
                self.node_id(),
                &OrgScope::Team(team_id.clone()),
            )
        })?;
        let policy: PeerPolicy = match policy {
            Some(p) => self.store().read(|r| {
                crate::api::scopes::resolve_policy(r, p, crate::api::scopes::Unheld::AsTyped)
            })?,
            None => PeerPolicy::scoped([amos_protocol::Scope::Team(team_id.clone())])?,
        };
        if ttl.is_zero() || ttl > MAX_INVITE_TTL {
            return Err(NodeError::BadInput(format!(
                "--ttl must be between 1s and {}",
                humantime::format_duration(MAX_INVITE_TTL)
            )));
        }
        let addrs = if addrs.is_empty() && via.is_some() {
            // Through a relay: where it listens may not be reachable, and
            // the relay is tried first anyway.
            listen_hints(self.home()).unwrap_or_default()
        } else if addrs.is_empty() {
            listen_hints(self.home())?
        } else {
            for a in addrs {
                check_hint(a)?;
            }
            addrs.to_vec()
        };
        if addrs.len() > pairing::MAX_ADDRS {
            return Err(NodeError::BadInput(format!(
                "at most {} addresses fit in a code",
                pairing::MAX_ADDRS
            )));
        }
        let now = self.now_ms();
        let expires = now.saturating_add(ttl.as_millis() as u64);
        let secret: [u8; 16] = rand::rng().random();
        let code = PairingCode {
            inviter: self.node_id(),
            addrs: addrs.clone(),
            secret,
            policy: policy.to_string(),
            expires_ms: expires,
            via,
        };
        self.store.write(|tx| {
            invites::insert(
                tx,
                &pairing::invite_id(&secret),
                &pairing::proof_key(&secret),
                team_id.as_str(),
                &policy.to_string(),
                now,
                expires,
            )
        })?;
        Ok(Invite {
            code: code.encode(),
            expires,
            team: team_id.to_string(),
            policy: policy.to_string(),
            addrs,
        })
    }

    /// The inviter's side of a join: check that `invite` is pending and that
    /// `proof` proves its secret for this `binding`, then — in the same
    /// transaction — mark it used and record `joiner` as a peer with the
    /// invite's policy. Any failure records nothing and is
    /// [`NodeError::Refused`] with a reason fit to send to the joiner.
    pub fn accept_join(
        &mut self,
        joiner: &NodeId,
        invite: &[u8; 16],
        proof: &[u8; 32],
        binding: ProofBinding<'_>,
        name: &str,
        addr: Option<&str>,
    ) -> Result<Welcome> {
        self.accept_join_as(joiner, invite, proof, binding, name, addr, None)
    }

    /// [`Node::accept_join`] for a joiner that names its `agent`: in the
    /// same transaction, the inviter also makes that agent a member (role
    /// `member`) of every team the invite's policy names, and of every
    /// project it names together with the project's team (project grants
    /// need both). A `full` or `global` policy names no team: nothing is
    /// written. Refused (nothing recorded) if the agent is one of this
    /// node's own agents and not already such a member: a joiner cannot
    /// grant our agents anything.
    #[allow(clippy::too_many_arguments)]
    pub fn accept_join_as(
        &mut self,
        joiner: &NodeId,
        invite: &[u8; 16],
        proof: &[u8; 32],
        binding: ProofBinding<'_>,
        name: &str,
        addr: Option<&str>,
        agent: Option<&AgentId>,
    ) -> Result<Welcome> {
        let me = self.node_id();
        if *joiner == me {
            return Err(NodeError::refused(
                Rule::PairWithSelf,
                "a node cannot pair with itself: run `amos join` on the other node".into(),
            ));
        }
        if agent.is_some_and(|a| !a.is_valid()) {
            return Err(NodeError::refused(
                Rule::JoinAgent,
                "malformed agent id: --as takes an agent id (lower case, digits, `.`, `_`, `-`)"
                    .into(),
            ));
        }
        let now = self.now_ms();
        let name = clean_name(name);
        let (_, (policy, member_of)) = self.commit(|tx| {
            let row = invites::get(tx, &invite[..])?
                .map(|i| (i.proof_key, i.policy, i.expires_ms, i.used_ms));
            // One answer for a wrong secret and an unknown invite: a guesser
            // learns nothing about which invites exist.
            let unknown = || NodeError::refused(Rule::UnknownCode, UNKNOWN_CODE.into());
            let (key, policy, expires, used) = row.ok_or_else(unknown)?;
            let key: [u8; 32] = key.as_slice().try_into().map_err(|_| unknown())?;
            if !pairing::proof_matches(&key, binding, joiner, &me, &policy, proof) {
                return Err(unknown());
            }
            if used.is_some() {
                return Err(NodeError::refused(Rule::CodeUsed, CODE_USED.into()));
            }
            if now as i64 >= expires {
                return Err(NodeError::refused(Rule::CodeExpired, CODE_EXPIRED.into()));
            }
            let policy: PeerPolicy = policy
                .parse()
                .map_err(|_| NodeError::Corrupt(format!("invite with a bad policy: {policy}")))?;
            invites::mark_used(tx, &invite[..], &joiner.0[..], now)?;
            upsert_peer(tx, me, joiner, addr, Some(&name), &policy, now)?;
            let (bodies, member_of) = match agent {
                Some(agent) => joiner_memberships(tx, &policy, agent)?,
                None => (Vec::new(), Vec::new()),
            };
            Ok((bodies, (policy, member_of)))
        })?;
        Ok(Welcome {
            policy,
            name: self.name().to_owned(),
            mesh_key: self.mesh_key()?,
            member_of,
        })
    }

    /// The joiner's side, once the inviter welcomed it: record the inviter
    /// as a peer at `addr` with the code's policy and, in the same
    /// transaction, register `agent` (`amos join --as`) here if it is not
    /// yet; then take the inviter's mesh key if we have none. Returns what
    /// happened to the key and whether `agent` was registered now.
    pub fn record_inviter(
        &mut self,
        code: &PairingCode,
        route: &JoinRoute,
        welcome: &Welcome,
        agent: Option<&AgentId>,
    ) -> Result<(MeshKeyOutcome, bool)> {
        if welcome.policy.to_string() != code.policy {
            return Err(NodeError::Failed(format!(
                "the inviter answered with policy {} but the code says {}; nothing recorded",
                welcome.policy, code.policy
            )));
        }
        let now = self.now_ms();
        let me = self.node_id();
        let name = clean_name(&welcome.name);
        let (_, registered) = self.commit(|tx| {
            match route {
                JoinRoute::Direct(addr) => upsert_peer(
                    tx,
                    me,
                    &code.inviter,
                    Some(addr),
                    Some(&name),
                    &welcome.policy,
                    now,
                )?,
                JoinRoute::Via { relay, addr } => {
                    // The relay: kept as it is if registered (made a relay
                    // link, given the address if it has none), else
                    // registered as a pure relay.
                    match crate::store::replica::peer_policy(&*tx, relay)? {
                        Some(_) => {
                            if peers::addr(&*tx, relay)?.flatten().is_none() {
                                peers::set_addr(tx, relay, addr)?;
                            }
                            let via = peers::via(&*tx, relay)?;
                            peers::set_link(tx, relay, true, via.as_ref())?;
                        }
                        None => {
                            upsert_peer(tx, me, relay, Some(addr), None, &PeerPolicy::none(), now)?;
                            peers::set_link(tx, relay, true, None)?;
                        }
                    }
                    upsert_peer(
                        tx,
                        me,
                        &code.inviter,
                        None,
                        Some(&name),
                        &welcome.policy,
                        now,
                    )?;
                    let relay_link = peers::is_relay(&*tx, &code.inviter)?;
                    peers::set_link(tx, &code.inviter, relay_link, Some(relay))?;
                }
            }
            joiner_agent(tx, agent)
        })?;
        let key = match (&welcome.mesh_key, self.mesh_key()?) {
            (None, _) => MeshKeyOutcome::None,
            (Some(theirs), None) => {
                self.mesh_key_set(&theirs.to_string())?;
                MeshKeyOutcome::Adopted
            }
            (Some(theirs), Some(ours)) if ours.as_bytes() == theirs.as_bytes() => {
                MeshKeyOutcome::Same
            }
            (Some(_), Some(_)) => MeshKeyOutcome::KeptOwn,
        };
        Ok((key, registered))
    }
}

/// The joiner's own `agent` (`amos join --as`), registered here if it is
/// not yet (kind `agent`, no team: its memberships are the inviter's
/// facts, which the first sync or bundle brings): the fact to commit, and
/// whether there is one.
fn joiner_agent(
    conn: &(impl Readable + ?Sized),
    agent: Option<&AgentId>,
) -> Result<(Vec<FactBody>, bool)> {
    match agent {
        Some(a) if !org::agent_present(conn, a)? => Ok((
            vec![FactBody::Agent(amos_protocol::AgentFact {
                id: a.clone(),
                kind: "agent".into(),
                display_name: a.to_string(),
                present: true,
            })],
            true,
        )),
        _ => Ok((Vec::new(), false)),
    }
}

/// The membership facts that make a joiner's `agent` a member of what
/// `policy` names (see [`Node::accept_join_as`]), and the scopes it is a
/// member of afterwards. Memberships it already holds are not rewritten.
fn joiner_memberships(
    tx: &mut crate::store::Tx<'_>,
    policy: &PeerPolicy,
    agent: &AgentId,
) -> Result<(Vec<FactBody>, Vec<OrgScope>)> {
    let refused = |e: NodeError| match e {
        NodeError::BadInput(_) | NodeError::Unknown { .. } | NodeError::Protocol(_) => {
            NodeError::refused(
                Rule::JoinAgent,
                format!("the invite's scope cannot take agent {agent}: {e}"),
            )
        }
        e => e,
    };
    // Each team once, teams before projects (a project needs its team).
    let mut wanted: Vec<OrgScope> = Vec::new();
    let mut bodies = Vec::new();
    for scope in policy.scopes() {
        match scope {
            Scope::Team(t) => {
                let s = OrgScope::Team(t.clone());
                if !wanted.contains(&s) {
                    wanted.push(s);
                }
            }
            Scope::Project(p) => {
                let (_, team) =
                    project_member_fact(tx, p, agent, true, AgentAt::Joiner).map_err(refused)?;
                let t = OrgScope::Team(team);
                if !wanted.contains(&t) {
                    wanted.push(t);
                }
                wanted.push(OrgScope::Project(p.clone()));
            }
            _ => {}
        }
    }
    wanted.sort_by_key(|s| matches!(s, OrgScope::Project(_)));
    wanted.dedup();
    let ours = org::agent_present(tx, agent)?;
    for scope in &wanted {
        if org::is_member(tx, scope, agent)? {
            continue;
        }
        if ours {
            return Err(NodeError::refused(
                Rule::JoinAgent,
                format!(
                    "agent {agent} is one of the inviter's own agents and not a member of {scope}: \
                 a join cannot add it (pair without --as, or under another agent id)"
                ),
            ));
        }
        let fact = match scope {
            OrgScope::Team(t) => team_member_fact(tx, t, agent, true, AgentAt::Joiner),
            OrgScope::Project(p) => {
                project_member_fact(tx, p, agent, true, AgentAt::Joiner).map(|(f, _)| f)
            }
        }
        .map_err(refused)?;
        bodies.push(fact);
    }
    Ok((bodies, wanted))
}

/// `amos join CODE --offline`: record the inviter (at the code's first
/// address, with the code's policy) without a network, and keep an offline
/// proof of the code's secret that this node's bundles to the inviter carry
/// (`amos bundle export --for INVITER`), so the inviter can accept this node
/// from its first bundle. `agent` (`--as`, not carried offline) is
/// registered here if it is not yet, in the same transaction.
pub fn join_offline(home: &Home, code_text: &str, agent: Option<&AgentId>) -> Result<JoinReport> {
    let mut node = Node::open(home)?;
    let me = node.node_id();
    let code = read_code(code_text, &me, node.now_ms())?;
    let policy: PeerPolicy = code.policy.parse().map_err(|_| {
        NodeError::BadInput(format!("the code names a bad policy {:?}", code.policy))
    })?;
    let mut carried = pairing::invite_id(&code.secret).to_vec();
    carried.extend_from_slice(&pairing::join_proof(
        &pairing::proof_key(&code.secret),
        ProofBinding::Offline,
        &me,
        &code.inviter,
        &code.policy,
    ));
    let addr = code.addrs.first().cloned();
    let now = node.now_ms();
    let (_, registered) = node.commit(|tx| {
        upsert_peer(tx, me, &code.inviter, addr.as_deref(), None, &policy, now)?;
        peers::set_join_proof(tx, &code.inviter, &carried)?;
        joiner_agent(tx, agent)
    })?;
    let shown = node
        .store()
        .read(|r| Ok(crate::api::scopes::policy_label(r, &policy)))?;
    Ok(JoinReport {
        peer: code.inviter.to_string(),
        name: String::new(),
        policy: shown,
        addr,
        mesh_key: MeshKeyOutcome::None,
        agent: None,
        member_of: Vec::new(),
        registered: registered.then(|| agent.map(ToString::to_string)).flatten(),
        first_sync: None,
    })
}

/// `amos bundle export --for PEER` with a PEER this node has not
/// registered: bad input that says both ways to register it. A node that
/// joined offline with one of our codes is registered when its first
/// bundle is imported here (its proof names the invite; we cannot know its
/// NodeId before); or the operator registers it by hand, with the policy
/// of the invite still pending when there is one.
pub(crate) fn unknown_peer(
    conn: &(impl Readable + ?Sized),
    peer: &str,
    me: &NodeId,
    now_ms: u64,
) -> NodeError {
    let policy = match invites::pending_policies(conn, now_ms).as_deref() {
        Ok([one]) => one.parse::<PeerPolicy>().map_or_else(
            |_| one.clone(),
            |p| crate::api::scopes::policy_label(conn, &p),
        ),
        _ => "P".into(),
    };
    NodeError::unknown_with(
        UnknownKind::Peer,
        peer,
        format!(
            "unknown peer {peer}: this node has not registered it. If it joined with `amos join \
         CODE --offline`, import its first bundle here (made there by `amos bundle export FILE \
         --for {me}`): that registers it with the invite's policy. Or register it now: \
         `amos peers add {peer} --policy {policy}`"
        ),
    )
}

/// The offline pairing proof this node's bundles to `peer` carry, if any.
pub fn join_proof_for(
    conn: &(impl Readable + ?Sized),
    peer: &NodeId,
) -> Result<Option<amos_protocol::PairingProof>> {
    Ok(peers::join_proof(conn, peer)?.and_then(|b| {
        let invite: [u8; 16] = b.get(..16)?.try_into().ok()?;
        let proof: [u8; 32] = b.get(16..48)?.try_into().ok()?;
        Some(amos_protocol::PairingProof { invite, proof })
    }))
}

/// Whether any invite is still pending: the serving node accepts a handshake
/// from an unknown key only then (and that connection may only pair).
pub fn invites_pending(conn: &(impl Readable + ?Sized), now_ms: u64) -> Result<bool> {
    invites::any_pending(conn, now_ms)
}

/// Decode a code typed by a user: a clear [`NodeError::BadInput`] for a
/// mistyped, expired or self-addressed code.
pub fn read_code(text: &str, me: &NodeId, now_ms: u64) -> Result<PairingCode> {
    let code = PairingCode::decode(text).map_err(|e| NodeError::BadInput(e.to_string()))?;
    if code.inviter == *me {
        return Err(NodeError::BadInput(
            "this pairing code was made by this node".into(),
        ));
    }
    if code.is_expired(now_ms) {
        return Err(NodeError::BadInput(format!(
            "this pairing code expired at {}",
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_millis(code.expires_ms)
            )
        )));
    }
    if code.addrs.is_empty() {
        return Err(NodeError::BadInput(
            "this pairing code names no address to reach the inviter".into(),
        ));
    }
    Ok(code)
}

/// Record where `amos serve` listens (atomically), for pairing codes.
pub fn record_listen(home: &Home, addr: SocketAddr) -> Result<()> {
    write_atomic(&home.listen_path(), addr.to_string().as_bytes(), 0o644)
}

/// The address `amos serve` last recorded.
pub fn recorded_listen(home: &Home) -> Option<SocketAddr> {
    std::fs::read_to_string(home.listen_path())
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Address hints from the recorded listen address. A wildcard address is
/// replaced by the address of the interface the default route leaves from
/// (found by `connect` on an unsent UDP socket: no packet is sent), then
/// loopback.
fn listen_hints(home: &Home) -> Result<Vec<String>> {
    let listen = recorded_listen(home).ok_or_else(|| {
        NodeError::BadInput(
            "no address to put in the code: run `amos serve` first (it records where it \
             listens) or pass --addr HOST:PORT"
                .into(),
        )
    })?;
    if !listen.ip().is_unspecified() {
        return Ok(vec![listen.to_string()]);
    }
    let mut hints = Vec::new();
    if let Some(ip) = default_route_ip() {
        hints.push(SocketAddr::new(ip, listen.port()).to_string());
    }
    hints.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port()).to_string());
    Ok(hints)
}

fn default_route_ip() -> Option<IpAddr> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    // A documentation address (RFC 5737): connect() only picks a route.
    s.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

fn check_hint(addr: &str) -> Result<()> {
    let ok = addr.len() <= 255
        && addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(NodeError::BadInput(format!(
            "bad --addr {addr:?}: expected HOST:PORT"
        )))
    }
}

/// A peer's self-chosen name, made safe to store and print.
fn clean_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    /// The CLI's default life of an invite (`--ttl 10m`).
    const DEFAULT_INVITE_TTL: Duration = Duration::from_secs(10 * 60);

    use super::*;
    use crate::clock::FixedClock;

    #[test]
    fn the_paired_line_names_the_inviter_and_leaves_out_an_empty_name() {
        let mut r = JoinReport {
            peer: "abc".into(),
            name: String::new(),
            policy: "team:apollo".into(),
            addr: None,
            mesh_key: MeshKeyOutcome::None,
            agent: None,
            member_of: Vec::new(),
            registered: None,
            first_sync: None,
        };
        assert_eq!(
            r.paired_line(),
            "paired with abc at no address, policy team:apollo"
        );
        r.name = "laptop".into();
        r.addr = Some("127.0.0.1:4747".into());
        assert_eq!(
            r.paired_line(),
            "paired with abc (laptop) at 127.0.0.1:4747, policy team:apollo"
        );
    }

    const T0: u64 = 1_800_000_000_000;

    fn node_at(home: &Home, now: u64) -> Node {
        Node::open_with_clock(home, Arc::new(FixedClock(now))).unwrap()
    }

    /// An inviter with team `apollo`, a joiner identity, and one invite
    /// (10 minutes from `T0`).
    fn setup() -> (tempfile::TempDir, Home, NodeId, PairingCode) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("a"));
        Node::init(&home, Some("a")).unwrap();
        let joiner_home = Home::new(dir.path().join("b"));
        Node::init(&joiner_home, Some("b")).unwrap();
        let joiner = Node::open(&joiner_home).unwrap().node_id();
        let mut a = node_at(&home, T0);
        a.team_create("apollo", None).unwrap();
        let inv = a
            .team_invite(
                "apollo",
                None,
                DEFAULT_INVITE_TTL,
                &["127.0.0.1:4747".into()],
            )
            .unwrap();
        let code = PairingCode::decode(&inv.code).unwrap();
        (dir, home, joiner, code)
    }

    fn try_join(home: &Home, now: u64, joiner: &NodeId, code: &PairingCode) -> Result<Welcome> {
        let mut a = node_at(home, now);
        let proof = pairing::join_proof(
            &pairing::proof_key(&code.secret),
            ProofBinding::Session(b"tls"),
            joiner,
            &code.inviter,
            &code.policy,
        );
        a.accept_join(
            joiner,
            &pairing::invite_id(&code.secret),
            &proof,
            ProofBinding::Session(b"tls"),
            "b",
            None,
        )
    }

    fn peers_of(home: &Home) -> usize {
        Node::open(home).unwrap().peer_list().unwrap().len()
    }

    #[test]
    fn an_expired_invite_is_refused_by_the_inviter_and_records_nothing() {
        let (_d, home, joiner, code) = setup();
        let late = T0 + DEFAULT_INVITE_TTL.as_millis() as u64;
        let conn = crate::store::Watch::open(&home.db_path()).unwrap();
        assert!(invites_pending(&conn, late - 1).unwrap());
        assert!(!invites_pending(&conn, late).unwrap());
        let e = try_join(&home, late, &joiner, &code).err().unwrap();
        assert!(e.rule() == Some(Rule::CodeExpired), "{e}");
        assert_eq!(peers_of(&home), 0);
        // The joiner's own check refuses it before dialling, too.
        assert!(read_code(&code.encode(), &joiner, late).is_err());
        assert!(read_code(&code.encode(), &joiner, late - 1).is_ok());
    }

    #[test]
    fn an_invite_pairs_once_and_a_wrong_proof_spends_nothing() {
        let (_d, home, joiner, code) = setup();
        let mut wrong = code.clone();
        wrong.secret[0] ^= 1;
        let e = try_join(&home, T0, &joiner, &wrong).err().unwrap();
        assert!(e.rule() == Some(Rule::UnknownCode), "{e}");
        assert_eq!(peers_of(&home), 0);
        let w = try_join(&home, T0 + 1, &joiner, &code).unwrap();
        let apollo = amos_protocol::TeamId::qualified("apollo", &code.inviter).unwrap();
        assert_eq!(w.policy.to_string(), format!("team:{apollo}"));
        assert_eq!(peers_of(&home), 1);
        let e = try_join(&home, T0 + 2, &joiner, &code).err().unwrap();
        assert!(e.rule() == Some(Rule::CodeUsed), "{e}");
        let conn = crate::store::Watch::open(&home.db_path()).unwrap();
        assert!(!invites_pending(&conn, T0 + 2).unwrap());
    }

    #[test]
    fn invites_need_a_team_an_address_and_a_sane_ttl() {
        let (_d, home, _, _) = setup();
        let mut a = node_at(&home, T0);
        let addr = ["127.0.0.1:4747".to_owned()];
        let e = a
            .team_invite("nope", None, DEFAULT_INVITE_TTL, &addr)
            .err()
            .unwrap();
        assert!(
            matches!(&e, NodeError::Unknown { kind: UnknownKind::Team, name, .. } if name == "nope"),
            "{e:?}"
        );
        for (team, ttl, addrs) in [
            ("apollo", Duration::ZERO, &addr[..]),
            ("apollo", MAX_INVITE_TTL * 2, &addr[..]),
            ("apollo", DEFAULT_INVITE_TTL, &[][..]),
            ("apollo", DEFAULT_INVITE_TTL, &["no-port".to_owned()][..]),
        ] {
            let e = a.team_invite(team, None, ttl, addrs).err().unwrap();
            assert!(
                matches!(e, NodeError::BadInput(_)),
                "{team} {ttl:?} {addrs:?}: {e}"
            );
        }
        assert!(
            a.team_invite("apollo", Some("bogus:x"), DEFAULT_INVITE_TTL, &addr)
                .is_err()
        );
    }

    fn join_as(home: &Home, joiner: &NodeId, code: &PairingCode, agent: &str) -> Result<Welcome> {
        let mut a = node_at(home, T0 + 1);
        let proof = pairing::join_proof(
            &pairing::proof_key(&code.secret),
            ProofBinding::Session(b"tls"),
            joiner,
            &code.inviter,
            &code.policy,
        );
        a.accept_join_as(
            joiner,
            &pairing::invite_id(&code.secret),
            &proof,
            ProofBinding::Session(b"tls"),
            "b",
            None,
            Some(&AgentId::parse(agent).unwrap()),
        )
    }

    fn members(home: &Home, scope: &OrgScope) -> Vec<String> {
        let node = Node::open(home).unwrap();
        ["bob", "alice", "eve"]
            .into_iter()
            .filter(|a| {
                node.store()
                    .read(|r| org::is_member(r, scope, &AgentId::parse(a).unwrap()))
                    .unwrap()
            })
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_project_invite_makes_the_joiners_agent_a_member_of_the_project_and_its_team() {
        let (_d, home, joiner, _) = setup();
        let mut a = node_at(&home, T0);
        a.project_create("moon", "apollo", None).unwrap();
        let inv = a
            .team_invite(
                "apollo",
                Some("project:moon"),
                DEFAULT_INVITE_TTL,
                &["127.0.0.1:4747".into()],
            )
            .unwrap();
        drop(a);
        let code = PairingCode::decode(&inv.code).unwrap();
        let w = join_as(&home, &joiner, &code, "bob").unwrap();
        let by = &code.inviter;
        let team = OrgScope::Team(amos_protocol::TeamId::qualified("apollo", by).unwrap());
        let moon = OrgScope::Project(amos_protocol::ProjectId::qualified("moon", by).unwrap());
        assert_eq!(w.member_of, vec![team.clone(), moon.clone()]);
        assert_eq!(members(&home, &team), vec!["bob"]);
        assert_eq!(members(&home, &moon), vec!["bob"]);
        // The agent lives on the joiner: the inviter did not register it.
        assert!(node_at(&home, T0).agent_list().unwrap().is_empty());
    }

    #[test]
    fn a_join_cannot_add_the_inviters_own_agents_and_records_nothing_then() {
        let (_d, home, joiner, code) = setup();
        let mut a = node_at(&home, T0);
        a.agent_add("eve", "agent", &[]).unwrap();
        a.agent_add("alice", "agent", &["apollo".into()]).unwrap();
        drop(a);
        let e = join_as(&home, &joiner, &code, "eve").err().unwrap();
        assert!(e.rule() == Some(Rule::JoinAgent), "{e}");
        let team =
            OrgScope::Team(amos_protocol::TeamId::qualified("apollo", &code.inviter).unwrap());
        assert_eq!(members(&home, &team), vec!["alice"]);
        assert_eq!(peers_of(&home), 0, "refused: no peer recorded");
        // Already a member: nothing to write, the join goes through.
        let w = join_as(&home, &joiner, &code, "alice").unwrap();
        assert_eq!(w.member_of, vec![team.clone()]);
        assert_eq!(members(&home, &team), vec!["alice"]);
        assert_eq!(peers_of(&home), 1);
    }

    #[test]
    fn a_learned_address_updates_only_a_registered_peer_and_keeps_host_names() {
        let (_d, home, joiner, _) = setup();
        let mut a = node_at(&home, T0);
        let at: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert!(!a.peer_learn_addr(&joiner, at).unwrap(), "unknown peer");
        assert_eq!(peers_of(&home), 0, "never registers one");
        a.peer_add(&joiner.to_string(), None, "team:apollo")
            .unwrap();
        assert!(a.peer_learn_addr(&joiner, at).unwrap());
        assert!(!a.peer_learn_addr(&joiner, at).unwrap(), "unchanged");
        let moved: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        assert!(a.peer_learn_addr(&joiner, moved).unwrap());
        let p = &a.peer_list().unwrap()[0];
        assert_eq!(p.addr.as_deref(), Some("127.0.0.1:5001"));
        assert_eq!(p.policy, "team:apollo");
        a.peer_add(&joiner.to_string(), Some("b.example:4747"), "team:apollo")
            .unwrap();
        assert!(!a.peer_learn_addr(&joiner, at).unwrap(), "host name kept");
        assert_eq!(
            a.peer_list().unwrap()[0].addr.as_deref(),
            Some("b.example:4747")
        );
    }
}
