//! The mesh: N nodes with in-memory replicas on one virtual clock, syncing
//! with their neighbours in the topology through the product's sans-IO
//! session (`amos_sync::session::Session`), two per session, exchanging
//! `SyncV1` messages encoded and decoded with the real codec; every frame's
//! size is counted (4 length bytes + the message) and each takes the link's
//! latency plus its size over the bandwidth, in order per direction.
//!
//! What it models: periodic passes and push on change, each node deciding
//! with the very state machines `amos serve` runs (`amos_sync::Pacing`:
//! each pass after the period ±10 %, failing peers backed off;
//! `amos_sync::PushScheduler`, docs/design.md §7.10), fed as serve feeds
//! them — the node's `seq` after every write or applied batch, the `seq`s
//! a batch from a peer took, every session's end — on the virtual clock
//! in milliseconds, the jitter drawn from the run's seeded stream; a QUIC handshake (one
//! round trip before the first frame); message loss (a lost frame breaks
//! the connection: both sides abort, as a transport error does); partitions
//! and nodes going offline (dials fail after the handshake timeout, live
//! sessions across break); restores from backup (old state, new epoch).
//!
//! Relayed links and NAT (docs/design.md §7.11, [`RelayConfig`]): a mesh
//! may have pure relay nodes (after its members, policy `none` with every
//! member, syncing with no one, so holding no fact of anyone's) and
//! members behind NAT (accepting nothing inbound). A **relayed link**
//! between A and B exists only through a relay: A reaches B through the
//! relay B listens at (B's standing connection to it, dropped when either
//! goes offline or a partition cuts them, re-made with `serve`'s backoff),
//! so it needs that relay online and both A–R and B–R reachable; a link
//! to a member behind NAT that is not relayed is dialled only by that
//! member (the direction rule, [`Reach`]). A relayed session's frames go
//! through a pipe that checks them end to end and may be faulted as the
//! product's `AMOS_RELAY_FAULT` faults them ([`RelayFault`]): corrupted or
//! dropped frames stall the session until the node's peer timeout fails
//! it, reordered ones are put back in order (`relays`).
//!
//! Versions (docs/design.md §13): each node speaks a protocol version and
//! decodes a set of features ([`Speaks`]: this release by default, or an
//! older one, as a node's `AMOS_PROTOCOL` narrows it); a session runs at
//! the version the handshake's ALPN choice and each side's
//! `amos_protocol::wire::negotiate` give, its digests of that version's
//! kind (`amos_sync::digest::SET_DIGEST_SINCE`); a side holds back what the
//! peer's hello says it cannot decode (`Features::split_decodable`), keeps
//! the count and sends it once the peer upgrades, exchanging no digest
//! meanwhile (`amos_sync::session::HeldBack`). A fact that reaches a node
//! that cannot decode it fails its batch, as it would on that build, and is
//! counted ([`Stats::undecodable`]). [`Mesh::set_speaks`] upgrades a node
//! (a restart).
//!
//! Invariant: a run is a function of its configuration and seed — ordered
//! maps only, one seeded random stream per concern, no real clock, no
//! threads that change order.
//!
//! Boundary: decides no merge, gate, export or scheduling rule (the
//! replica and the schedulers are the product's); no sockets, no files, no
//! real time. Simplifications of its own: a pair has one session at a
//! time, so a push due to a peer already in a session with this node
//! starts when that session ends; a pipe's frame is one `SyncV1` message
//! (the product's are QUIC packets), the handshake
//! [`relays::HANDSHAKE_FRAMES`] of them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use amos_acl::PeerPolicy;
use amos_protocol::wire::{Features, SyncMessage, SyncV1, Watermark};
use amos_protocol::{
    AgentId, FactBody, Grants, Hlc, MembershipFact, MemoryAcl, MemoryContent, MemoryFixed,
    MemoryId, MemoryText, MemoryType, NodeId, NodeIdentity, OrgScope, Register, Scope, TeamFact,
    TeamId, Validity,
};
use amos_sync::digest::SET_DIGEST_SINCE;
use amos_sync::repair::{self, ItemId, ItemSet};
use amos_sync::session::{Action, Event, SKIP_EXPORT, Session};
use amos_sync::{Pacing, PushConfig, PushScheduler, SessionOutcome};

use crate::clock::{Clock, MS, Micros, SECOND};
use crate::replica::SimReplica;
use crate::rng::Rng;
use crate::topology::Graph;

mod frames;
pub mod relays;
mod versions;

pub use relays::{FaultKind, Reach, RelayConfig, RelayFault};
use relays::{Frame, Pipe, Relays};
pub use versions::{Speaks, session_versions};

/// Facts per `Facts` message (the node's `EXPORT_BATCH`).
pub const EXPORT_BATCH: usize = 64;
/// Virtual time 0 as wall-clock milliseconds (what the HLCs see).
pub const BASE_MS: u64 = 1_780_000_000_000;
/// The agents of the workload; `a0` and `a1` are in team `t`.
pub const AGENTS: [&str; 4] = ["a0", "a1", "a2", "a3"];
/// The team every node's org graph gets from node 0.
pub const TEAM: &str = "t";

/// A simulated mesh.
#[derive(Debug, Clone)]
pub struct MeshConfig {
    pub nodes: usize,
    pub degree: usize,
    pub seed: u64,
    /// Nodes are spread over this many operators: two nodes of one operator
    /// are `full` peers, of two operators `scoped` peers.
    pub operators: usize,
    pub scoped: PeerPolicy,
    /// One-way latency of a link, drawn per link in this range.
    pub latency: (Micros, Micros),
    /// Link bandwidth, bytes per millisecond.
    pub bytes_per_ms: u64,
    /// Probability that a frame is lost (and its connection with it).
    pub loss: f64,
    /// The sync period; `None`: no periodic passes.
    pub period: Option<Micros>,
    pub push: Option<PushConfig>,
    /// A dial to a peer that cannot be reached fails after this.
    pub handshake_timeout: Micros,
    /// Relay nodes, NAT and relayed links (none by default).
    pub relay: RelayConfig,
}

impl MeshConfig {
    /// Defaults: 2 operators, scoped peers `global,team:t`, links 5–40 ms
    /// at 10 Mbit/s, no loss, a 60 s period, push off.
    pub fn new(nodes: usize, degree: usize, seed: u64) -> MeshConfig {
        MeshConfig {
            nodes,
            degree,
            seed,
            operators: 2,
            scoped: PeerPolicy::scoped([Scope::Global, Scope::Team(team())])
                .unwrap_or(PeerPolicy::Full),
            latency: (5 * MS, 40 * MS),
            bytes_per_ms: 1_250,
            loss: 0.0,
            period: Some(60 * SECOND),
            push: None,
            handshake_timeout: 5 * SECOND,
            relay: RelayConfig::default(),
        }
    }
}

fn team() -> TeamId {
    TeamId::parse(TEAM).unwrap_or_else(|_| unreachable!("a valid slug"))
}

pub fn agent(i: usize) -> AgentId {
    AgentId::parse(AGENTS[i % AGENTS.len()]).unwrap_or_else(|_| unreachable!("a valid slug"))
}

#[derive(Debug)]
enum Ev {
    /// A periodic pass of a node, of the schedule generation it was set in.
    Tick(usize, u64),
    /// Node `.0`'s push scheduler asked to be polled at `.1` (stale if
    /// the node has asked for another time since).
    PushWake(usize, Micros),
    Connect(u64),
    Deliver {
        sid: u64,
        to: usize,
        bytes: Vec<u8>,
        depth: u32,
    },
    /// The side `1 - to` ended its stream (after all it sent).
    Ended {
        sid: u64,
        to: usize,
        depth: u32,
    },
    DialFailed(u64),
    SetOnline(usize, bool),
    /// A frame of a relayed session reaches side `to` (`relays`).
    Piped {
        sid: u64,
        to: usize,
        frame: Frame,
    },
    /// A reordering relay's hold on frame `index` from side `from` ends.
    PipeProbe {
        sid: u64,
        from: usize,
        index: u64,
    },
    /// A relayed session waited for a frame that never comes: it fails.
    Stalled(u64),
    /// A member retries its standing connection to its relay (of the
    /// generation of its retries then).
    Standing(usize, u64),
}

/// One node of the mesh.
#[derive(Debug)]
pub struct SimNode {
    pub identity: NodeIdentity,
    pub replica: SimReplica,
    pub operator: usize,
    pub online: bool,
    /// Its protocol version and features ([`Mesh::set_speaks`]).
    pub speaks: Speaks,
    /// Periodic passes: the backoff from failing neighbours.
    pacing: Pacing<usize>,
    /// Push on change, while push is on and the node is up.
    pusher: Option<PushScheduler<usize>>,
    /// When its push scheduler is to be polled next.
    wake: Option<Micros>,
}

/// Counters over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub sessions_opened: u64,
    pub sessions_ok: u64,
    pub sessions_failed: u64,
    pub push_sessions: u64,
    pub messages: u64,
    pub bytes: u64,
    pub facts_sent: u64,
    pub facts_applied: u64,
    pub facts_refused: u64,
    pub facts_deferred: u64,
    pub digests_agree: u64,
    pub digests_disagree: u64,
    /// Sessions a side refused: the other is older than it accepts.
    pub sessions_refused: u64,
    /// Facts an export held back: the peer lacks a feature they need.
    pub facts_held_back: u64,
    /// Facts that reached a node that cannot decode them (each failed its
    /// batch): never, if every side holds back what the other lacks.
    pub undecodable: u64,
    /// Sessions a side broke off: the other broke the protocol (two sides
    /// at different versions, a message out of turn). Never, if both
    /// follow it.
    pub protocol_errors: u64,
    /// Sessions through a relay (`relays`).
    pub relayed_sessions: u64,
    /// Frames a faulty relay altered, dropped; frames an end refused: their
    /// end-to-end check failed (every altered one).
    pub relay_frames_altered: u64,
    pub relay_frames_dropped: u64,
    pub relay_frames_rejected: u64,
}

/// One finished (or failed) session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub dialler: usize,
    pub acceptor: usize,
    pub started: Micros,
    pub ended: Micros,
    pub ok: bool,
    pub push: bool,
    pub bytes: u64,
    pub messages: u64,
    /// Round trips on the session's critical path (the longest chain of
    /// messages each sent on receipt of the previous, halved, rounded up).
    pub round_trips: u32,
    pub facts_sent: u64,
    /// The session ran a range-based repair to its end (`amos_sync::repair`).
    pub repaired: bool,
    /// The protocol version it ran at, the dialler's side (1 if it never
    /// connected).
    pub version: u16,
    /// The relay it went through, if relayed.
    pub via: Option<usize>,
}

#[derive(Debug)]
struct Live {
    a: usize,
    b: usize,
    sides: [Option<Session>; 2],
    done: [bool; 2],
    started: Micros,
    bytes: u64,
    messages: u64,
    depth: u32,
    last: [Micros; 2],
    latency: Micros,
    push: bool,
    facts: u64,
    /// The protocol version each side runs at (set on connecting).
    versions: [u16; 2],
    /// Through a relay: the relay and its pipe's state.
    via: Option<usize>,
    pipe: Option<Pipe>,
}

fn pair(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

/// The mesh and its virtual clock.
#[derive(Debug)]
pub struct Mesh {
    pub cfg: MeshConfig,
    pub graph: Graph,
    pub nodes: Vec<SimNode>,
    pub stats: Stats,
    pub records: Vec<SessionRecord>,
    clock: Clock<Ev>,
    rng: Rng,
    by_id: BTreeMap<NodeId, usize>,
    latency: BTreeMap<(usize, usize), Micros>,
    sessions: BTreeMap<u64, Live>,
    next_sid: u64,
    inflight: BTreeMap<(usize, usize), u64>,
    /// Pushes (dialler, peer) due while the pair had a session in flight:
    /// each starts when that session ends.
    queued: BTreeSet<(usize, usize)>,
    partition: Option<Vec<u32>>,
    watch: Option<(Register, Hlc, Vec<Option<Micros>>)>,
    next_mem: u64,
    schedule_gen: u64,
    relays: Relays,
    relay_rng: Rng,
    /// BLAKE3 of every fact written, as written ([`Mesh::is_written`]).
    written: BTreeSet<[u8; 32]>,
}

impl Mesh {
    /// Build the topology, identities, operators and policies (every node
    /// registers every other: a fleet whose operators name their peers
    /// ahead; only neighbours sync), and node 0's team `t` with `a0`, `a1`.
    /// Relays come after the members, with the policy `none` both ways
    /// and no link to sync over.
    pub fn new(cfg: MeshConfig) -> Mesh {
        let root = Rng::new(cfg.seed);
        let mut graph = Graph::random_regular(cfg.nodes, cfg.degree, &mut root.fork(1));
        let relays = Relays::new(&cfg, &graph, &mut root.fork(5));
        graph.add_isolated(cfg.relay.relays);
        let mut r = root.fork(2);
        let mut nodes: Vec<SimNode> = (0..cfg.nodes + cfg.relay.relays)
            .map(|i| {
                let mut secret = r.bytes::<32>();
                secret[..8].copy_from_slice(&(i as u64).to_le_bytes());
                let identity = NodeIdentity::from_secret(secret);
                let replica = SimReplica::new(identity.node_id(), r.bytes());
                SimNode {
                    identity,
                    replica,
                    operator: r.below(cfg.operators.max(1) as u64) as usize,
                    online: true,
                    speaks: Speaks::current(),
                    pacing: Pacing::default(),
                    pusher: None,
                    wake: None,
                }
            })
            .collect();
        let ids: Vec<NodeId> = nodes.iter().map(|n| n.identity.node_id()).collect();
        for i in 0..nodes.len() {
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    let p = if relays.is_relay(i) || relays.is_relay(j) {
                        PeerPolicy::none()
                    } else if nodes[i].operator == nodes[j].operator {
                        PeerPolicy::Full
                    } else {
                        cfg.scoped.clone()
                    };
                    nodes[i].replica.set_peer_policy(*id, p);
                }
            }
        }
        let mut lat = root.fork(3);
        let latency = graph
            .edges()
            .into_iter()
            .map(|e| (e, lat.range(cfg.latency.0, cfg.latency.1)))
            .collect();
        let by_id = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let mut mesh = Mesh {
            graph,
            nodes,
            stats: Stats::default(),
            records: Vec::new(),
            clock: Clock::default(),
            rng: root.fork(4),
            by_id,
            latency,
            sessions: BTreeMap::new(),
            next_sid: 0,
            inflight: BTreeMap::new(),
            queued: BTreeSet::new(),
            partition: None,
            watch: None,
            next_mem: 0,
            schedule_gen: 0,
            relays,
            relay_rng: root.fork(6),
            written: BTreeSet::new(),
            cfg,
        };
        mesh.set_schedule(mesh.cfg.period, mesh.cfg.push);
        if !mesh.nodes.is_empty() {
            mesh.write_org();
        }
        mesh
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn now(&self) -> Micros {
        self.clock.now()
    }

    pub fn now_ms(&self) -> u64 {
        BASE_MS + self.clock.now() / MS
    }

    pub fn node_id(&self, n: usize) -> NodeId {
        self.nodes[n].identity.node_id()
    }

    // ------------------------------------------------------------ workload

    fn local_write(&mut self, n: usize, body: FactBody) -> Hlc {
        let now = self.now_ms();
        let node = &mut self.nodes[n];
        let f = node.replica.write(&node.identity, body, now);
        self.written.insert(*blake3::hash(&f.to_bytes()).as_bytes());
        self.note_change(n);
        self.observe_seq(n);
        f.fact.clock
    }

    fn write_org(&mut self) {
        let origin = self.node_id(0);
        self.local_write(
            0,
            FactBody::Team(TeamFact {
                id: team(),
                origin,
                name: "Team t".into(),
                present: true,
            }),
        );
        for a in 0..2 {
            self.local_write(
                0,
                FactBody::Membership(MembershipFact {
                    scope: OrgScope::Team(team()),
                    agent: agent(a),
                    role: "member".into(),
                    present: true,
                }),
            );
        }
    }

    /// Node `n` writes a new memory owned by agent `owner` with `grants`
    /// (content, then its acl). Returns its id and the acl's clock.
    pub fn write_memory(&mut self, n: usize, owner: usize, grants: Grants) -> (MemoryId, Hlc) {
        self.write_memory_valid(n, owner, grants, Validity::default())
    }

    /// [`Mesh::write_memory`] with a valid time (docs/design.md §12): a
    /// content fact a node lacking `Features::VALID_TIME` cannot decode
    /// when `validity` is not open.
    pub fn write_memory_valid(
        &mut self,
        n: usize,
        owner: usize,
        grants: Grants,
        validity: Validity,
    ) -> (MemoryId, Hlc) {
        let now = self.now_ms();
        self.next_mem += 1;
        let mut rnd = [0u8; 10];
        rnd[..8].copy_from_slice(&self.next_mem.to_be_bytes());
        rnd[8..].copy_from_slice(&(n as u16).to_be_bytes());
        let id = MemoryId::new(now, rnd);
        let fixed = MemoryFixed {
            owner: agent(owner),
            created_ms: now,
            origin: self.node_id(n),
        };
        self.local_write(
            n,
            FactBody::MemoryContent(MemoryContent {
                id,
                fixed: fixed.clone(),
                kind: MemoryType::default(),
                text: MemoryText::Plain(format!("memory {} of node {n}", self.next_mem)),
                tags: vec!["sim".into()],
                importance: 0.5,
                confidence: 1.0,
                pinned: false,
                expires_ms: None,
                supersedes: None,
                validity,
            }),
        );
        let clock = self.set_grants(n, id, fixed, grants);
        (id, clock)
    }

    /// Node `n` (the memory's origin) sets its grants: a share or an
    /// unshare. Returns the acl fact's clock.
    pub fn set_grants(
        &mut self,
        n: usize,
        id: MemoryId,
        fixed: MemoryFixed,
        grants: Grants,
    ) -> Hlc {
        self.local_write(n, FactBody::MemoryAcl(MemoryAcl { id, fixed, grants }))
    }

    /// Whether `fact` (wire bytes) is, byte for byte, a fact some node of
    /// the mesh wrote.
    pub fn is_written(&self, fact: &[u8]) -> bool {
        self.written.contains(blake3::hash(fact).as_bytes())
    }

    /// The fixed fields of a memory node `n` holds.
    pub fn fixed_of(&self, n: usize, id: &MemoryId) -> Option<MemoryFixed> {
        self.nodes[n]
            .replica
            .store
            .memories
            .get(id)
            .map(|m| m.fixed.clone())
    }

    // ------------------------------------------------------------ watching

    /// Record, per node, when it first holds `register` at `clock` (or a
    /// later one). The writer's own arrival is now.
    pub fn watch(&mut self, register: Register, clock: Hlc) {
        let n = self.len();
        self.watch = Some((register, clock, vec![None; n]));
        for i in 0..n {
            self.note_change(i);
        }
    }

    /// When each node first held the watched fact.
    pub fn arrivals(&self) -> Vec<Option<Micros>> {
        self.watch.as_ref().map(|w| w.2.clone()).unwrap_or_default()
    }

    fn note_change(&mut self, n: usize) {
        let now = self.now();
        if let Some((reg, clock, seen)) = &mut self.watch
            && seen[n].is_none()
            && self.nodes[n]
                .replica
                .store
                .facts
                .get(reg)
                .is_some_and(|f| f.fact.clock >= *clock)
        {
            seen[n] = Some(now);
        }
    }

    // ------------------------------------------------------------ faults

    /// Take node `n` off the network now (live sessions with it break) or
    /// bring it back (as a restarted `serve`: nothing pushed, its passes
    /// resume).
    pub fn set_online(&mut self, n: usize, online: bool) {
        self.clock.after(0, Ev::SetOnline(n, online));
        self.step_now();
    }

    /// Node `n` goes offline at `from` and comes back at `until`.
    pub fn schedule_offline(&mut self, n: usize, from: Micros, until: Micros) {
        self.clock.at(from, Ev::SetOnline(n, false));
        self.clock.at(until.max(from), Ev::SetOnline(n, true));
    }

    /// Split the mesh: nodes in different groups cannot reach each other
    /// (sessions across break now); `None` heals it.
    pub fn partition(&mut self, groups: Option<Vec<u32>>) {
        self.partition = groups;
        let broken: Vec<u64> = self
            .sessions
            .keys()
            .copied()
            .filter(|s| !self.path_up(*s))
            .collect();
        for sid in broken {
            self.finish(sid, false);
        }
        self.check_standing();
    }

    /// Node `n` restarts speaking `speaks` — an upgrade, or, before any
    /// session, a node of an older release in a mixed mesh: sessions with
    /// it break, and it comes back as a restarted `serve` (no backoff, no
    /// news). What it holds and what is held back for it stay.
    pub fn set_speaks(&mut self, n: usize, speaks: Speaks) {
        self.break_sessions_of(n);
        self.nodes[n].speaks = speaks;
        self.nodes[n].pacing = Pacing::default();
        self.start_pusher(n);
    }

    /// Every live session with node `n` — or through it, a relay —
    /// breaks (its process stops).
    fn break_sessions_of(&mut self, n: usize) {
        let live: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, l)| l.a == n || l.b == n || l.via == Some(n))
            .map(|(s, _)| *s)
            .collect();
        for sid in live {
            self.finish(sid, false);
        }
    }

    /// A copy of node `n`'s replica as a backup holds it.
    pub fn backup(&self, n: usize) -> SimReplica {
        self.nodes[n].replica.clone()
    }

    /// Restore node `n` from `backup` under a new log epoch (sessions with
    /// it break, as the node restarts).
    pub fn restore(&mut self, n: usize, backup: &SimReplica) {
        self.break_sessions_of(n);
        let epoch = self.rng.bytes();
        self.nodes[n].replica.restore(backup, epoch);
        self.observe_seq(n);
    }

    fn reachable(&self, a: usize, b: usize) -> bool {
        self.nodes[a].online
            && self.nodes[b].online
            && self
                .partition
                .as_ref()
                .is_none_or(|g| g.get(a).copied().unwrap_or(0) == g.get(b).copied().unwrap_or(0))
    }

    /// The neighbours node `n` dials: those it can reach, directly or
    /// through a relay ([`Reach`]).
    pub fn dials(&self, n: usize) -> Vec<usize> {
        self.graph
            .neighbours(n)
            .filter(|&j| self.reach(n, j) != Reach::Never)
            .collect()
    }

    // ------------------------------------------------------------ running

    /// Switch scheduling from now on: periodic passes every `period` (each
    /// node's first at a random point of the first period), push with
    /// `push`. Passes of the old schedule are dropped; sessions in flight
    /// finish.
    pub fn set_schedule(&mut self, period: Option<Micros>, push: Option<PushConfig>) {
        self.cfg.period = period;
        if push != self.cfg.push {
            self.cfg.push = push;
            // As if every `serve` restarted with the new settings: a new
            // scheduler, its baseline the store as it is.
            self.queued.clear();
            for n in 0..self.nodes.len() {
                self.start_pusher(n);
            }
        }
        self.schedule_gen += 1;
        if let Some(period) = period {
            for n in 0..self.nodes.len() {
                let at = self.rng.below(period.max(1));
                self.clock.after(at, Ev::Tick(n, self.schedule_gen));
            }
        }
    }

    /// Run every event due up to `t`, then move the clock to `t`.
    pub fn run_until(&mut self, t: Micros) {
        while let Some(ev) = self.clock.pop_until(t) {
            self.handle(ev);
        }
        self.clock.advance_to(t);
    }

    pub fn run_for(&mut self, d: Micros) {
        self.run_until(self.now().saturating_add(d));
    }

    fn step_now(&mut self) {
        self.run_until(self.now());
    }

    /// No session in flight, no push scheduler waiting to be polled.
    pub fn is_quiet(&self) -> bool {
        self.sessions.is_empty()
            && self.queued.is_empty()
            && self.nodes.iter().all(|n| n.wake.is_none())
    }

    /// Run until quiet (or `limit` from now); returns whether it got quiet.
    pub fn run_until_quiet(&mut self, limit: Micros) -> bool {
        let end = self.now().saturating_add(limit);
        loop {
            if self.is_quiet() {
                return true;
            }
            match self.clock.next_due() {
                Some(t) if t <= end => {
                    if let Some(ev) = self.clock.pop_until(t) {
                        self.handle(ev);
                    }
                }
                _ => {
                    self.clock.advance_to(end);
                    return self.is_quiet();
                }
            }
        }
    }

    /// Node `n` dials every neighbour now (a `sync now`).
    pub fn pass(&mut self, n: usize) {
        let ns = self.dials(n);
        for j in ns {
            self.dial(n, j, false);
        }
        self.step_now();
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Tick(n, generation) => {
                if generation != self.schedule_gen {
                    return;
                }
                if let Some(period) = self.cfg.period {
                    let wait =
                        Pacing::<usize>::next_wait(Duration::from_micros(period), self.rng.unit());
                    let next = Micros::try_from(wait.as_micros()).unwrap_or(period);
                    self.clock.after(next, Ev::Tick(n, generation));
                    if self.nodes[n].online {
                        let now_ms = self.sched_ms();
                        let ns = self.dials(n);
                        for j in ns {
                            if self.nodes[n].pacing.due(&j, now_ms) {
                                self.dial(n, j, false);
                            }
                        }
                    }
                }
            }
            Ev::PushWake(n, at) => {
                if self.nodes[n].wake == Some(at) {
                    self.nodes[n].wake = None;
                    self.drive_push(n);
                }
            }
            Ev::Connect(sid) => self.connect(sid),
            Ev::Deliver {
                sid,
                to,
                bytes,
                depth,
            } => self.deliver(sid, to, &bytes, depth),
            Ev::Ended { sid, to, depth } => self.ended(sid, to, depth),
            Ev::DialFailed(sid) | Ev::Stalled(sid) => self.finish(sid, false),
            Ev::Piped { sid, to, frame } => self.piped(sid, to, frame),
            Ev::PipeProbe { sid, from, index } => self.pipe_probe(sid, from, index),
            Ev::Standing(c, generation) => self.standing_retry(c, generation),
            Ev::SetOnline(n, online) => {
                if self.nodes[n].online == online {
                    return;
                }
                self.nodes[n].online = online;
                if online {
                    // A restarted `serve`: no backoff, no news (its store
                    // at start is the baseline); its next pass comes at its
                    // next period.
                    self.nodes[n].pacing = Pacing::default();
                    self.start_pusher(n);
                    self.standing_restart(n);
                } else {
                    // The process is down: its news dies with it.
                    self.nodes[n].pusher = None;
                    self.nodes[n].wake = None;
                    self.queued.retain(|&(a, _)| a != n);
                    self.break_sessions_of(n);
                }
                self.check_standing();
            }
        }
    }

    /// The schedulers' clock: virtual milliseconds, monotonic.
    fn sched_ms(&self) -> u64 {
        self.now() / MS
    }

    /// A new push scheduler for node `n` (push on, the node up) whose
    /// peers are its neighbours and whose baseline is its `seq` now, as
    /// `serve` starts one; none if push is off.
    fn start_pusher(&mut self, n: usize) {
        let now_ms = self.sched_ms();
        let dials = self.dials(n);
        let node = &mut self.nodes[n];
        node.wake = None;
        node.pusher = self.cfg.push.filter(|_| node.online).map(|cfg| {
            let mut s = PushScheduler::new(cfg);
            s.set_peers(dials);
            s.observe_seq(node.replica.seq(), now_ms);
            s
        });
    }

    /// Node `n`'s `seq` as its push scheduler's watcher reads it.
    fn observe_seq(&mut self, n: usize) {
        let now_ms = self.sched_ms();
        let node = &mut self.nodes[n];
        if let Some(s) = node.pusher.as_mut() {
            s.observe_seq(node.replica.seq(), now_ms);
            self.drive_push(n);
        }
    }

    /// Poll node `n`'s push scheduler: dial whom it names, and set its
    /// timer for when it asks to be polled again.
    fn drive_push(&mut self, n: usize) {
        let now = self.now();
        let now_ms = self.sched_ms();
        let Some(s) = self.nodes[n].pusher.as_mut() else {
            return;
        };
        let due = s.poll(now_ms);
        // Never before now: a wake in the past would repeat for ever.
        let wake = s.next_wake().map(|ms| ms.saturating_mul(MS).max(now + 1));
        for j in due {
            if self.inflight.contains_key(&pair(n, j)) {
                self.queued.insert((n, j));
            } else {
                self.dial(n, j, true);
            }
        }
        if wake != self.nodes[n].wake {
            self.nodes[n].wake = wake;
            if let Some(at) = wake {
                self.clock.at(at, Ev::PushWake(n, at));
            }
        }
    }

    /// After a session between dialler `a` and acceptor `b` (which started
    /// at `started`) ended, each side's schedulers hear it as `serve`'s
    /// would: the dialler's pacing (a periodic dial) or push scheduler (a
    /// push), the acceptor's push scheduler. Then a push queued behind it
    /// starts, and both schedulers are polled.
    fn after_session(&mut self, a: usize, b: usize, started: Micros, ok: bool, push: bool) {
        let outcome = if ok {
            SessionOutcome::Ok
        } else {
            SessionOutcome::Failed
        };
        let (now_ms, started_ms) = (self.sched_ms(), started / MS);
        let dialler = &mut self.nodes[a];
        if push {
            if let Some(s) = dialler.pusher.as_mut() {
                s.push_finished(&b, outcome, now_ms);
            }
        } else {
            if let Some(period) = self.cfg.period
                && dialler.online
            {
                let period = Duration::from_micros(period);
                dialler.pacing.record(&b, outcome, now_ms, period);
            }
            if let Some(s) = dialler.pusher.as_mut() {
                s.session_ended(&b, outcome, started_ms);
            }
        }
        if let Some(s) = self.nodes[b].pusher.as_mut() {
            s.session_ended(&a, outcome, started_ms);
        }
        for (x, y) in [(a, b), (b, a)] {
            if !self.inflight.contains_key(&pair(x, y)) && self.queued.remove(&(x, y)) {
                self.dial(x, y, true);
            }
        }
        self.drive_push(a);
        self.drive_push(b);
    }

    fn dial(&mut self, a: usize, b: usize, push: bool) {
        let key = pair(a, b);
        if self.inflight.contains_key(&key) {
            return;
        }
        let sid = self.next_sid;
        self.next_sid += 1;
        self.inflight.insert(key, sid);
        self.stats.sessions_opened += 1;
        if push {
            self.stats.push_sessions += 1;
        }
        let reach = self.reach(a, b);
        let latency = match reach {
            Reach::Via(r) => self.relays.latency(a, r) + self.relays.latency(b, r),
            _ => self
                .latency
                .get(&key)
                .copied()
                .unwrap_or(self.cfg.latency.0),
        };
        let via = match reach {
            Reach::Via(r) => Some(r),
            _ => None,
        };
        self.sessions.insert(
            sid,
            Live {
                a,
                b,
                sides: [None, None],
                done: [false; 2],
                started: self.now(),
                bytes: 0,
                messages: 0,
                depth: 0,
                last: [0; 2],
                latency,
                push,
                facts: 0,
                versions: [1; 2],
                via,
                pipe: None,
            },
        );
        if let Some(r) = via {
            self.dial_via(sid, a, b, r);
        } else if self.reachable(a, b) && !self.behind_nat(b) {
            self.clock.after(2 * latency, Ev::Connect(sid));
        } else {
            self.clock
                .after(self.cfg.handshake_timeout, Ev::DialFailed(sid));
        }
    }

    fn connect(&mut self, sid: u64) {
        let Some(l) = self.sessions.get(&sid) else {
            return;
        };
        let (a, b) = (l.a, l.b);
        if !self.path_up(sid) {
            self.finish(sid, false);
            return;
        }
        // The refusing side sends one `Refused` line; the session counts
        // as failed on both.
        let Ok(versions) = session_versions(self.nodes[a].speaks, self.nodes[b].speaks) else {
            self.stats.sessions_refused += 1;
            self.finish(sid, false);
            return;
        };
        let mut first = Vec::new();
        for (side, (me, peer)) in [(a, b), (b, a)].into_iter().enumerate() {
            let peer_id = self.node_id(peer);
            let r = &self.nodes[me].replica;
            let (s, acts) = Session::start_versioned(
                r.epoch,
                r.watermarks.get(&peer_id).copied(),
                &[],
                versions[side],
                self.nodes[me].speaks.features,
            );
            if let Some(l) = self.sessions.get_mut(&sid) {
                l.sides[side] = Some(s);
                l.versions = versions;
            }
            first.push((side, acts));
        }
        for (side, acts) in first {
            self.run_actions(sid, side, acts, 0);
        }
    }

    fn ends(&self, sid: u64, side: usize) -> Option<(usize, usize)> {
        let l = self.sessions.get(&sid)?;
        Some(if side == 0 { (l.a, l.b) } else { (l.b, l.a) })
    }

    /// The version `side` runs the session at, and the features its peer
    /// decodes (its hello's; before it came, what the version implies).
    fn peer_decodes(&self, sid: u64, side: usize) -> (u16, Features) {
        let Some(l) = self.sessions.get(&sid) else {
            return (1, Features::implied_by(1));
        };
        let v = l.versions[side];
        let peer = l.sides[side].as_ref().and_then(Session::peer_version);
        (v, peer.map_or(Features::implied_by(v), |(_, f)| f))
    }

    /// The bytes a session of the protocol before repair (an export from
    /// 0 once an epoch changed, before `amos_sync::repair`) would move between node `r` and each neighbour it can reach now:
    /// both hellos, both exports as `Facts` frames, both dones — encoded,
    /// not sent. What a restore cost before `amos_sync::repair`.
    pub fn full_resend_bytes(&self, r: usize) -> u64 {
        let frame = |m: SyncV1| SyncMessage::V1(m).encode().len() as u64 + 4;
        let mut total = 0;
        for j in self.graph.neighbours(r) {
            if !self.reachable(r, j) {
                continue;
            }
            let side = |me: usize, peer: usize| {
                let (a, b) = (&self.nodes[me].replica, &self.nodes[peer].replica);
                let mine = a.watermarks.get(&self.node_id(peer)).copied();
                let theirs = b.watermarks.get(&self.node_id(me)).copied();
                let since = match theirs {
                    Some(w) if w.epoch == a.epoch && w.seq >= 0 => w.seq,
                    _ => 0,
                };
                let peer_reset = mine.is_none_or(|w| w.epoch != b.epoch);
                let (facts, high) = a.export_for(&self.node_id(peer), since, peer_reset);
                let mut bytes = frame(SyncV1::Hello {
                    epoch: a.epoch,
                    have: mine,
                    listen: Vec::new(),
                });
                for chunk in facts.chunks(EXPORT_BATCH) {
                    bytes += frame(SyncV1::Facts {
                        facts: chunk.to_vec(),
                    });
                }
                bytes
                    + frame(SyncV1::Done {
                        upto: Watermark {
                            epoch: a.epoch,
                            seq: high,
                        },
                    })
            };
            total += side(r, j) + side(j, r);
        }
        total
    }

    /// The node with this id.
    pub fn index_of(&self, id: &NodeId) -> Option<usize> {
        self.by_id.get(id).copied()
    }
}
