//! Two real nodes driven through the sans-IO sync session (no network): the
//! first sync sends what each side's policy admits, an idle sync sends no
//! facts, a later sync sends only what changed, and watermarks move only at
//! `Done`; at the end each side compares the other's digest over the scopes
//! it was given with its own. The QUIC transport drives the same `Session`.

use std::collections::VecDeque;

use amos_node::{Home, NewMemory, Node};
use amos_protocol::SignedFact;
use amos_protocol::wire::SyncV1;
use amos_sync::session::{Action, Event, Session};

fn node(dir: &tempfile::TempDir, name: &str) -> Node {
    let home = Home::new(dir.path().join(name));
    Node::init(&home, Some(name)).unwrap();
    Node::open(&home).unwrap()
}

/// Nodes `a` and `b`, peers of each other with `team:apollo`; `a` made
/// `teams` and its agent alice is in all of them (b knows alice too).
fn apollo_pair(dir: &tempfile::TempDir, teams: &[&str]) -> (Node, Node) {
    let mut a = node(dir, "a");
    let mut b = node(dir, "b");
    a.peer_add(&b.node_id().to_string(), None, "team:apollo")
        .unwrap();
    b.peer_add(&a.node_id().to_string(), None, "team:apollo")
        .unwrap();
    for t in teams {
        a.team_create(t, None).unwrap();
    }
    let teams: Vec<String> = teams.iter().map(|t| t.to_string()).collect();
    a.agent_add("alice", "agent", &teams).unwrap();
    b.agent_add("alice", "agent", &[]).unwrap();
    (a, b)
}

/// One complete session between `a` and `b`; returns the facts each side
/// received (a's, b's).
fn sync(a: &mut Node, b: &mut Node) -> (usize, usize) {
    sync_logged(a, b, (false, false)).0
}

/// [`sync`], `repair` asking a repair of a's and b's session; also every
/// message that crossed, in order.
fn sync_logged(a: &mut Node, b: &mut Node, repair: (bool, bool)) -> ((usize, usize), Vec<SyncV1>) {
    sync_hooked(a, b, repair, &mut |_, _| {})
}

/// [`sync_logged`], running `local_write(b, applied)` on b around its first
/// batch from a: once just before b applies it (`applied` false: after b's
/// export was read, so a write there is news the export missed), once
/// just after it committed (`true`: between the apply and the watermarks,
/// before either `Done` is handled).
fn sync_hooked(
    a: &mut Node,
    b: &mut Node,
    repair: (bool, bool),
    local_write: &mut dyn FnMut(&mut Node, bool),
) -> ((usize, usize), Vec<SyncV1>) {
    let mut hooked = false;
    let (ida, idb) = (a.node_id(), b.node_id());
    let (mut sa, first_a) =
        Session::start(a.epoch_bytes().unwrap(), a.watermark_of(&idb).unwrap(), &[]);
    let (mut sb, first_b) =
        Session::start(b.epoch_bytes().unwrap(), b.watermark_of(&ida).unwrap(), &[]);
    if repair.0 {
        sa.request_repair();
    }
    if repair.1 {
        sb.request_repair();
    }
    let mut to_a: VecDeque<SyncV1> = VecDeque::new();
    let mut to_b: VecDeque<SyncV1> = VecDeque::new();
    let mut log = Vec::new();
    let mut received = (0, 0);
    // In the order the sessions emitted them, as the driver runs them.
    let mut work: VecDeque<(bool, Vec<Action>)> = [(true, first_a), (false, first_b)].into();
    let mut finished = (false, false);
    for _ in 0..10_000 {
        while let Some((is_a, actions)) = work.pop_front() {
            for act in actions {
                let (me, peer, session, outbox) = if is_a {
                    (&mut *a, idb, &mut sa, &mut to_b)
                } else {
                    (&mut *b, ida, &mut sb, &mut to_a)
                };
                match act {
                    Action::Send(m) => outbox.push_back(m),
                    Action::Export { since, peer_reset } => {
                        let mut sent = 0;
                        let upto = me
                            .export_for_session(&peer, since, peer_reset, 100, |facts| {
                                sent += facts.len() as u64;
                                outbox.push_back(SyncV1::Facts { facts });
                                Ok(())
                            })
                            .unwrap();
                        let upto = amos_protocol::wire::Watermark {
                            epoch: me.epoch_bytes().unwrap(),
                            seq: upto,
                        };
                        work.push_back((
                            is_a,
                            session.handle(Event::ExportDone { upto, sent }).unwrap(),
                        ));
                    }
                    Action::Apply(facts) => {
                        if is_a {
                            received.0 += facts.len();
                        } else {
                            received.1 += facts.len();
                        }
                        let v = facts
                            .iter()
                            .map(|f| SignedFact::decode_verified(f).unwrap())
                            .collect();
                        let hook = !is_a && !hooked;
                        if hook {
                            local_write(me, false);
                        }
                        // As the QUIC driver does: under the epoch the
                        // peer's `Hello` named (its echo ranges, §7.1).
                        me.apply_from_seqs(&peer, v, session.peer_epoch().as_ref())
                            .unwrap();
                        if hook {
                            hooked = true;
                            local_write(me, true);
                        }
                    }
                    Action::PeerListens(_) => unreachable!("neither side serves"),
                    Action::SaveWatermark(w) => me.save_watermark(&peer, &w).unwrap(),
                    Action::SendDigest => {
                        let (scopes, digest, facts) = me.session_digest(&peer).unwrap();
                        outbox.push_back(SyncV1::Digest {
                            scopes,
                            digest,
                            facts,
                        });
                    }
                    Action::CompareDigest {
                        scopes,
                        digest,
                        facts,
                    } => {
                        me.peer_compare_digest(&peer, &scopes, &digest, facts)
                            .unwrap();
                    }
                    Action::BuildRepairSet => {
                        let (items, seq) = me.repair_set(&peer).unwrap();
                        let upto = amos_protocol::wire::Watermark {
                            epoch: me.epoch_bytes().unwrap(),
                            seq,
                        };
                        work.push_back((
                            is_a,
                            session.handle(Event::RepairSet { items, upto }).unwrap(),
                        ));
                    }
                    Action::SendRepairFacts(ids) => {
                        let sent = me
                            .repair_facts(&peer, &ids, 100, |facts| {
                                outbox.push_back(SyncV1::Facts { facts });
                                Ok(())
                            })
                            .unwrap();
                        work.push_back((is_a, session.handle(Event::RepairSent { sent }).unwrap()));
                    }
                    Action::Finished => {
                        if is_a {
                            finished.0 = true;
                        } else {
                            finished.1 = true;
                        }
                    }
                }
            }
        }
        if let Some(m) = to_b.pop_front() {
            log.push(m.clone());
            work.push_back((false, sb.handle(Event::Received(m)).unwrap()));
        } else if let Some(m) = to_a.pop_front() {
            log.push(m.clone());
            work.push_back((true, sa.handle(Event::Received(m)).unwrap()));
        } else {
            break;
        }
    }
    assert_eq!(finished, (true, true), "session did not finish");
    (received, log)
}

#[test]
fn sessions_converge_resume_and_idle_cheaply() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = apollo_pair(&dir, &["apollo"]);
    let who = a.requester("alice").unwrap();
    for i in 0..20 {
        let mut m = NewMemory::new(format!("iota shared {i}"));
        m.share = vec!["team:apollo".parse().unwrap()];
        a.add(&who, m).unwrap();
    }
    a.add(&who, NewMemory::new("iota private")).unwrap();

    let (to_a, to_b) = sync(&mut a, &mut b);
    assert_eq!(to_a, 0, "b had nothing a may receive");
    assert!(
        to_b >= 42,
        "20 memories (content + acl) and the org records: {to_b}"
    );
    let scope = ["team:apollo".to_string()];
    assert_eq!(a.digest(&scope).unwrap(), b.digest(&scope).unwrap());
    assert_eq!(
        (digests(&a), digests(&b)),
        (None, None),
        "facts moved: no digest compared"
    );
    let alice_b = b.requester("alice").unwrap();
    assert_eq!(b.search(&alice_b, "iota", 50).unwrap().len(), 20);

    // Idle: nothing changed, nothing is sent; the digests are compared.
    assert_eq!(sync(&mut a, &mut b), (0, 0));
    assert_eq!(
        digests(&a),
        Some(true),
        "a compared b's digest with its own"
    );
    assert_eq!(
        digests(&b),
        Some(true),
        "b compared a's digest with its own"
    );
    let compared = |n: &Node| n.peer_list().unwrap()[0].digest.clone();
    let (on_a, on_b) = (compared(&a), compared(&b));

    // One new memory: only its facts travel; the last comparison stays.
    let mut m = NewMemory::new("iota late");
    m.share = vec!["team:apollo".parse().unwrap()];
    a.add(&who, m).unwrap();
    assert_eq!(sync(&mut a, &mut b), (0, 2));
    assert_eq!(a.digest(&scope).unwrap(), b.digest(&scope).unwrap());
    assert_eq!((compared(&a), compared(&b)), (on_a, on_b), "not compared");

    // A policy change resets the watermark: everything admitted is re-sent.
    b.peer_set_policy(&a.node_id().to_string(), "team:apollo,global")
        .unwrap();
    let (to_a, _) = sync(&mut a, &mut b);
    assert_eq!(to_a, 0);
    a.peer_set_policy(&b.node_id().to_string(), "team:apollo,global")
        .unwrap();
    let (_, to_b) = sync(&mut a, &mut b);
    assert!(to_b >= 44, "re-sent after the policy change: {to_b}");
    assert_eq!(a.digest(&scope).unwrap(), b.digest(&scope).unwrap());
    assert_eq!(sync(&mut a, &mut b), (0, 0));
    assert_eq!((digests(&a), digests(&b)), (Some(true), Some(true)));
}

/// Sync until a session moves nothing (the one that compares digests).
fn settle(a: &mut Node, b: &mut Node) {
    for _ in 0..3 {
        if sync(a, b) == (0, 0) {
            return;
        }
    }
    panic!("three sessions in a row moved facts");
}

/// The last digest comparison recorded for the node's only peer.
fn digests(n: &Node) -> Option<bool> {
    n.peer_list().unwrap()[0].digest.as_ref().map(|d| d.agree)
}

/// The digest a node sends covers only what the policy lets the peer
/// receive: memories it may not see (private, another team's) leave it
/// unchanged, so it says nothing of them. Nor is a digest compared over
/// scopes the receiver does not give its sender.
#[test]
fn a_session_digest_covers_only_what_the_peer_may_receive() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = apollo_pair(&dir, &["apollo", "hermes"]);
    let who = a.requester("alice").unwrap();
    let mut m = NewMemory::new("kappa shared");
    m.share = vec!["team:apollo".parse().unwrap()];
    a.add(&who, m).unwrap();
    settle(&mut a, &mut b);
    assert_eq!((digests(&a), digests(&b)), (Some(true), Some(true)));

    let before = a.session_digest(&b.node_id()).unwrap();
    // The policy's `team:apollo`, typed before a made apollo, names it now.
    let apollo = amos_protocol::TeamId::qualified("apollo", &a.node_id()).unwrap();
    assert_eq!(before.0, vec![amos_protocol::Scope::Team(apollo)]);
    a.add(&who, NewMemory::new("kappa private")).unwrap();
    let mut other = NewMemory::new("kappa hermes only");
    other.share = vec!["team:hermes".parse().unwrap()];
    a.add(&who, other).unwrap();
    assert_eq!(
        a.session_digest(&b.node_id()).unwrap(),
        before,
        "gated memories moved the digest b receives"
    );
    // (Not a stale cache: what b may receive does move it.)
    let mut seen = NewMemory::new("kappa shared later");
    seen.share = vec!["team:apollo".parse().unwrap()];
    a.add(&who, seen).unwrap();
    let after = a.session_digest(&b.node_id()).unwrap();
    assert_ne!(after.1, before.1);
    assert_eq!(after.2, before.2 + 2, "its content and acl facts");
    assert_eq!(
        after.1,
        a.session_digest(&b.node_id()).unwrap().1,
        "asked again"
    );
    // b receives the one memory it may; the digests still agree.
    settle(&mut a, &mut b);
    assert_eq!((digests(&a), digests(&b)), (Some(true), Some(true)));

    // b comes to hold an apollo fact a lacks: b gives a only `global`, so
    // it never travels. a's digest names apollo (what it gives b), which b
    // no longer gives a; b's names `global`, which a does not give b.
    // Neither compares (over the scopes named, a digest would tell its
    // sender what we hold outside what we give it; docs/design.md §7.3),
    // and the rows forget the comparisons they held.
    b.peer_set_policy(&a.node_id().to_string(), "global")
        .unwrap();
    // (alice is an apollo member on b too: the membership came from a.)
    let alice_b = b.requester("alice").unwrap();
    let mut m = NewMemory::new("kappa from b");
    m.share = vec!["team:apollo".parse().unwrap()];
    b.add(&alice_b, m).unwrap();
    settle(&mut a, &mut b);
    let apollo = ["team:apollo".to_string()];
    assert_ne!(a.digest(&apollo).unwrap(), b.digest(&apollo).unwrap());
    assert_eq!((digests(&a), digests(&b)), (None, None), "not compared");
}

/// A repair between a node holding private, another team's and shared
/// memories and a `team:apollo` peer that lost some: it converges in the
/// scope, and no message of the session — no round, no request, no fact —
/// ever names a fact the export filter keeps from the peer (each side's
/// repair set is its export filter's; tested beside `Node::repair_set`).
#[test]
fn a_repair_with_a_scoped_peer_never_names_a_gated_fact() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = apollo_pair(&dir, &["apollo", "hermes"]);
    let who = a.requester("alice").unwrap();
    for i in 0..30 {
        let mut m = NewMemory::new(format!("lambda shared {i}"));
        m.share = vec!["team:apollo".parse().unwrap()];
        a.add(&who, m).unwrap();
    }
    settle(&mut a, &mut b);
    // Gated on a: private, hermes-only.
    a.add(&who, NewMemory::new("lambda private")).unwrap();
    let mut m = NewMemory::new("lambda hermes only");
    m.share = vec!["team:hermes".parse().unwrap()];
    a.add(&who, m).unwrap();
    let ids = |n: &mut Node, policy: &amos_acl::PeerPolicy| {
        let mut out = std::collections::BTreeSet::new();
        n.export_snapshot(policy, 64, |facts| {
            out.extend(facts.iter().map(|f| amos_sync::repair::fact_id(f)));
            Ok(())
        })
        .unwrap();
        out
    };
    let scoped = a.peer_policy(&b.node_id()).unwrap().unwrap();
    let everything = ids(&mut a, &amos_acl::PeerPolicy::Full);
    let gated: Vec<[u8; 32]> = everything
        .difference(&ids(&mut a, &scoped))
        .copied()
        .collect();
    assert!(gated.len() >= 4, "{gated:?}");

    // b asks for a repair while three new apollo memories of a's wait
    // behind its watermark: a's export brings them, and b's repair asks
    // for nothing it already received.
    for i in 0..3 {
        let mut m = NewMemory::new(format!("lambda later {i}"));
        m.share = vec!["team:apollo".parse().unwrap()];
        a.add(&who, m).unwrap();
    }
    let ((to_a, to_b), log) = sync_logged(&mut a, &mut b, (false, true));
    assert_eq!((to_a, to_b), (0, 6), "exactly the three memories b lacked");
    assert!(log.iter().any(|m| matches!(m, SyncV1::RepairOpen { .. })));
    assert!(log.iter().any(|m| matches!(m, SyncV1::RepairDone { .. })));
    for m in &log {
        let bytes = amos_protocol::wire::SyncMessage::V1(m.clone()).encode();
        for g in &gated {
            assert!(
                !bytes.windows(32).any(|w| w == g),
                "a message names a gated fact: {m:?}"
            );
        }
    }
    let apollo = ["team:apollo".to_string()];
    assert_eq!(a.digest(&apollo).unwrap(), b.digest(&apollo).unwrap());
    // The watermarks moved: the next session is idle and agrees.
    assert_eq!(sync(&mut a, &mut b), (0, 0));
    assert_eq!((digests(&a), digests(&b)), (Some(true), Some(true)));
}

/// Nodes `a` and `b`, `full` peers of each other, each with agent alice.
fn full_pair(dir: &tempfile::TempDir, names: (&str, &str)) -> (Node, Node) {
    let mut a = node(dir, names.0);
    let mut b = node(dir, names.1);
    a.peer_add(&b.node_id().to_string(), None, "full").unwrap();
    b.peer_add(&a.node_id().to_string(), None, "full").unwrap();
    a.agent_add("alice", "agent", &[]).unwrap();
    b.agent_add("alice", "agent", &[]).unwrap();
    (a, b)
}

/// What a peer sent is not sent back to it (docs/design.md §7.1, echo
/// ranges): facts c wrote reach b through a, and b's next export to a —
/// from a watermark older than those applies — holds none of them. Before
/// echo ranges only a's own facts were left out, and c's went back.
#[test]
fn facts_a_peer_relayed_are_not_sent_back_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut a) = full_pair(&dir, ("c", "a"));
    let mut b = node(&dir, "b");
    a.peer_add(&b.node_id().to_string(), None, "full").unwrap();
    b.peer_add(&a.node_id().to_string(), None, "full").unwrap();
    let who = c.requester("alice").unwrap();
    for i in 0..10 {
        c.add(&who, NewMemory::new(format!("lambda relayed {i}")))
            .unwrap();
    }
    let (_, to_a) = sync(&mut c, &mut a);
    assert!(to_a >= 20, "c's memories reached a: {to_a}");
    let (_, to_b) = sync(&mut a, &mut b);
    assert!(to_b >= 20, "and b, through a: {to_b}");
    // b's watermark at a predates those applies; still nothing goes back.
    assert_eq!(sync(&mut a, &mut b), (0, 0), "b echoed c's facts to a");
    assert_eq!(digests(&b), Some(true), "idle: b compared a's digest");
    assert_eq!(a.digest(&[]).unwrap(), b.digest(&[]).unwrap());
}

/// A write on b during a session — a new memory after b applied a's
/// batch, an edit of a memory a's batch also edits just before b applies
/// it — is never taken for an echo of a's: both reach a by the next
/// session, and the texts converge with both edits.
#[test]
fn a_local_write_during_a_session_still_reaches_the_peer() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = full_pair(&dir, ("a", "b"));
    let who = a.requester("alice").unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let text = format!("mu line one {i}\nmu line two {i}\n");
        ids.push(a.add(&who, NewMemory::new(text)).unwrap().to_string());
    }
    settle(&mut a, &mut b);
    let edited = ids[2].clone();
    let on_a = a.requester("alice").unwrap();
    a.update(&on_a, &edited, "mu line one 2 [a]\nmu line two 2\n")
        .unwrap();
    let mut added = None;
    sync_hooked(&mut a, &mut b, (false, false), &mut |b, applied| {
        let alice = b.requester("alice").unwrap();
        if applied {
            let m = NewMemory::new("mu written by b between apply and done");
            added = Some(b.add(&alice, m).unwrap().to_string());
        } else {
            b.update(&alice, &edited, "mu line one 2\nmu line two 2 [b]\n")
                .unwrap();
        }
    });
    let added = added.expect("the hook ran");
    settle(&mut a, &mut b);
    let on_a = a.requester("alice").unwrap();
    let text = a.get(&on_a, &edited).unwrap().content().to_string();
    assert!(
        text.contains("[a]") && text.contains("[b]"),
        "both edits on a: {text:?}"
    );
    assert_eq!(
        text,
        b.get(&b.requester("alice").unwrap(), &edited)
            .unwrap()
            .content()
    );
    assert!(a.get(&on_a, &added).is_ok(), "b's new memory reached a");
    assert_eq!(a.digest(&[]).unwrap(), b.digest(&[]).unwrap());
}
