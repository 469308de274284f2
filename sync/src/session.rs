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
//! The peer's listen addresses surface as [`Action::PeerListens`], checked
//! but not interpreted: the driver knows the connection (who the handshake
//! authenticated, where it came from) and decides what to record. The
//! session never registers, trusts or changes a peer.

use std::net::SocketAddr;

use amos_protocol::Scope;
use amos_protocol::wire::{
    Epoch, MAX_LISTEN, MAX_REPAIR_IDS, SyncV1, Watermark, check_digest_scopes, check_repair_ids,
    parse_listen,
};

use crate::repair::{self, Initiator, ItemId, ItemSet, RepairError, Step};

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
    pub fn start(
        my_epoch: Epoch,
        have: Option<Watermark>,
        listen: &[SocketAddr],
    ) -> (Session, Vec<Action>) {
        (
            Session {
                my_epoch,
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
            vec![Action::Send(SyncV1::Hello {
                epoch: my_epoch,
                have,
                listen: listen
                    .iter()
                    .take(MAX_LISTEN)
                    .map(ToString::to_string)
                    .collect(),
            })],
        )
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
            Event::Received(SyncV1::Hello {
                epoch,
                have,
                listen,
            }) => {
                if self.their_epoch.is_some() {
                    return Err(Protocol("second hello"));
                }
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
mod tests {
    use super::*;

    fn wm(e: u8, seq: i64) -> Watermark {
        Watermark {
            epoch: [e; 16],
            seq,
        }
    }

    /// A side in a simulation: a log of (seq, fact) and what it applied.
    struct Side {
        epoch: Epoch,
        log: Vec<(i64, Vec<u8>)>,
        applied: Vec<Vec<u8>>,
        watermark: Option<Watermark>,
        listen: Vec<SocketAddr>,
        heard: Vec<Vec<SocketAddr>>,
        /// Facts this side refuses to apply (as an import gate would).
        refuses: Vec<Vec<u8>>,
        /// Every message received, in order.
        got: Vec<SyncV1>,
        /// Whether the peer's digest agreed with ours, when compared.
        agree: Option<bool>,
        /// Ask for a repair whatever the watermarks say.
        want_repair: bool,
        /// Facts held that the export filter keeps from the peer.
        gated: Vec<Vec<u8>>,
        /// Every repair set this side built.
        sets: Vec<ItemSet>,
        /// Whether the last session repaired.
        repaired: bool,
    }

    impl Side {
        fn new(e: u8, n: i64) -> Side {
            Side {
                epoch: [e; 16],
                log: (1..=n).map(|s| (s, vec![e, s as u8])).collect(),
                applied: Vec::new(),
                watermark: None,
                listen: Vec::new(),
                heard: Vec::new(),
                refuses: Vec::new(),
                got: Vec::new(),
                agree: None,
                want_repair: false,
                gated: Vec::new(),
                sets: Vec::new(),
                repaired: false,
            }
        }

        /// What this side may send the peer: everything held but the gated.
        fn exportable(&self) -> Vec<&Vec<u8>> {
            let mut out: Vec<&Vec<u8>> = self
                .log
                .iter()
                .map(|(_, f)| f)
                .chain(&self.applied)
                .filter(|f| !self.gated.contains(f))
                .collect();
            out.sort();
            out.dedup();
            out
        }

        /// Distinct facts held.
        fn held(&self) -> std::collections::BTreeSet<Vec<u8>> {
            self.log
                .iter()
                .map(|(_, f)| f.clone())
                .chain(self.applied.iter().cloned())
                .collect()
        }

        /// The digest over everything held (a `full` policy: no scopes).
        fn digest(&self) -> ([u8; 32], usize) {
            let mut d = crate::digest::Digest::new();
            for f in self.log.iter().map(|(_, f)| f).chain(&self.applied) {
                d.add(f);
            }
            d.finish_bytes()
        }
    }

    /// Run a session between `a` and `b`, delivering messages in order;
    /// `cut_after` drops the link after that many delivered messages.
    /// Returns whether both sides finished.
    fn run(a: &mut Side, b: &mut Side, cut_after: Option<usize>) -> bool {
        run_full(a, b, cut_after, (false, false))
    }

    /// [`run`] with `forbid_repair` on a's and/or b's session.
    fn run_with(a: &mut Side, b: &mut Side, forbid_a: bool, forbid_b: bool) -> bool {
        run_full(a, b, None, (forbid_a, forbid_b))
    }

    fn run_full(
        a: &mut Side,
        b: &mut Side,
        cut_after: Option<usize>,
        forbid: (bool, bool),
    ) -> bool {
        let (mut sa, acts_a) = Session::start(a.epoch, a.watermark, &a.listen);
        let (mut sb, acts_b) = Session::start(b.epoch, b.watermark, &b.listen);
        if forbid.0 {
            sa.forbid_repair();
        }
        if forbid.1 {
            sb.forbid_repair();
        }
        if a.want_repair {
            sa.request_repair();
        }
        if b.want_repair {
            sb.request_repair();
        }
        let mut to_b: std::collections::VecDeque<SyncV1> = Default::default();
        let mut to_a: std::collections::VecDeque<SyncV1> = Default::default();
        // In the order the session emitted them, as a driver runs them.
        let mut pending: std::collections::VecDeque<(bool, Vec<Action>)> =
            [(true, acts_a), (false, acts_b)].into();
        let mut delivered = 0;
        let mut finished = (false, false);
        loop {
            while let Some((is_a, acts)) = pending.pop_front() {
                for act in acts {
                    let (side, session, outbox) = if is_a {
                        (&mut *a, &mut sa, &mut to_b)
                    } else {
                        (&mut *b, &mut sb, &mut to_a)
                    };
                    match act {
                        Action::Send(m) => outbox.push_back(m),
                        Action::Export { since, .. } => {
                            let mut sent = 0;
                            let gated = side.gated.clone();
                            for (_, f) in side
                                .log
                                .iter()
                                .filter(|(s, f)| *s > since && !gated.contains(f))
                            {
                                outbox.push_back(SyncV1::Facts {
                                    facts: vec![f.clone()],
                                });
                                sent += 1;
                            }
                            let upto = Watermark {
                                epoch: side.epoch,
                                seq: side.log.last().map_or(0, |l| l.0),
                            };
                            let next = session.handle(Event::ExportDone { upto, sent }).unwrap();
                            pending.push_back((is_a, next));
                        }
                        Action::PeerListens(l) => side.heard.push(l),
                        Action::Apply(fs) => side
                            .applied
                            .extend(fs.into_iter().filter(|f| !side.refuses.contains(f))),
                        Action::SaveWatermark(w) => side.watermark = Some(w),
                        Action::SendDigest => {
                            let (digest, facts) = side.digest();
                            outbox.push_back(SyncV1::Digest {
                                scopes: vec![],
                                digest,
                                facts: facts as u64,
                            });
                        }
                        Action::CompareDigest { scopes, digest, .. } => {
                            assert!(scopes.is_empty(), "the simulation is full");
                            side.agree = Some(side.digest().0 == digest);
                        }
                        Action::BuildRepairSet => {
                            let items =
                                ItemSet::new(side.exportable().into_iter().map(|f| repair::Item {
                                    ts: u64::from(f[1]),
                                    id: repair::fact_id(f),
                                }));
                            side.sets.push(items.clone());
                            let upto = Watermark {
                                epoch: side.epoch,
                                seq: side.log.last().map_or(0, |l| l.0),
                            };
                            let next = session.handle(Event::RepairSet { items, upto }).unwrap();
                            pending.push_back((is_a, next));
                        }
                        Action::SendRepairFacts(ids) => {
                            let facts: Vec<Vec<u8>> = side
                                .exportable()
                                .into_iter()
                                .filter(|f| ids.contains(&repair::fact_id(f)))
                                .cloned()
                                .collect();
                            let sent = facts.len() as u64;
                            if !facts.is_empty() {
                                outbox.push_back(SyncV1::Facts { facts });
                            }
                            let next = session.handle(Event::RepairSent { sent }).unwrap();
                            pending.push_back((is_a, next));
                        }
                        Action::Finished => {
                            side.repaired = session.repaired();
                            if is_a {
                                finished.0 = true
                            } else {
                                finished.1 = true
                            }
                        }
                    }
                }
            }
            if cut_after.is_some_and(|c| delivered >= c) {
                return false;
            }
            if let Some(m) = to_b.pop_front() {
                delivered += 1;
                b.got.push(m.clone());
                let acts = sb.handle(Event::Received(m)).unwrap();
                pending.push_back((false, acts));
            } else if let Some(m) = to_a.pop_front() {
                delivered += 1;
                a.got.push(m.clone());
                let acts = sa.handle(Event::Received(m)).unwrap();
                pending.push_back((true, acts));
            } else {
                return finished == (true, true);
            }
        }
    }

    #[test]
    fn first_sync_sends_everything_and_sets_watermarks() {
        let mut a = Side::new(1, 5);
        let mut b = Side::new(2, 3);
        assert!(run(&mut a, &mut b, None));
        assert_eq!(b.applied.len(), 5);
        assert_eq!(a.applied.len(), 3);
        assert_eq!(b.watermark, Some(wm(1, 5)));
        assert_eq!(a.watermark, Some(wm(2, 3)));
    }

    #[test]
    fn idle_sync_sends_no_facts() {
        let mut a = Side::new(1, 5);
        let mut b = Side::new(2, 3);
        assert!(run(&mut a, &mut b, None));
        a.applied.clear();
        b.applied.clear();
        assert!(run(&mut a, &mut b, None));
        assert!(a.applied.is_empty() && b.applied.is_empty());
    }

    #[test]
    fn only_new_facts_after_the_watermark() {
        let mut a = Side::new(1, 5);
        let mut b = Side::new(2, 0);
        assert!(run(&mut a, &mut b, None));
        a.log.push((6, vec![1, 6]));
        b.applied.clear();
        assert!(run(&mut a, &mut b, None));
        assert_eq!(b.applied, vec![vec![1, 6]]);
        assert_eq!(b.watermark, Some(wm(1, 6)));
    }

    /// Facts that crossed to `side` in `Facts` messages.
    fn facts_got(side: &Side) -> usize {
        side.got
            .iter()
            .map(|m| match m {
                SyncV1::Facts { facts } => facts.len(),
                _ => 0,
            })
            .sum()
    }

    /// `a` and `b` synced 50 facts of `a`'s; then `b` is restored from a
    /// backup taken after 45 (a new epoch, its old watermark of `a`).
    fn restored_pair() -> (Side, Side) {
        let mut a = Side::new(1, 50);
        let mut b = Side::new(2, 0);
        assert!(run(&mut a, &mut b, None));
        b.applied.truncate(45);
        b.epoch = [3; 16];
        b.watermark = Some(wm(1, 45));
        a.got.clear();
        b.got.clear();
        (a, b)
    }

    #[test]
    fn a_restored_store_is_repaired_not_resent() {
        let (mut a, mut b) = restored_pair();
        assert!(run(&mut a, &mut b, None));
        assert!(a.repaired && b.repaired);
        assert_eq!(b.held(), a.held(), "converged");
        assert_eq!(facts_got(&b), 5, "exactly what b lacked");
        assert_eq!(facts_got(&a), 0, "b had nothing a lacked");
        // Each watermark moved with the repair: a's of b is b's new epoch.
        assert_eq!(b.watermark, Some(wm(1, 50)));
        assert_eq!(a.watermark, Some(wm(3, 0)));
        // Trusted again: the next session is an ordinary, idle one.
        a.got.clear();
        b.got.clear();
        assert!(run(&mut a, &mut b, None));
        assert!(!a.repaired && !b.repaired);
        assert_eq!(kinds(&b), ["hello", "done", "digest"]);
        assert_eq!((a.agree, b.agree), (Some(true), Some(true)));
    }

    #[test]
    fn the_restored_side_may_lead_or_follow() {
        // The lower epoch opens: here the restored side (epoch 0 < 1).
        let (mut a, mut b) = restored_pair();
        b.epoch = [0; 16];
        assert!(run(&mut a, &mut b, None));
        assert!(a.repaired && b.repaired);
        assert_eq!(b.held(), a.held());
        assert_eq!(facts_got(&b), 5);
        assert!(a.got.iter().any(|m| matches!(m, SyncV1::RepairOpen { .. })));
        assert!(!b.got.iter().any(|m| matches!(m, SyncV1::RepairOpen { .. })));
    }

    #[test]
    fn a_repair_cut_anywhere_moves_no_watermark_wrongly_and_the_next_repairs() {
        for cut in 0..16 {
            let (mut a, mut b) = restored_pair();
            let done = run(&mut a, &mut b, Some(cut));
            if !done {
                // a's watermark of b is the untrusted one or the repaired one.
                assert!(
                    a.watermark == Some(wm(2, 0)) || a.watermark == Some(wm(3, 0)),
                    "cut {cut}: {:?}",
                    a.watermark
                );
                assert!(
                    b.watermark == Some(wm(1, 45)) || b.watermark == Some(wm(1, 50)),
                    "cut {cut}"
                );
                if b.watermark == Some(wm(1, 50)) {
                    assert_eq!(b.held(), a.held(), "cut {cut}: moved only when complete");
                }
            }
            assert!(run(&mut a, &mut b, None), "cut {cut}");
            assert!(run(&mut a, &mut b, None), "cut {cut}");
            assert_eq!(b.held(), a.held(), "cut {cut}");
            assert_eq!(b.watermark, Some(wm(1, 50)), "cut {cut}");
            assert_eq!(a.watermark, Some(wm(3, 0)), "cut {cut}");
        }
    }

    #[test]
    fn a_requested_repair_heals_a_loss_no_watermark_shows() {
        let mut a = Side::new(1, 20);
        let mut b = Side::new(2, 7);
        assert!(run(&mut a, &mut b, None));
        // b loses two of a's facts, a loses one of b's: same epochs.
        b.applied.retain(|f| *f != vec![1, 3] && *f != vec![1, 9]);
        a.applied.retain(|f| *f != vec![2, 4]);
        assert!(run(&mut a, &mut b, None));
        assert_ne!(b.held(), a.held(), "an ordinary session does not see it");
        assert_eq!((a.agree, b.agree), (Some(false), Some(false)));
        for (want_a, want_b) in [(false, true), (true, false), (true, true)] {
            a.got.clear();
            b.got.clear();
            (a.want_repair, b.want_repair) = (want_a, want_b);
            assert!(run(&mut a, &mut b, None));
            assert!(a.repaired && b.repaired);
            assert_eq!(b.held(), a.held(), "{want_a} {want_b}");
            let opens = |s: &Side| {
                s.got
                    .iter()
                    .filter(|m| matches!(m, SyncV1::RepairOpen { .. }))
                    .count()
            };
            assert!(opens(&a) + opens(&b) >= 1);
            if (want_a, want_b) == (false, true) {
                assert_eq!(facts_got(&b), 2, "b asked for exactly what it lacked");
                assert_eq!(facts_got(&a), 1, "and sent exactly what a lacked");
            }
            // Lose again for the next round.
            b.applied.retain(|f| *f != vec![1, 3]);
        }
        assert_eq!(b.watermark, Some(wm(1, 20)));
        assert_eq!(a.watermark, Some(wm(2, 7)));
    }

    /// No item of a repair set, no round, no request and no fact that
    /// crosses ever covers a fact the export filter keeps from the peer.
    #[test]
    fn a_repair_never_covers_a_gated_fact() {
        let mut a = Side::new(1, 30);
        let mut b = Side::new(2, 10);
        let gated_a: Vec<Vec<u8>> = vec![vec![1, 4], vec![1, 17], vec![1, 30]];
        let gated_b: Vec<Vec<u8>> = vec![vec![2, 2]];
        a.gated = gated_a.clone();
        b.gated = gated_b.clone();
        a.want_repair = true;
        assert!(run(&mut a, &mut b, None));
        assert!(a.repaired && b.repaired);
        let ids = |fs: &[Vec<u8>]| fs.iter().map(|f| repair::fact_id(f)).collect::<Vec<_>>();
        for (side, gated) in [(&a, ids(&gated_a)), (&b, ids(&gated_b))] {
            assert!(!side.sets.is_empty());
            for set in &side.sets {
                let exportable = ids(&side.exportable().into_iter().cloned().collect::<Vec<_>>());
                for item in set.items() {
                    assert!(!gated.contains(&item.id), "a gated fact is an item");
                    assert!(exportable.contains(&item.id));
                }
            }
        }
        // Nothing a sent mentions a gated id; the facts never crossed.
        let mentions = |m: &SyncV1, id: &[u8; 32]| -> bool {
            let bytes = amos_protocol::wire::SyncMessage::V1(m.clone()).encode();
            bytes.windows(32).any(|w| w == id)
        };
        for (got, gated, facts) in [
            (&b.got, ids(&gated_a), &gated_a),
            (&a.got, ids(&gated_b), &gated_b),
        ] {
            for m in got {
                for id in &gated {
                    assert!(!mentions(m, id), "{m:?}");
                }
                if let SyncV1::Facts { facts: fs } = m {
                    assert!(fs.iter().all(|f| !facts.contains(f)));
                }
            }
        }
        assert!(!b.held().contains(&vec![1, 17]));
        assert!(b.held().contains(&vec![1, 16]));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Two sides that synced, then lost random facts (with or without a
        /// restore, which changes the epoch), and a repair asked by either,
        /// both or none: one session later both hold the union, and each
        /// received exactly what it lacked.
        #[test]
        fn a_repair_session_converges_to_the_union(
            na in 0i64..60,
            nb in 0i64..60,
            lost_a in proptest::collection::vec(0usize..120, 0..10),
            lost_b in proptest::collection::vec(0usize..120, 0..10),
            restore_a in proptest::prelude::any::<bool>(),
            restore_b in proptest::prelude::any::<bool>(),
            want in 1u8..4,
        ) {
            let mut a = Side::new(1, na);
            let mut b = Side::new(2, nb);
            proptest::prop_assert!(run(&mut a, &mut b, None));
            let union = a.held();
            proptest::prop_assert_eq!(&union, &b.held());
            // Losses of what each received from the other.
            let lose = |s: &mut Side, lost: &[usize]| {
                let gone: Vec<Vec<u8>> = lost
                    .iter()
                    .filter_map(|i| s.applied.get(i % s.applied.len().max(1)).cloned())
                    .collect();
                s.applied.retain(|f| !gone.contains(f));
            };
            lose(&mut a, &lost_a);
            lose(&mut b, &lost_b);
            let (miss_a, miss_b) = (
                union.difference(&a.held()).count(),
                union.difference(&b.held()).count(),
            );
            if restore_a {
                a.epoch = [5; 16];
            }
            if restore_b {
                b.epoch = [6; 16];
            }
            a.want_repair = want & 1 != 0;
            b.want_repair = want & 2 != 0;
            a.got.clear();
            b.got.clear();
            proptest::prop_assert!(run(&mut a, &mut b, None));
            proptest::prop_assert!(a.repaired && b.repaired);
            proptest::prop_assert_eq!(&a.held(), &union);
            proptest::prop_assert_eq!(&b.held(), &union);
            proptest::prop_assert_eq!(facts_got(&a), miss_a);
            proptest::prop_assert_eq!(facts_got(&b), miss_b);
        }
    }

    /// A side that forbids repair (its last attempt with the peer never
    /// completed) runs the session a node without repair would: a restore
    /// means a re-send from 0, and nothing is lost whichever side it is.
    #[test]
    fn a_side_that_forbids_repair_falls_back_to_resending() {
        for forbid_on_a in [true, false] {
            let (mut a, mut b) = restored_pair();
            // Driven by the simulation with the flag set on one side.
            a.got.clear();
            b.got.clear();
            assert!(run_with(&mut a, &mut b, forbid_on_a, !forbid_on_a));
            assert_eq!(a.held(), b.held(), "forbid on a: {forbid_on_a}");
            // The next session is ordinary and idle.
            assert!(run(&mut a, &mut b, None));
            assert!(run(&mut a, &mut b, None));
            assert_eq!((a.agree, b.agree), (Some(true), Some(true)));
        }
    }

    #[test]
    fn repair_messages_out_of_turn_are_errors() {
        let open = || {
            Event::Received(SyncV1::RepairOpen {
                round: crate::repair::Initiator::open(ItemSet::default())
                    .unwrap()
                    .1,
            })
        };
        // Before hello.
        let (mut s, _) = Session::start([1; 16], None, &[]);
        assert!(s.handle(open()).is_err());
        // A round, a request or a done without a repair.
        for m in [
            SyncV1::RepairRange { round: vec![0x61] },
            SyncV1::RepairNeed { ids: vec![[1; 32]] },
            SyncV1::RepairDone { upto: wm(2, 1) },
        ] {
            let (mut s, _) = Session::start([1; 16], None, &[]);
            s.handle(their_hello()).unwrap();
            assert!(s.handle(Event::Received(m.clone())).is_err(), "{m:?}");
        }
        // An open after the peer's done.
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        s.handle(Event::Received(SyncV1::Done { upto: wm(2, 1) }))
            .unwrap();
        assert!(s.handle(open()).is_err());
        // The responder: a junk round, a second open, done before done.
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        let acts = s.handle(open()).unwrap();
        assert_eq!(acts, vec![Action::BuildRepairSet]);
        let acts = s
            .handle(Event::RepairSet {
                items: ItemSet::default(),
                upto: wm(1, 0),
            })
            .unwrap();
        assert!(matches!(
            acts[..],
            [Action::Send(SyncV1::RepairRange { .. })]
        ));
        assert!(s.handle(open()).is_err(), "second open");
        // A chatty initiator is cut off after MAX_ROUNDS rounds.
        let round = crate::repair::Initiator::open(ItemSet::default())
            .unwrap()
            .1;
        let mut cut = None;
        for i in 0..crate::repair::MAX_ROUNDS + 2 {
            if let Err(e) = s.handle(Event::Received(SyncV1::RepairRange {
                round: round.clone(),
            })) {
                cut = Some((i, e));
                break;
            }
        }
        assert_eq!(
            cut,
            Some((
                crate::repair::MAX_ROUNDS,
                SessionError::Repair(RepairError::TooManyRounds)
            ))
        );
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        s.handle(open()).unwrap();
        s.handle(Event::RepairSet {
            items: ItemSet::default(),
            upto: wm(1, 0),
        })
        .unwrap();
        assert!(matches!(
            s.handle(Event::Received(SyncV1::RepairRange { round: vec![1, 2] })),
            Err(SessionError::Repair(_))
        ));
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        s.handle(open()).unwrap();
        assert!(
            s.handle(Event::Received(SyncV1::RepairDone { upto: wm(2, 1) }))
                .is_err(),
            "repair done before done"
        );
        // Facts after done are fine only in a repair.
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        s.handle(open()).unwrap();
        s.handle(Event::Received(SyncV1::Done { upto: wm(2, 0) }))
            .unwrap();
        assert!(
            s.handle(Event::Received(SyncV1::Facts { facts: vec![] }))
                .is_ok()
        );
    }

    /// A peer that does not repair (older than repair) sends its `Done`
    /// without opening: a side that waited for its open (the peer has the
    /// lower epoch) falls back to an ordinary session.
    #[test]
    fn a_peer_that_never_opens_falls_back_to_an_ordinary_session() {
        // Our watermark of the peer names epoch 0: it was restored (now 2).
        let (mut s, _) = Session::start([5; 16], Some(wm(0, 3)), &[]);
        let acts = s.handle(their_hello()).unwrap();
        assert!(acts.contains(&Action::BuildRepairSet));
        assert!(acts.contains(&Action::Export {
            since: SKIP_EXPORT,
            peer_reset: true
        }));
        s.handle(Event::RepairSet {
            items: ItemSet::default(),
            upto: wm(5, 9),
        })
        .unwrap();
        let acts = s
            .handle(Event::ExportDone {
                upto: wm(5, 9),
                sent: 0,
            })
            .unwrap();
        // We skipped: our done claims nothing.
        assert_eq!(acts, vec![Action::Send(SyncV1::Done { upto: wm(5, 0) })]);
        let acts = s
            .handle(Event::Received(SyncV1::Done { upto: wm(2, 4) }))
            .unwrap();
        assert_eq!(
            acts,
            vec![Action::SaveWatermark(wm(2, 4)), Action::SendDigest]
        );
    }

    #[test]
    fn a_cut_session_keeps_the_old_watermark_and_the_next_resumes() {
        for cut in 0..8 {
            let mut a = Side::new(1, 5);
            let mut b = Side::new(2, 2);
            let done = run(&mut a, &mut b, Some(cut));
            if !done {
                // Whatever arrived was applied, but no watermark moved past
                // what was not confirmed.
                assert!(b.watermark.is_none() || b.watermark == Some(wm(1, 5)));
            }
            assert!(run(&mut a, &mut b, None));
            let mut got = b.applied.clone();
            got.sort();
            got.dedup();
            assert_eq!(got.len(), 5, "cut after {cut}");
            assert_eq!(b.watermark, Some(wm(1, 5)));
        }
    }

    /// The kinds of the messages a side received, in order.
    fn kinds(side: &Side) -> Vec<&'static str> {
        side.got
            .iter()
            .map(|m| match m {
                SyncV1::Hello { .. } => "hello",
                SyncV1::Facts { .. } => "facts",
                SyncV1::Done { .. } => "done",
                SyncV1::Digest { .. } => "digest",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn digests_cross_only_in_an_idle_session_and_agree_after_a_converging_sync() {
        let mut a = Side::new(1, 4);
        let mut b = Side::new(2, 3);
        // Facts move: both sides finish after the dones, no digest.
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (None, None));
        for side in [&a, &b] {
            assert_eq!(kinds(side).last(), Some(&"done"), "{:?}", kinds(side));
        }
        // The next session moves nothing: both compare, and agree.
        a.got.clear();
        b.got.clear();
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (Some(true), Some(true)));
        for side in [&a, &b] {
            assert_eq!(kinds(side), ["hello", "done", "digest"]);
        }
        let Some(SyncV1::Digest { facts, .. }) = b.got.last() else {
            unreachable!()
        };
        assert_eq!(*facts, 7, "a's digest covers a's facts and b's it applied");
    }

    #[test]
    fn a_session_that_moves_facts_leaves_the_last_comparison() {
        let mut a = Side::new(1, 4);
        let mut b = Side::new(2, 3);
        assert!(run(&mut a, &mut b, None));
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (Some(true), Some(true)));
        // One new fact on a, one way: neither side compares (b's last
        // comparison stays, though b now holds a fact more).
        a.log.push((5, vec![1, 5]));
        (a.agree, b.agree) = (Some(false), Some(false));
        a.got.clear();
        b.got.clear();
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (Some(false), Some(false)), "untouched");
        assert_eq!(kinds(&a), ["hello", "done"]);
        assert_eq!(kinds(&b), ["hello", "facts", "done"]);
        assert_eq!(b.watermark, Some(wm(1, 5)));
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (Some(true), Some(true)));
    }

    #[test]
    fn a_refused_fact_shows_as_disagreement_in_the_next_idle_session() {
        let mut a = Side::new(1, 4);
        let mut b = Side::new(2, 3);
        b.refuses = vec![a.log[2].1.clone()];
        assert!(run(&mut a, &mut b, None));
        // The watermarks moved all the same: refusing is not failing.
        assert_eq!(b.watermark, Some(wm(1, 4)));
        assert_eq!((a.agree, b.agree), (None, None), "facts moved");
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (Some(false), Some(false)));
        // Once b takes it, the next (idle) session agrees.
        b.refuses.clear();
        b.applied.push(a.log[2].1.clone());
        assert!(run(&mut a, &mut b, None));
        assert_eq!((a.agree, b.agree), (Some(true), Some(true)));
    }

    #[test]
    fn a_session_cut_before_the_digests_kept_every_watermark() {
        // Hello, done each way (no facts): a cut after the four keeps the
        // watermarks the dones gave and compares nothing.
        let mut a = Side::new(1, 0);
        let mut b = Side::new(2, 0);
        assert!(!run(&mut a, &mut b, Some(4)));
        assert_eq!(b.watermark, Some(wm(1, 0)));
        assert_eq!(a.watermark, Some(wm(2, 0)));
        assert_eq!((a.agree, b.agree), (None, None));
    }

    /// The peer's `Hello` (epoch 2, nothing held of us).
    fn their_hello() -> Event {
        Event::Received(SyncV1::Hello {
            epoch: [2; 16],
            have: None,
            listen: vec![],
        })
    }

    fn digest(scopes: Vec<Scope>) -> Event {
        Event::Received(SyncV1::Digest {
            scopes,
            digest: [0; 32],
            facts: 0,
        })
    }

    #[test]
    fn digests_out_of_turn_are_errors() {
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        assert_eq!(
            s.handle(digest(vec![])),
            Err(SessionError::Protocol("digest before done"))
        );
        // Its done, not ours: the peer cannot have decided yet.
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        s.handle(Event::Received(SyncV1::Done { upto: wm(2, 0) }))
            .unwrap();
        assert_eq!(
            s.handle(digest(vec![])),
            Err(SessionError::Protocol("digest before done"))
        );
        // Our export ends with nothing sent, nothing came: idle, our digest.
        let (mut s, acts) = after_both_dones(None, 0);
        assert_eq!(
            acts,
            vec![
                Action::Send(SyncV1::Done { upto: wm(1, 0) }),
                Action::SendDigest,
            ]
        );
        assert!(
            s.handle(digest(vec![Scope::Global, Scope::Global]))
                .is_err(),
            "unsorted scopes fed around the decoder"
        );
        let (mut s, _) = after_both_dones(None, 0);
        // Both digests crossed: finished.
        let acts = s.handle(digest(vec![Scope::Global])).unwrap();
        assert!(
            matches!(acts[..], [Action::CompareDigest { .. }, Action::Finished]),
            "{acts:?}"
        );
        assert!(s.is_finished());
        assert!(s.handle(digest(vec![])).is_err(), "after the end");
    }

    /// Facts that moved either way — counted by what crossed, so both sides
    /// count the same — end the session at both `Done`s without digests.
    #[test]
    fn a_session_that_moved_facts_finishes_without_digests() {
        // We sent two, received none.
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        s.handle(Event::ExportDone {
            upto: wm(1, 2),
            sent: 2,
        })
        .unwrap();
        let acts = s
            .handle(Event::Received(SyncV1::Done { upto: wm(2, 0) }))
            .unwrap();
        assert_eq!(
            acts,
            vec![Action::SaveWatermark(wm(2, 0)), Action::Finished]
        );
        assert!(s.is_finished());
        assert!(s.handle(digest(vec![])).is_err(), "after the end");
        // We received one (even one the import gate refuses), sent none.
        let (_, acts) = after_both_dones(Some(vec![vec![7]]), 0);
        assert_eq!(
            acts,
            vec![
                Action::Send(SyncV1::Done { upto: wm(1, 0) }),
                Action::Finished
            ]
        );
        // An empty batch moves nothing.
        let (_, acts) = after_both_dones(Some(vec![]), 0);
        assert_eq!(acts[1..], [Action::SendDigest]);
    }

    /// A session that got the peer's hello, `batch` (if any), its done, and
    /// then finished its export having sent `sent` facts; the actions of
    /// that last step.
    fn after_both_dones(batch: Option<Vec<Vec<u8>>>, sent: u64) -> (Session, Vec<Action>) {
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(their_hello()).unwrap();
        if let Some(facts) = batch {
            s.handle(Event::Received(SyncV1::Facts { facts })).unwrap();
        }
        s.handle(Event::Received(SyncV1::Done { upto: wm(2, 1) }))
            .unwrap();
        let acts = s
            .handle(Event::ExportDone {
                upto: wm(1, sent as i64),
                sent,
            })
            .unwrap();
        (s, acts)
    }

    /// A node older than `Digest` ends its stream after both `Done`s: the
    /// session finishes without a comparison. Earlier, the same end is an
    /// error.
    #[test]
    fn an_older_peer_ending_after_both_dones_finishes_the_session() {
        let hello = Event::Received(SyncV1::Hello {
            epoch: [2; 16],
            have: None,
            listen: vec![],
        });
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(hello.clone()).unwrap();
        s.handle(Event::ExportDone {
            upto: wm(1, 0),
            sent: 0,
        })
        .unwrap();
        let acts = s
            .handle(Event::Received(SyncV1::Done { upto: wm(2, 3) }))
            .unwrap();
        assert_eq!(
            acts,
            vec![Action::SaveWatermark(wm(2, 3)), Action::SendDigest]
        );
        assert_eq!(s.handle(Event::PeerEnded), Ok(vec![Action::Finished]));
        assert!(s.is_finished());

        let (mut s, _) = Session::start([1; 16], None, &[]);
        assert!(s.handle(Event::PeerEnded).is_err(), "before hello");
        s.handle(hello.clone()).unwrap();
        s.handle(Event::ExportDone {
            upto: wm(1, 0),
            sent: 0,
        })
        .unwrap();
        assert!(s.handle(Event::PeerEnded).is_err(), "before its done");
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(hello).unwrap();
        s.handle(Event::Received(SyncV1::Done { upto: wm(2, 3) }))
            .unwrap();
        assert!(s.handle(Event::PeerEnded).is_err(), "before our done");
    }

    #[test]
    fn export_says_when_the_peer_log_is_new() {
        let hello = |e: u8| {
            Event::Received(SyncV1::Hello {
                epoch: [e; 16],
                have: None,
                listen: vec![],
            })
        };
        let export = |acts: Vec<Action>| {
            acts.into_iter()
                .find_map(|a| match a {
                    Action::Export { peer_reset, .. } => Some(peer_reset),
                    _ => None,
                })
                .unwrap()
        };
        let (mut first, _) = Session::start([1; 16], None, &[]);
        assert!(export(first.handle(hello(2)).unwrap()), "first sync");
        let (mut same, _) = Session::start([1; 16], Some(wm(2, 5)), &[]);
        assert!(!export(same.handle(hello(2)).unwrap()), "same epoch");
        let (mut restored, _) = Session::start([1; 16], Some(wm(2, 5)), &[]);
        assert!(export(restored.handle(hello(3)).unwrap()), "peer restored");
    }

    #[test]
    fn protocol_violations_are_errors() {
        let (mut s, _) = Session::start([1; 16], None, &[]);
        assert!(
            s.handle(Event::Received(SyncV1::Facts { facts: vec![] }))
                .is_err()
        );
        let (mut s, _) = Session::start([1; 16], None, &[]);
        assert!(
            s.handle(Event::Received(SyncV1::Done { upto: wm(2, 1) }))
                .is_err()
        );
        let (mut s, _) = Session::start([1; 16], None, &[]);
        s.handle(Event::Received(SyncV1::Hello {
            epoch: [2; 16],
            have: None,
            listen: vec![],
        }))
        .unwrap();
        assert!(
            s.handle(Event::Received(SyncV1::Done { upto: wm(3, 1) }))
                .is_err(),
            "epoch switch"
        );
        assert!(
            s.handle(Event::Received(SyncV1::Hello {
                epoch: [2; 16],
                have: None,
                listen: vec![],
            }))
            .is_err(),
            "second hello"
        );
        let (mut s, _) = Session::start([1; 16], None, &[]);
        assert_eq!(
            s.handle(Event::Received(SyncV1::Refused { reason: "x".into() })),
            Err(SessionError::Refused("x".into()))
        );
    }

    #[test]
    fn each_side_hears_where_the_other_serves_once_per_session() {
        let mut a = Side::new(1, 2);
        let mut b = Side::new(2, 2);
        let b_at: SocketAddr = "0.0.0.0:4748".parse().unwrap();
        b.listen = vec![b_at];
        assert!(run(&mut a, &mut b, None));
        assert_eq!(a.heard, vec![vec![b_at]], "a hears b's address");
        assert!(b.heard.is_empty(), "a serves nowhere: b hears nothing");
        // Both serve: each hears the other's, in order, and the facts still flow.
        let a_at: Vec<SocketAddr> = vec![
            "[::1]:4747".parse().unwrap(),
            "10.1.2.3:4747".parse().unwrap(),
        ];
        a.listen = a_at.clone();
        a.log.push((3, vec![1, 3]));
        assert!(run(&mut a, &mut b, None));
        assert_eq!(b.heard, vec![a_at]);
        assert_eq!(a.heard.len(), 2);
        assert_eq!(b.watermark, Some(wm(1, 3)));
    }

    #[test]
    fn only_the_first_eight_addresses_are_sent() {
        let many: Vec<SocketAddr> = (1..=12)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        let (_, acts) = Session::start([1; 16], None, &many);
        let Some(Action::Send(SyncV1::Hello { listen, .. })) = acts.first() else {
            panic!("a session opens with hello: {acts:?}");
        };
        assert_eq!(listen.len(), MAX_LISTEN);
        assert_eq!(listen[0], "127.0.0.1:1");
    }

    #[test]
    fn junk_listen_addresses_are_a_protocol_error() {
        let hello = |listen: Vec<String>| {
            Event::Received(SyncV1::Hello {
                epoch: [2; 16],
                have: None,
                listen,
            })
        };
        for bad in [
            vec!["example.org:4747".to_owned()],
            vec!["1.2.3.4:0".to_owned()],
            (1..=9).map(|p| format!("1.2.3.4:{p}")).collect(),
        ] {
            let (mut s, _) = Session::start([1; 16], None, &[]);
            assert!(
                matches!(s.handle(hello(bad.clone())), Err(SessionError::Protocol(_))),
                "{bad:?}"
            );
        }
        let (mut s, _) = Session::start([1; 16], None, &[]);
        let acts = s.handle(hello(vec![])).unwrap();
        assert!(
            !acts.iter().any(|a| matches!(a, Action::PeerListens(_))),
            "no addresses, no action"
        );
    }
}
