//! Relayed links and NAT (docs/design.md §7.11): which way a dialler
//! reaches a peer (directly, through the relay the peer listens at, or not
//! at all), the standing connections relay clients keep, and the frames of
//! a session carried through a relay — counted, faulted as the product's
//! `AMOS_RELAY_FAULT` hook faults them, and checked end to end.
//!
//! The model of the pipe: a relayed session's frames (each `SyncV1`
//! message, and the end of each side's stream) carry an index and a tag
//! (a BLAKE3 keyed hash under a key only the two ends hold: the model of
//! the TLS record protection inside the pipe, which the relay cannot
//! forge). The receiving end drops a frame whose tag fails (as QUIC drops
//! a packet whose authentication fails) and hands on frames in index order
//! (as QUIC's stream reassembly does). A relay that corrupts or drops does
//! so to every frame after the first `after` each way — retransmissions
//! included, as the product's hook does — so a frame lost is never
//! replaced: the stream stalls and the session fails by the node's
//! timeout on the peer ([`PEER_TIMEOUT`]), keeping only what committed
//! before (whole `Facts` batches; the watermark moves on `Done` only). A
//! relay that reorders swaps frames pairwise; the far end reassembles
//! them, a frame held with no successor goes on after a probe timeout
//! ([`PROBE_AFTER`] round trips): the session succeeds, later.
//!
//! Boundary: moves and judges frames only; what a frame means is the
//! session's, what it may change is the replica's.

use super::*;

/// The node's wait for its peer (`net::PEER_TIMEOUT`, 30 s): a stalled
/// session fails after it.
pub const PEER_TIMEOUT: Micros = 30 * SECOND;
/// The frames a QUIC handshake takes each way through the pipe before the
/// first `Hello` (Initial and Handshake packets): a relay that corrupts or
/// drops within them fails the dial after the handshake timeout.
pub const HANDSHAKE_FRAMES: u64 = 2;
/// Round trips after which a frame a reordering relay holds goes on (QUIC's
/// probe timeout sends a packet behind it).
pub const PROBE_AFTER: u64 = 3;
/// A relay client's standing connection, when it drops: the first retry
/// after this, doubling up to [`STANDING_MAX_BACKOFF`] (`amos serve`).
pub const STANDING_BACKOFF: Micros = SECOND;
pub const STANDING_MAX_BACKOFF: Micros = 30 * SECOND;

/// Relayed links and NAT in a mesh (docs/design.md §7.11). The default:
/// none.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RelayConfig {
    /// Pure relay nodes, added after the `nodes` members: each has the
    /// policy `none` with every member (and they with it) and syncs with
    /// no one; members listen at them.
    pub relays: usize,
    /// Probability that a member is behind NAT: it accepts nothing
    /// inbound, so a peer reaches it only through the relay it listens at.
    pub nat: f64,
    /// Probability that a link between two members is relayed: each side
    /// reaches the other through the relay the other listens at, if it
    /// listens at one. A link between two members behind NAT always is.
    pub relayed: f64,
}

/// What a relay does to the frames of its pipes (the product's
/// `AMOS_RELAY_FAULT=KIND:N`): after the first `after` frames each way of
/// each pipe, `Corrupt` alters every frame (the last byte of its content),
/// `Drop` drops every frame, `Reorder` swaps them pairwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayFault {
    pub kind: FaultKind,
    pub after: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    Corrupt,
    Drop,
    Reorder,
}

/// How a dialler reaches a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Direct,
    /// Through this relay (`peers add PEER --via RELAY`).
    Via(usize),
    /// Not dialled: the peer accepts nothing inbound and is not reached
    /// through a relay (registered without an address); it dials us.
    Never,
}

/// The relay layout of a mesh and the relays' state.
#[derive(Debug, Default)]
pub(super) struct Relays {
    /// The first relay's index (= the number of members).
    pub(super) first: usize,
    pub(super) nat: Vec<bool>,
    /// The relay each member listens at (keeps a standing connection to).
    pub(super) home: Vec<Option<usize>>,
    /// Relayed links, `(low, high)`.
    pub(super) relayed: BTreeSet<(usize, usize)>,
    /// Latency of a member's path to a relay.
    pub(super) latency: BTreeMap<(usize, usize), Micros>,
    pub(super) standing: BTreeMap<usize, Standing>,
    pub(super) faults: BTreeMap<usize, RelayFault>,
}

/// A member's standing connection to the relay it listens at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Standing {
    pub(super) up: bool,
    pub(super) backoff: Micros,
    /// The generation of its pending retry (stale retries are ignored).
    pub(super) generation: u64,
}

impl Relays {
    /// The layout: who is behind NAT, who listens where, which links are
    /// relayed; drawn from `rng` (nothing drawn without relays).
    pub(super) fn new(cfg: &MeshConfig, graph: &Graph, rng: &mut Rng) -> Relays {
        let (n, k) = (cfg.nodes, cfg.relay.relays);
        let mut r = Relays {
            first: n,
            nat: vec![false; n + k],
            home: vec![None; n + k],
            ..Relays::default()
        };
        if k == 0 {
            return r;
        }
        for i in 0..n {
            r.nat[i] = rng.chance(cfg.relay.nat);
            if r.nat[i] || rng.chance(0.5) {
                r.home[i] = Some(n + rng.below(k as u64) as usize);
                r.standing.insert(
                    i,
                    Standing {
                        up: true,
                        backoff: STANDING_BACKOFF,
                        generation: 0,
                    },
                );
            }
            for relay in n..n + k {
                r.latency
                    .insert((i, relay), rng.range(cfg.latency.0, cfg.latency.1));
            }
        }
        for (a, b) in graph.edges() {
            if a < n && b < n && ((r.nat[a] && r.nat[b]) || rng.chance(cfg.relay.relayed)) {
                r.relayed.insert((a, b));
            }
        }
        r
    }

    pub(super) fn is_relay(&self, n: usize) -> bool {
        n >= self.first
    }

    /// How `a` reaches `b`: through the relay `b` listens at if their link
    /// is relayed, else directly — unless `b` is behind NAT: then not at
    /// all (`b` dials `a`; the direction rule).
    pub(super) fn reach(&self, a: usize, b: usize) -> Reach {
        if self.relayed.contains(&pair(a, b))
            && let Some(r) = self.home.get(b).copied().flatten()
        {
            return Reach::Via(r);
        }
        if self.nat.get(b).copied().unwrap_or(false) {
            Reach::Never
        } else {
            Reach::Direct
        }
    }

    pub(super) fn latency(&self, n: usize, relay: usize) -> Micros {
        self.latency.get(&(n, relay)).copied().unwrap_or(0)
    }
}

/// One frame through a pipe.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    index: u64,
    /// A message's encoding; empty for the end of the stream.
    body: Vec<u8>,
    end: bool,
    tag: [u8; 32],
    depth: u32,
}

/// A relayed session's pipe: the relay, the ends' key, and each
/// direction's counters (`[d]`: frames from side `d`).
#[derive(Debug)]
pub(super) struct Pipe {
    pub(super) relay: usize,
    key: [u8; 32],
    sent: [u64; 2],
    seen: [u64; 2],
    held: [Option<(Micros, Frame)>; 2],
    next: [u64; 2],
    waiting: [BTreeMap<u64, Frame>; 2],
    stalled: bool,
}

fn tag(key: &[u8; 32], from: usize, index: u64, end: bool, body: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&[from as u8, u8::from(end)]);
    h.update(&index.to_le_bytes());
    h.update(body);
    *h.finalize().as_bytes()
}

impl Pipe {
    pub(super) fn new(relay: usize, key: [u8; 32]) -> Pipe {
        Pipe {
            relay,
            key,
            sent: [0; 2],
            seen: [HANDSHAKE_FRAMES; 2],
            held: [None, None],
            next: [0; 2],
            waiting: [BTreeMap::new(), BTreeMap::new()],
            stalled: false,
        }
    }
}

impl Mesh {
    /// Whether node `n` is a pure relay.
    pub fn is_relay(&self, n: usize) -> bool {
        self.relays.is_relay(n)
    }

    /// Whether member `n` is behind NAT (accepts nothing inbound).
    pub fn behind_nat(&self, n: usize) -> bool {
        self.relays.nat.get(n).copied().unwrap_or(false)
    }

    /// The relay member `n` listens at, if any.
    pub fn home_relay(&self, n: usize) -> Option<usize> {
        self.relays.home.get(n).copied().flatten()
    }

    /// How `a` reaches its neighbour `b`.
    pub fn reach(&self, a: usize, b: usize) -> Reach {
        self.relays.reach(a, b)
    }

    /// Make relay `r` misbehave from now on (`None`: behave).
    pub fn set_relay_fault(&mut self, r: usize, fault: Option<RelayFault>) {
        match fault {
            Some(f) => self.relays.faults.insert(r, f),
            None => self.relays.faults.remove(&r),
        };
    }

    /// Whether `b`'s standing connection to relay `r` is up.
    fn listens(&self, b: usize, r: usize) -> bool {
        self.relays.home.get(b).copied().flatten() == Some(r)
            && self.relays.standing.get(&b).is_some_and(|s| s.up)
    }

    /// Whether a pipe from `a` to `b` through `r` can carry frames now.
    pub(super) fn pipe_up(&self, a: usize, b: usize, r: usize) -> bool {
        self.reachable(a, r) && self.reachable(r, b) && self.listens(b, r)
    }

    /// A dial from `a` to `b` through relay `r`: the connection up after
    /// the round trips to the relay and through the pipe, or the dial
    /// failed — after the handshake timeout when the relay cannot be
    /// reached or fails the handshake, after one round trip to it when it
    /// answers that `b` does not listen.
    pub(super) fn dial_via(&mut self, sid: u64, a: usize, b: usize, r: usize) {
        let to_relay = self.relays.latency(a, r);
        let fault = self.relays.faults.get(&r).copied();
        let breaks_handshake =
            fault.is_some_and(|f| f.kind != FaultKind::Reorder && f.after < HANDSHAKE_FRAMES);
        if !self.reachable(a, r) || (self.pipe_up(a, b, r) && breaks_handshake) {
            self.clock
                .after(self.cfg.handshake_timeout, Ev::DialFailed(sid));
        } else if !self.pipe_up(a, b, r) {
            self.clock.after(2 * to_relay, Ev::DialFailed(sid));
        } else {
            let key = self.relay_rng.bytes();
            let latency = self.sessions.get(&sid).map_or(0, |l| l.latency);
            if let Some(l) = self.sessions.get_mut(&sid) {
                l.pipe = Some(Pipe::new(r, key));
            }
            self.stats.relayed_sessions += 1;
            // To the relay and its answer, then the handshake end to end.
            self.clock
                .after(2 * to_relay + 2 * latency, Ev::Connect(sid));
        }
    }

    /// Whether the session's path is up: both ends reach each other, or,
    /// through a relay, the pipe can carry frames.
    pub(super) fn path_up(&self, sid: u64) -> bool {
        let Some(l) = self.sessions.get(&sid) else {
            return false;
        };
        match &l.pipe {
            Some(p) => self.pipe_up(l.a, l.b, p.relay),
            None => self.reachable(l.a, l.b),
        }
    }

    /// Side `from` of a relayed session sends a frame (a message's bytes,
    /// or `end`) arriving at the far end at `at` if the relay passes it.
    pub(super) fn pipe_send(
        &mut self,
        sid: u64,
        from: usize,
        body: Vec<u8>,
        end: bool,
        at: Micros,
        depth: u32,
    ) {
        let Some(l) = self.sessions.get_mut(&sid) else {
            return;
        };
        let round_trip = 2 * l.latency;
        let Some(p) = l.pipe.as_mut() else {
            return;
        };
        let index = p.sent[from];
        p.sent[from] += 1;
        let mut frame = Frame {
            index,
            tag: tag(&p.key, from, index, end, &body),
            body,
            end,
            depth,
        };
        p.seen[from] += 1;
        let fault = self
            .relays
            .faults
            .get(&p.relay)
            .copied()
            .filter(|f| p.seen[from] > f.after);
        let mut out = Vec::new();
        match fault.map(|f| f.kind) {
            None => out.push(frame),
            Some(FaultKind::Corrupt) => {
                // The product's relay flips a frame's last byte; here the
                // content's (an end of stream, empty, goes as it is).
                if let Some(last) = frame.body.last_mut() {
                    *last ^= 0x5a;
                    self.stats.relay_frames_altered += 1;
                }
                out.push(frame);
            }
            Some(FaultKind::Drop) => {
                self.stats.relay_frames_dropped += 1;
                p.stalled = true;
            }
            Some(FaultKind::Reorder) => match p.held[from].take() {
                None => {
                    p.held[from] = Some((at, frame));
                    self.clock.at(
                        at + PROBE_AFTER * round_trip,
                        Ev::PipeProbe { sid, from, index },
                    );
                }
                Some((_, earlier)) => {
                    out.push(frame);
                    out.push(earlier);
                }
            },
        }
        let stalled = std::mem::take(&mut p.stalled);
        for frame in out {
            self.clock.at(
                at,
                Ev::Piped {
                    sid,
                    to: 1 - from,
                    frame,
                },
            );
        }
        if stalled {
            self.stall(sid);
        }
    }

    /// A reordering relay still holding frame `index` from side `from`
    /// lets it go (the sender's probe went behind it).
    pub(super) fn pipe_probe(&mut self, sid: u64, from: usize, index: u64) {
        let Some(p) = self.sessions.get_mut(&sid).and_then(|l| l.pipe.as_mut()) else {
            return;
        };
        if p.held[from].as_ref().is_some_and(|(_, f)| f.index == index)
            && let Some((_, frame)) = p.held[from].take()
        {
            let now = self.now();
            self.clock.at(
                now,
                Ev::Piped {
                    sid,
                    to: 1 - from,
                    frame,
                },
            );
        }
    }

    /// A frame reaches side `to`: dropped if its tag fails, else put in
    /// order; every frame now in order goes to the session.
    pub(super) fn piped(&mut self, sid: u64, to: usize, frame: Frame) {
        if !self.path_up(sid) {
            self.finish(sid, false);
            return;
        }
        let Some(p) = self.sessions.get_mut(&sid).and_then(|l| l.pipe.as_mut()) else {
            return;
        };
        let from = 1 - to;
        if tag(&p.key, from, frame.index, frame.end, &frame.body) != frame.tag {
            self.stats.relay_frames_rejected += 1;
            self.stall(sid);
            return;
        }
        if frame.index >= p.next[from] {
            p.waiting[from].insert(frame.index, frame);
        }
        loop {
            let Some(p) = self.sessions.get_mut(&sid).and_then(|l| l.pipe.as_mut()) else {
                return;
            };
            let next = p.next[from];
            let Some(f) = p.waiting[from].remove(&next) else {
                return;
            };
            p.next[from] += 1;
            if f.end {
                self.receive_end(sid, to, f.depth);
            } else {
                self.receive(sid, to, &f.body, f.depth);
            }
        }
    }

    /// A frame of the session will never come: it fails by the peer
    /// timeout.
    fn stall(&mut self, sid: u64) {
        self.clock.after(PEER_TIMEOUT, Ev::Stalled(sid));
    }

    /// Drop or re-make the standing connections the reachability of now
    /// allows: a member that can no longer reach its relay loses its
    /// connection (the pipes through it break with it) and retries after
    /// its backoff; one back online connects at once.
    pub(super) fn check_standing(&mut self) {
        let now = self.now();
        let clients: Vec<(usize, usize)> = self
            .relays
            .standing
            .keys()
            .filter_map(|&c| Some((c, self.relays.home[c]?)))
            .collect();
        for (c, r) in clients {
            let reach = self.reachable(c, r);
            let online = self.nodes[c].online;
            let Some(s) = self.relays.standing.get_mut(&c) else {
                continue;
            };
            if s.up && !reach {
                s.up = false;
                s.backoff = STANDING_BACKOFF;
                s.generation += 1;
                if online {
                    self.clock
                        .at(now + s.backoff, Ev::Standing(c, s.generation));
                }
            }
        }
        let broken: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, l)| l.pipe.is_some())
            .map(|(s, _)| *s)
            .filter(|s| !self.path_up(*s))
            .collect();
        for sid in broken {
            self.finish(sid, false);
        }
    }

    /// Member `c` (re)starts: it connects to its relay now.
    pub(super) fn standing_restart(&mut self, c: usize) {
        if let Some(s) = self.relays.standing.get_mut(&c) {
            s.up = false;
            s.backoff = STANDING_BACKOFF;
            s.generation += 1;
            let generation = s.generation;
            self.clock.after(0, Ev::Standing(c, generation));
        }
    }

    /// Member `c` tries to re-make its standing connection.
    pub(super) fn standing_retry(&mut self, c: usize, generation: u64) {
        let (Some(r), true) = (self.home_relay(c), self.nodes[c].online) else {
            return;
        };
        let reach = self.reachable(c, r);
        let Some(s) = self.relays.standing.get_mut(&c) else {
            return;
        };
        if s.generation != generation || s.up {
            return;
        }
        if reach {
            s.up = true;
            s.backoff = STANDING_BACKOFF;
        } else {
            s.backoff = (2 * s.backoff).min(STANDING_MAX_BACKOFF);
            let at = self.clock.now() + s.backoff;
            self.clock.at(at, Ev::Standing(c, generation));
        }
    }
}
