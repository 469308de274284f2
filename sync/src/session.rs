//! The sync session as a state machine (sans-IO, quinn-proto's pattern): the
//! transport feeds it [`Event`]s and carries out the [`Action`]s it returns;
//! a test simulator drives it just as well.
//!
//! One session = both sides pull (docs/design.md §7):
//!
//! 1. each side sends `Hello { epoch, have, listen }` — its log epoch, the
//!    watermark it holds of the other, and where it serves (if it does);
//! 2. on the other's `Hello`, a side exports its facts changed after that
//!    watermark (from 0 if the epochs differ: a restored store starts over;
//!    last-writer-wins makes the resend harmless), sends them as `Facts`
//!    batches, then `Done { upto }`;
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
//!
//! Invariant: a watermark only moves after everything it covers committed,
//! so a session cut at any point loses nothing; the next one resumes. The
//! digests come after both `Done`s: a session cut before them lost no
//! facts and moved no watermark wrongly, only the comparison.
//!
//! The peer's listen addresses surface as [`Action::PeerListens`], checked
//! but not interpreted: the driver knows the connection (who the handshake
//! authenticated, where it came from) and decides what to record. The
//! session never registers, trusts or changes a peer.

use std::net::SocketAddr;

use amos_protocol::Scope;
use amos_protocol::wire::{
    Epoch, MAX_LISTEN, SyncV1, Watermark, check_digest_scopes, parse_listen,
};

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A message from the peer.
    Received(SyncV1),
    /// The driver finished sending our facts (as `Facts` messages) up to
    /// `upto`; `sent`: how many facts those messages carried.
    ExportDone { upto: Watermark, sent: u64 },
    /// The peer ended its side of the stream (cleanly: no error).
    PeerEnded,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send(SyncV1),
    /// Send our facts changed after `since` that the peer may receive, as
    /// `Facts` messages, then report [`Event::ExportDone`]. `peer_reset`:
    /// the peer's log is new to us (first sync, or its epoch changed — it
    /// was restored and may have lost its own facts), so send them too;
    /// otherwise its own facts need not travel back to it.
    Export {
        since: i64,
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
        scopes: Vec<Scope>,
        digest: [u8; 32],
        facts: u64,
    },
    /// Both directions are complete.
    Finished,
}

/// A protocol violation by the peer (or a refusal it sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("peer broke the sync protocol: {0}")]
    Protocol(&'static str),
    #[error("peer refused the sync: {0}")]
    Refused(String),
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

    pub fn is_finished(&self) -> bool {
        self.finished
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
                let since = match have {
                    Some(w) if w.epoch == self.my_epoch && w.seq >= 0 => w.seq,
                    _ => 0,
                };
                let peer_reset = self.have.is_none_or(|w| w.epoch != epoch);
                out.push(Action::Export { since, peer_reset });
            }
            Event::Received(SyncV1::Facts { facts }) => {
                if self.their_epoch.is_none() {
                    return Err(Protocol("facts before hello"));
                }
                if self.received_done {
                    return Err(Protocol("facts after done"));
                }
                self.moved = self.moved.saturating_add(facts.len() as u64);
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
                out.push(Action::SaveWatermark(upto));
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
                // Checked again: the driver may feed unchecked messages.
                check_digest_scopes(&scopes).map_err(|_| Protocol("malformed digest scopes"))?;
                self.received_digest = true;
                out.push(Action::CompareDigest {
                    scopes,
                    digest,
                    facts,
                });
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
                if self.their_epoch.is_none() || self.sent_done {
                    return Err(Protocol("export finished out of turn"));
                }
                self.sent_done = true;
                self.moved = self.moved.saturating_add(sent);
                out.push(Action::Send(SyncV1::Done { upto }));
            }
        }
        if self.sent_done && self.received_done && !self.sent_digest && !self.finished {
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
        if self.compare && self.sent_digest && self.received_digest && !self.finished {
            self.finished = true;
            out.push(Action::Finished);
        }
        Ok(out)
    }
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
            }
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
        let (mut sa, acts_a) = Session::start(a.epoch, a.watermark, &a.listen);
        let (mut sb, acts_b) = Session::start(b.epoch, b.watermark, &b.listen);
        let mut to_b: std::collections::VecDeque<SyncV1> = Default::default();
        let mut to_a: std::collections::VecDeque<SyncV1> = Default::default();
        let mut pending = vec![(true, acts_a), (false, acts_b)];
        let mut delivered = 0;
        let mut finished = (false, false);
        loop {
            while let Some((is_a, acts)) = pending.pop() {
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
                            for (_, f) in side.log.iter().filter(|(s, _)| *s > since) {
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
                            pending.push((is_a, next));
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
                        Action::Finished => {
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
                pending.push((false, acts));
            } else if let Some(m) = to_a.pop_front() {
                delivered += 1;
                a.got.push(m.clone());
                let acts = sa.handle(Event::Received(m)).unwrap();
                pending.push((true, acts));
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

    #[test]
    fn a_restored_store_starts_over_from_zero() {
        let mut a = Side::new(1, 5);
        let mut b = Side::new(2, 0);
        assert!(run(&mut a, &mut b, None));
        a.epoch = [9; 16]; // restored: new epoch
        b.applied.clear();
        assert!(run(&mut a, &mut b, None));
        assert_eq!(b.applied.len(), 5);
        assert_eq!(b.watermark, Some(wm(9, 5)));
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
