//! The session state machine, two sides driven against each other over
//! in-memory replicas: watermarks, repair after a restore or a loss, the
//! digests of idle sessions, messages out of turn, and the listen
//! addresses each side hears.

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

fn run_full(a: &mut Side, b: &mut Side, cut_after: Option<usize>, forbid: (bool, bool)) -> bool {
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

/// Versioned sessions (docs/design.md §13): at version 2 each side opens
/// with `Hello2` naming its version and features, and learns the peer's; at
/// version 1 (545333a) the opening is the old `Hello` and the peer is taken
/// to decode what 545333a decodes. A hello of the other kind is refused.
#[test]
fn a_versioned_session_opens_with_hello2_and_learns_the_peers_features() {
    let features = Features(0b101);
    let (mut a, out_a) = Session::start_versioned([1; 16], None, &[], 2, Features::ALL);
    let (_b, out_b) = Session::start_versioned([2; 16], Some(wm(1, 3)), &[], 2, features);
    let [Action::Send(hello_a @ SyncV1::Hello2 { version: 2, .. })] = out_a.as_slice() else {
        panic!("a version-2 session opens with Hello2: {out_a:?}");
    };
    let [Action::Send(hello_b)] = out_b.as_slice() else {
        panic!("{out_b:?}");
    };
    assert_eq!(a.peer_version(), None);
    let acts = a.handle(Event::Received(hello_b.clone())).unwrap();
    assert_eq!(a.peer_version(), Some((2, features)), "unknown bits kept");
    assert!(acts.contains(&Action::Export {
        since: 3,
        peer_reset: true
    }));

    // Version 1: the old hello, and 545333a's features.
    let (mut old, out_old) = Session::start([3; 16], None, &[]);
    assert!(matches!(
        out_old.as_slice(),
        [Action::Send(SyncV1::Hello { .. })]
    ));
    let (_, out_v1) = Session::start_versioned([4; 16], None, &[], 1, Features::ALL);
    assert_eq!(
        out_v1,
        out_old
            .iter()
            .map(|a| match a {
                Action::Send(SyncV1::Hello { have, listen, .. }) => Action::Send(SyncV1::Hello {
                    epoch: [4; 16],
                    have: *have,
                    listen: listen.clone(),
                }),
                other => other.clone(),
            })
            .collect::<Vec<_>>(),
        "a version-1 session sends no features"
    );
    let [Action::Send(v1_hello)] = out_v1.as_slice() else {
        panic!()
    };
    old.handle(Event::Received(v1_hello.clone())).unwrap();
    assert_eq!(old.peer_version(), Some((1, Features::implied_by(1))));

    // The other kind of hello is a protocol error either way.
    let (mut v2, _) = Session::start_versioned([5; 16], None, &[], 2, Features::ALL);
    assert!(v2.handle(Event::Received(v1_hello.clone())).is_err());
    let (mut v1, _) = Session::start([6; 16], None, &[]);
    assert!(v1.handle(Event::Received(hello_a.clone())).is_err());
}
