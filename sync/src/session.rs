//! The sync session as a state machine (sans-IO, quinn-proto's pattern): the
//! transport feeds it [`Event`]s and carries out the [`Action`]s it returns;
//! a test simulator drives it just as well.
//!
//! One session = both sides pull (docs/design.md §7):
//!
//! 1. each side sends `Hello { epoch, have, listen }` — its log epoch, the
//!    watermark it holds of the other, and where it serves (if it does);
//! 2. on the other's `Hello`, a side exports its facts changed after that
//!    watermark (from 0 if it has none), sends them as `Facts` batches,
//!    then `Done { upto }` — unless the session repairs (step 5);
//! 3. each `Facts` batch received is applied in its own transaction; on the
//!    other's `Done` — after every batch before it committed — the side
//!    stores `upto` as its new watermark of the other;
//! 4. once it sent its `Done` and received the other's, a side knows how
//!    many facts it sent and received — and so does the other, the same
//!    numbers crossed. If none moved either way (an idle session), it sends
//!    `Digest`: its convergence digest over the facts the policy it gives
//!    the other admits (scopes named in the message); on the other's
//!    `Digest` it computes its own over the same scopes and records whether
//!    the two agree. The session is finished when both digests crossed. If
//!    any fact moved, the session is finished at once, without digests: a
//!    digest costs a scan of the store (cached only while it does not
//!    change), which an incremental session must not pay; the next idle
//!    session compares.
//! 5. **Repair** (docs/design.md §7.9) replaces both exports when a side
//!    cannot trust a watermark — either hello names a watermark of another
//!    epoch than the other's (a log was restored: both sides see this
//!    alike) — or asks for one ([`Session::request_repair`]: a digest that
//!    disagreed, periodic anti-entropy, the operator). A side that repairs
//!    skips its export (its `Done` names `seq` 0: a claim of nothing) and
//!    sends `RepairOpen` before its `Done`, so the other knows by that
//!    `Done` that a repair follows; if both open, the lower epoch leads and
//!    the other answers. The initiator drives negentropy rounds
//!    (`RepairOpen`, then `RepairRange` each way) over its repair set, the
//!    responder answers over its own — each set only the facts the policy
//!    its owner gives the other lets out ([`crate::repair`]). Reconciled,
//!    the initiator sends the facts the responder lacks and asks for the
//!    ones it lacks (`RepairNeed`); each side sends only ids in its own
//!    set, through the ordinary `Facts` (allowed after `Done` in a
//!    repair), then `RepairDone { upto }` — the initiator once its facts
//!    are queued, the responder after the initiator's (every `RepairNeed`
//!    came before it). A repair session compares no digest. A side told to
//!    [`Session::forbid_repair`] (its last repair with the peer never
//!    completed: the peer may not speak it) neither opens nor skips its
//!    export — the session a node without repair runs — but still answers
//!    a repair the peer opens.
//!
//! Invariant: a watermark only moves after everything it covers committed,
//! so a session cut at any point loses nothing; the next one resumes. The
//! digests come after both `Done`s: a session cut before them lost no
//! facts and moved no watermark wrongly, only the comparison. In a repair,
//! a `Done` of `seq` 0 moves nothing and the watermark moves on the
//! peer's `RepairDone`, after every batch before it committed: a repair
//! cut short leaves the old (untrusted) watermark, and the next session
//! repairs again instead of resending everything. Neither side's repair
//! set, rounds or facts ever cover a fact its export filter keeps from the
//! other.
//!
//! What a side holds back for a peer that lacks a feature, from session to
//! session, is [`HeldBack`]'s rule (docs/design.md §13).
//!
//! The peer's listen addresses surface as [`Action::PeerListens`], checked
//! but not interpreted: the driver knows the connection (who the handshake
//! authenticated, where it came from) and decides what to record. The
//! session never registers, trusts or changes a peer.

use std::net::SocketAddr;

use amos_protocol::Scope;
use amos_protocol::wire::{
    Epoch, Features, MAX_LISTEN, MAX_REPAIR_IDS, SyncV1, Watermark, check_digest_scopes,
    check_repair_ids, parse_listen,
};

use crate::repair::{self, Initiator, ItemId, ItemSet, RepairError, Step};

mod held;
pub use held::HeldBack;

/// The `since` of an [`Action::Export`] that sends nothing: the repair
/// sends what the peer lacks instead. The driver reports
/// [`Event::ExportDone`] with `sent: 0` as usual (its `upto` is not used:
/// the `Done` then names `seq` 0, a claim of nothing).
pub const SKIP_EXPORT: i64 = i64::MAX;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A message from the peer.
    Received(SyncV1),
    /// The driver finished sending our facts (as `Facts` messages) up to
    /// `upto`; `sent`: how many facts those messages carried.
    ExportDone {
        /// Our log position the facts sent cover.
        upto: Watermark,
        /// How many facts were sent.
        sent: u64,
    },
    /// The peer ended its side of the stream (cleanly: no error).
    PeerEnded,
    /// The repair set asked for by [`Action::BuildRepairSet`]: the items of
    /// every fact the policy we give the peer lets it receive now (with
    /// retractions, as an export from 0 would send them), and `upto`, our
    /// log position they cover (every fact of a row with `seq <= upto.seq`).
    RepairSet {
        /// The repair set's items.
        items: ItemSet,
        /// Our log position the set covers.
        upto: Watermark,
    },
    /// The driver sent the facts of one [`Action::SendRepairFacts`] (`sent`
    /// of them: those it found in our repair set).
    RepairSent {
        /// How many facts were sent.
        sent: u64,
    },
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send this message to the peer.
    Send(SyncV1),
    /// Send our facts changed after `since` that the peer may receive, as
    /// `Facts` messages, then report [`Event::ExportDone`]. `peer_reset`:
    /// the peer's log is new to us (first sync, or its epoch changed — it
    /// was restored and may have lost its own facts), so send them too;
    /// otherwise its own facts need not travel back to it. `since` is
    /// [`SKIP_EXPORT`] in a session that repairs: send nothing.
    Export {
        /// Send facts of rows whose `seq` is above this.
        since: i64,
        /// Whether the peer's own facts must be sent back too.
        peer_reset: bool,
    },
    /// The peer said where it serves (at most [`MAX_LISTEN`] addresses,
    /// each well-formed, in its order; never empty). Unspecified IPs mean
    /// "where you see me". The driver may record one for the peer it
    /// authenticated; nothing else follows from it.
    PeerListens(Vec<SocketAddr>),
    /// Verify and apply a batch from the peer in one transaction.
    Apply(Vec<Vec<u8>>),
    /// Store our new watermark of the peer.
    SaveWatermark(Watermark),
    /// Send `Digest`: our convergence digest over the facts the policy we
    /// give the peer admits now, with that policy's scopes. Only ever over
    /// what the peer may receive from us.
    SendDigest,
    /// The peer's digest over `scopes` (empty: all): compute ours over the
    /// same scopes and record whether they agree (`facts`: how many the
    /// peer's covers).
    CompareDigest {
        /// The scopes the peer's digest covers.
        scopes: Vec<Scope>,
        /// The peer's digest.
        digest: [u8; 32],
        /// How many facts it covers.
        facts: u64,
    },
    /// Build our repair set (only over what the peer may receive from us)
    /// and report [`Event::RepairSet`].
    BuildRepairSet,
    /// Send, as `Facts` messages, our facts with these ids (BLAKE3 of
    /// their wire encoding) — only those in our repair set, whatever the
    /// peer asked for — then report [`Event::RepairSent`].
    SendRepairFacts(Vec<ItemId>),
    /// Both directions are complete.
    Finished,
}

/// A protocol violation by the peer (or a refusal it sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The peer sent something the protocol does not allow at this point.
    #[error("peer broke the sync protocol: {0}")]
    Protocol(&'static str),
    /// The peer refused the session, with its reason.
    #[error("peer refused the sync: {0}")]
    Refused(String),
    /// The peer's repair round did not reconcile.
    #[error("repair: {0}")]
    Repair(#[from] RepairError),
}

/// One side's view of a session's repair phase.
#[derive(Debug, Clone, Default)]
struct Repair {
    /// We open the reconciliation (else the peer does).
    initiating: bool,
    /// [`Action::BuildRepairSet`] was asked for.
    requested: bool,
    /// Our repair set (as a responder) and the position it covers.
    set: Option<ItemSet>,
    upto: Option<Watermark>,
    /// Ours, while we reconcile as the initiator.
    initiator: Option<Initiator>,
    /// We sent `RepairOpen`.
    opened: bool,
    /// We took the peer's `RepairOpen`: we respond.
    heard_open: bool,
    /// Rounds to answer once our set is built.
    queued: Vec<Vec<u8>>,
    /// Rounds answered (a responder answers at most `MAX_ROUNDS + 1`).
    answered: u32,
    /// Initiator: the rounds are over.
    reconciled: bool,
    /// [`Action::SendRepairFacts`] not yet reported.
    sending: u32,
    /// We sent `RepairDone`.
    sent_done: bool,
    /// The peer's `RepairDone`.
    their_done: Option<Watermark>,
    /// The `seq` of the peer's log we saved from its `Done`.
    saved_seq: Option<i64>,
    /// Ids of the facts the peer sent in this session: an initiator does
    /// not ask again for what its export already brought.
    arrived: std::collections::HashSet<ItemId>,
}

impl Repair {
    /// Whether a reconciliation runs (we open it, or took the peer's).
    fn on(&self) -> bool {
        self.initiating || self.heard_open
    }
}

/// One side of a session.
#[derive(Debug, Clone)]
pub struct Session {
    my_epoch: Epoch,
    /// The protocol version the transport negotiated (1: 545333a's, whose
    /// opening is `Hello`; from 2 on, `Hello2`).
    version: u16,
    /// The peer's version and features, once its hello came.
    peer: Option<(u16, Features)>,
    /// Our watermark of the peer when the session opened.
    have: Option<Watermark>,
    their_epoch: Option<Epoch>,
    sent_done: bool,
    received_done: bool,
    /// Facts that crossed so far, either way (as the messages carried them).
    moved: u64,
    /// Both `Done`s crossed with no fact moved: digests are exchanged.
    compare: bool,
    sent_digest: bool,
    received_digest: bool,
    finished: bool,
    /// We ask for a repair whatever the watermarks say.
    want_repair: bool,
    /// We neither open nor skip our export for a repair (the last one we
    /// tried with this peer never completed: it may be older than repair).
    no_repair: bool,
    /// The repair phase, if this session repairs.
    repair: Option<Repair>,
    /// We skipped our export (a repair sends instead).
    skipped_export: bool,
    /// Our `Done`, held until our `RepairOpen` is out (it must come first).
    held_done: Option<Watermark>,
}

impl Session {
    /// Open a session: `have` is our stored watermark of the peer, `listen`
    /// where we serve (empty if we do not; at most [`MAX_LISTEN`] are sent).
    /// The session of protocol version 1 (what [`Session::start_versioned`]
    /// runs at version 1).
    pub fn start(
        my_epoch: Epoch,
        have: Option<Watermark>,
        listen: &[SocketAddr],
    ) -> (Session, Vec<Action>) {
        Session::start_versioned(my_epoch, have, listen, 1, Features::implied_by(1))
    }

    /// Open a session at the protocol `version` the transport negotiated
    /// (docs/design.md §13): from version 2 on, our opening is `Hello2`,
    /// naming `version` and the `features` we decode; at version 1 it is
    /// the `Hello` a node of 545333a expects (and `features` are not sent).
    /// The peer's opening must be of the same kind.
    pub fn start_versioned(
        my_epoch: Epoch,
        have: Option<Watermark>,
        listen: &[SocketAddr],
        version: u16,
        features: Features,
    ) -> (Session, Vec<Action>) {
        let listen: Vec<String> = listen
            .iter()
            .take(MAX_LISTEN)
            .map(ToString::to_string)
            .collect();
        let hello = if version >= 2 {
            SyncV1::Hello2 {
                epoch: my_epoch,
                have,
                listen,
                version,
                features: features.0,
            }
        } else {
            SyncV1::Hello {
                epoch: my_epoch,
                have,
                listen,
            }
        };
        (
            Session {
                my_epoch,
                version,
                peer: None,
                have,
                their_epoch: None,
                sent_done: false,
                received_done: false,
                moved: 0,
                compare: false,
                sent_digest: false,
                received_digest: false,
                finished: false,
                want_repair: false,
                no_repair: false,
                repair: None,
                skipped_export: false,
                held_done: None,
            },
            vec![Action::Send(hello)],
        )
    }

    /// The peer's protocol version and the features it decodes, once its
    /// hello came (a version-1 peer's are [`Features::implied_by`]`(1)`):
    /// the driver sends it nothing that needs a feature it lacks.
    pub fn peer_version(&self) -> Option<(u16, Features)> {
        self.peer
    }

    /// Ask for a repair in this session whatever the watermarks say (a
    /// digest that disagreed, periodic anti-entropy, the operator). Call it
    /// before feeding the peer's `Hello`; later it changes nothing.
    pub fn request_repair(&mut self) {
        self.want_repair = true;
    }

    /// Run this session the way a node without repair would: neither open
    /// a repair nor skip our export, even for an untrusted watermark (we
    /// still answer a repair the peer opens). For a peer that may not speak
    /// repair: the driver calls it when the last repair it tried with that
    /// peer never completed. Call it before feeding the peer's `Hello`.
    pub fn forbid_repair(&mut self) {
        self.no_repair = true;
    }

    /// Whether both directions are complete.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The peer's log epoch, once its `Hello` came: what the `seq` ranges
    /// its batches take here are recorded under (docs/design.md §7.1).
    pub fn peer_epoch(&self) -> Option<Epoch> {
        self.their_epoch
    }

    /// Whether this session ran a repair to its end (both `RepairDone`s).
    pub fn repaired(&self) -> bool {
        self.repair
            .as_ref()
            .is_some_and(|r| r.sent_done && r.their_done.is_some())
    }

    /// Feed one event; get the actions to carry out.
    pub fn handle(&mut self, event: Event) -> Result<Vec<Action>, SessionError> {
        use SessionError::Protocol;
        if self.finished {
            return Err(Protocol("message after the session finished"));
        }
        let mut out = Vec::new();
        match event {
            Event::Received(m @ (SyncV1::Hello { .. } | SyncV1::Hello2 { .. })) => {
                if self.their_epoch.is_some() {
                    return Err(Protocol("second hello"));
                }
                let (epoch, have, listen, peer) = match m {
                    SyncV1::Hello {
                        epoch,
                        have,
                        listen,
                    } if self.version < 2 => (epoch, have, listen, (1, Features::implied_by(1))),
                    SyncV1::Hello2 {
                        epoch,
                        have,
                        listen,
                        version,
                        features,
                    } if self.version >= 2 && version >= 2 => {
                        (epoch, have, listen, (version, Features(features)))
                    }
                    _ => return Err(Protocol("a hello of another protocol version")),
                };
                self.peer = Some(peer);
                // Checked again here: the driver may feed messages that did
                // not come through `SyncMessage::decode`.
                if listen.len() > MAX_LISTEN {
                    return Err(Protocol("too many listen addresses"));
                }
                let listen = listen
                    .iter()
                    .map(|a| parse_listen(a))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| Protocol("a malformed listen address"))?;
                self.their_epoch = Some(epoch);
                if !listen.is_empty() {
                    out.push(Action::PeerListens(listen));
                }
                // A watermark of another epoch cannot be trusted: that log
                // was restored. Both sides see both hellos, so both decide
                // this alike; the lower epoch opens the repair.
                let mine_restarted = have.is_some_and(|w| w.epoch != self.my_epoch);
                let theirs_restarted = self.have.is_some_and(|w| w.epoch != epoch);
                let by_epoch = (mine_restarted || theirs_restarted) && !self.no_repair;
                let peer_reset = self.have.is_none_or(|w| w.epoch != epoch);
                if (self.want_repair && !self.no_repair) || by_epoch {
                    self.repair = Some(Repair {
                        initiating: !(by_epoch && self.my_epoch > epoch),
                        requested: true,
                        ..Repair::default()
                    });
                    self.skipped_export = true;
                    out.push(Action::BuildRepairSet);
                    out.push(Action::Export {
                        since: SKIP_EXPORT,
                        peer_reset,
                    });
                } else {
                    let since = match have {
                        Some(w) if w.epoch == self.my_epoch && w.seq >= 0 => w.seq,
                        _ => 0,
                    };
                    out.push(Action::Export { since, peer_reset });
                }
            }
            Event::Received(SyncV1::Facts { facts }) => {
                if self.their_epoch.is_none() {
                    return Err(Protocol("facts before hello"));
                }
                // After its `Done`, only a repair's facts.
                if self.received_done && !self.repair.as_ref().is_some_and(Repair::on) {
                    return Err(Protocol("facts after done"));
                }
                self.moved = self.moved.saturating_add(facts.len() as u64);
                if let Some(r) = self.repair.as_mut().filter(|r| r.initiating) {
                    r.arrived.extend(facts.iter().map(|f| repair::fact_id(f)));
                }
                out.push(Action::Apply(facts));
            }
            Event::Received(SyncV1::Done { upto }) => {
                let Some(theirs) = self.their_epoch else {
                    return Err(Protocol("done before hello"));
                };
                if self.received_done {
                    return Err(Protocol("second done"));
                }
                if upto.epoch != theirs {
                    return Err(Protocol("done names another epoch than hello"));
                }
                self.received_done = true;
                // A peer that repairs opens before its `Done`: none came and
                // we do not open either, so it does not repair (an older
                // node): the session is an ordinary one.
                if self.repair.as_ref().is_some_and(|r| !r.on()) {
                    self.repair = None;
                }
                match &mut self.repair {
                    // A `Done` of seq 0 in a repair claims nothing (the
                    // peer skipped its export): the watermark comes with its
                    // `RepairDone`.
                    Some(r) if upto.seq > 0 => {
                        r.saved_seq = Some(upto.seq);
                        out.push(Action::SaveWatermark(upto));
                    }
                    Some(_) => {}
                    None => out.push(Action::SaveWatermark(upto)),
                }
            }
            Event::Received(SyncV1::Refused { reason }) => {
                return Err(SessionError::Refused(reason));
            }
            Event::Received(SyncV1::Digest {
                scopes,
                digest,
                facts,
            }) => {
                // Sent only once both `Done`s crossed: after ours.
                if !self.received_done || !self.sent_done {
                    return Err(Protocol("digest before done"));
                }
                if self.received_digest {
                    return Err(Protocol("second digest"));
                }
                if self.repair.is_some() {
                    return Err(Protocol("digest in a repair"));
                }
                // Checked again: the driver may feed unchecked messages.
                check_digest_scopes(&scopes).map_err(|_| Protocol("malformed digest scopes"))?;
                self.received_digest = true;
                out.push(Action::CompareDigest {
                    scopes,
                    digest,
                    facts,
                });
            }
            Event::Received(SyncV1::RepairOpen { round }) => {
                let Some(theirs) = self.their_epoch else {
                    return Err(Protocol("repair before hello"));
                };
                if self.received_done {
                    return Err(Protocol("repair opened after done"));
                }
                let r = self.repair.get_or_insert_with(Repair::default);
                if r.heard_open {
                    return Err(Protocol("second repair open"));
                }
                if r.initiating {
                    // Both opened: the lower epoch leads; the other answers.
                    if self.my_epoch == theirs {
                        return Err(Protocol("both sides claim the same epoch"));
                    }
                    if self.my_epoch < theirs {
                        return Ok(out);
                    }
                    r.initiating = false;
                    if let Some(ini) = r.initiator.take() {
                        r.set = Some(ini.into_set());
                    }
                    if let Some(d) = self.held_done.take() {
                        self.sent_done = true;
                        out.push(Action::Send(SyncV1::Done { upto: d }));
                    }
                }
                r.heard_open = true;
                if !r.requested {
                    r.requested = true;
                    out.push(Action::BuildRepairSet);
                }
                answer(r, round, &mut out)?;
            }
            Event::Received(SyncV1::RepairRange { round }) => {
                let Some(r) = self.repair.as_mut() else {
                    return Err(Protocol("repair round without a repair"));
                };
                if r.heard_open {
                    if r.their_done.is_some() {
                        return Err(Protocol("repair round after the repair"));
                    }
                    answer(r, round, &mut out)?;
                } else if let Some(ini) = r.initiator.as_mut() {
                    match ini.step(&round)? {
                        Step::Next(next) => {
                            out.push(Action::Send(SyncV1::RepairRange { round: next }))
                        }
                        Step::Done(outcome) => {
                            r.initiator = None;
                            r.reconciled = true;
                            let arrived = std::mem::take(&mut r.arrived);
                            let request: Vec<ItemId> = outcome
                                .request
                                .into_iter()
                                .filter(|id| !arrived.contains(id))
                                .collect();
                            for ids in request.chunks(MAX_REPAIR_IDS) {
                                out.push(Action::Send(SyncV1::RepairNeed { ids: ids.to_vec() }));
                            }
                            if !outcome.send.is_empty() {
                                r.sending += 1;
                                out.push(Action::SendRepairFacts(outcome.send));
                            }
                        }
                    }
                } else {
                    return Err(Protocol("repair round out of turn"));
                }
            }
            Event::Received(SyncV1::RepairNeed { ids }) => {
                check_repair_ids(&ids).map_err(|_| Protocol("malformed repair ids"))?;
                match self.repair.as_mut() {
                    Some(r) if r.heard_open && r.their_done.is_none() => {
                        if !ids.is_empty() {
                            r.sending += 1;
                            out.push(Action::SendRepairFacts(ids));
                        }
                    }
                    _ => return Err(Protocol("repair request out of turn")),
                }
            }
            Event::Received(SyncV1::RepairDone { upto }) => {
                let Some(theirs) = self.their_epoch else {
                    return Err(Protocol("repair done before hello"));
                };
                if !self.received_done {
                    return Err(Protocol("repair done before done"));
                }
                if upto.epoch != theirs {
                    return Err(Protocol("repair done names another epoch than hello"));
                }
                let Some(r) = self.repair.as_mut().filter(|r| r.on()) else {
                    return Err(Protocol("repair done without a repair"));
                };
                // The responder answers the initiator's `RepairDone`.
                if r.their_done.is_some() || (!r.heard_open && !r.sent_done) {
                    return Err(Protocol("repair done out of turn"));
                }
                r.their_done = Some(upto);
                // Every batch before it committed: everything of their set
                // up to `upto` that we lacked is here.
                if r.saved_seq.is_none_or(|s| upto.seq > s) {
                    out.push(Action::SaveWatermark(upto));
                }
            }
            Event::Received(SyncV1::Join { .. } | SyncV1::Welcome { .. }) => {
                return Err(Protocol("pairing message inside a sync session"));
            }
            Event::PeerEnded => {
                // A node older than `Digest` finishes after both `Done`s and
                // ends its stream without one (as would a peer that counted
                // the session otherwise — it cannot, the same facts crossed):
                // everything was committed and both watermarks are stored;
                // only the comparison is missing. Any other early end is a
                // broken session.
                if !self.sent_digest || self.received_digest {
                    return Err(Protocol("the peer ended the session before it finished"));
                }
                self.received_digest = true;
            }
            Event::ExportDone { upto, sent } => {
                if self.their_epoch.is_none() || self.sent_done || self.held_done.is_some() {
                    return Err(Protocol("export finished out of turn"));
                }
                self.moved = self.moved.saturating_add(sent);
                let upto = if self.skipped_export {
                    Watermark {
                        epoch: self.my_epoch,
                        seq: 0,
                    }
                } else {
                    upto
                };
                if self
                    .repair
                    .as_ref()
                    .is_some_and(|r| r.initiating && !r.opened)
                {
                    // Our `RepairOpen` must come before our `Done`.
                    self.held_done = Some(upto);
                } else {
                    self.sent_done = true;
                    out.push(Action::Send(SyncV1::Done { upto }));
                }
            }
            Event::RepairSet { items, upto } => {
                let Some(r) = self
                    .repair
                    .as_mut()
                    .filter(|r| r.requested && r.upto.is_none())
                else {
                    return Err(Protocol("repair set out of turn"));
                };
                r.upto = Some(upto);
                if r.initiating && !r.opened {
                    let (ini, first) = Initiator::open(items)?;
                    r.initiator = Some(ini);
                    r.opened = true;
                    out.push(Action::Send(SyncV1::RepairOpen { round: first }));
                    if let Some(d) = self.held_done.take() {
                        self.sent_done = true;
                        out.push(Action::Send(SyncV1::Done { upto: d }));
                    }
                } else {
                    r.set = Some(items);
                    for round in std::mem::take(&mut r.queued) {
                        answer(r, round, &mut out)?;
                    }
                }
            }
            Event::RepairSent { sent } => {
                let Some(r) = self.repair.as_mut().filter(|r| r.sending > 0) else {
                    return Err(Protocol("repair facts reported out of turn"));
                };
                r.sending -= 1;
                self.moved = self.moved.saturating_add(sent);
            }
        }
        if let Some(r) = self.repair.as_mut()
            && self.sent_done
            && !r.sent_done
            && r.sending == 0
            && let Some(upto) = r.upto
        {
            // Ours goes once everything the repair found was queued: the
            // initiator's when reconciled, the responder's in answer to it
            // (every `RepairNeed` came before it).
            let ready = if r.heard_open {
                r.their_done.is_some()
            } else {
                r.initiating && r.reconciled
            };
            if ready {
                r.sent_done = true;
                out.push(Action::Send(SyncV1::RepairDone { upto }));
            }
        }
        if self.sent_done && self.received_done && !self.finished {
            if let Some(r) = &self.repair {
                // A repair session compares no digest: it just reconciled.
                if r.sent_done && r.their_done.is_some() {
                    self.finished = true;
                    out.push(Action::Finished);
                }
            } else if !self.sent_digest {
                if self.moved == 0 {
                    // Idle: both sides counted nothing and both compare. Every
                    // batch of the peer's was applied before its `Done`: our
                    // digest covers what it sent us.
                    self.compare = true;
                    self.sent_digest = true;
                    out.push(Action::SendDigest);
                } else {
                    // Facts moved: both sides counted them and neither sends a
                    // digest; the last comparison stands until an idle session.
                    self.finished = true;
                    out.push(Action::Finished);
                }
            }
        }
        if self.compare && self.sent_digest && self.received_digest && !self.finished {
            self.finished = true;
            out.push(Action::Finished);
        }
        Ok(out)
    }
}

/// Answer one of the initiator's rounds over our repair set (or keep it
/// until the set is built).
fn answer(r: &mut Repair, round: Vec<u8>, out: &mut Vec<Action>) -> Result<(), SessionError> {
    match &r.set {
        Some(set) => {
            // The opening round and each the initiator may send after a reply.
            r.answered += 1;
            if r.answered > repair::MAX_ROUNDS + 1 {
                return Err(SessionError::Repair(RepairError::TooManyRounds));
            }
            let reply = repair::respond(set, &round)?;
            out.push(Action::Send(SyncV1::RepairRange { round: reply }));
        }
        None => {
            if r.queued.len() >= 4 {
                return Err(SessionError::Protocol(
                    "repair rounds ahead of their answers",
                ));
            }
            r.queued.push(round);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
