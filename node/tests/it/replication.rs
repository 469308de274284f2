//! Two and three homes exchanging facts in-process through the node's
//! export and apply paths (what bundles and live sync carry): convergence
//! under `full` policies, scope limits, retraction and tombstones.

use amos_acl::PeerPolicy;
use amos_node::{Home, NewMemory, Node};
use amos_protocol::{NodeId, Scope, SignedFact};

struct Peer {
    _dir: tempfile::TempDir,
    node: Node,
}

fn peer(name: &str) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path().join(name));
    Node::init(&home, Some(name)).unwrap();
    Peer {
        node: Node::open(&home).unwrap(),
        _dir: dir,
    }
}

/// Send everything `from` may send to `to` (under the policy `from` gave `to`).
fn send(from: &Peer, to: &mut Peer) -> amos_sync::ApplyReport {
    let policy = from
        .node
        .peer_policy(&to.node.node_id())
        .unwrap()
        .expect("registered");
    let mut facts = Vec::new();
    from.node
        .export(&policy, 0, 500, |batch| {
            facts.extend(batch);
            Ok(())
        })
        .unwrap();
    let verified = facts
        .iter()
        .map(|b| SignedFact::decode_verified(b).unwrap())
        .collect();
    to.node.apply_from(&from.node.node_id(), verified).unwrap()
}

fn pair(a: &mut Peer, b: &mut Peer, policy: &str) {
    let (ida, idb): (NodeId, NodeId) = (a.node.node_id(), b.node.node_id());
    a.node.peer_add(&idb.to_string(), None, policy).unwrap();
    b.node.peer_add(&ida.to_string(), None, policy).unwrap();
}

fn org(p: &mut Peer) {
    p.node.team_create("apollo", None).unwrap();
    p.node.team_create("zeus", None).unwrap();
    p.node
        .agent_add("alice", "agent", &["apollo".into()])
        .unwrap();
    p.node
        .agent_add("bob", "agent", &["apollo".into()])
        .unwrap();
    p.node
        .agent_add("carol", "agent", &["zeus".into()])
        .unwrap();
}

/// Register the agents locally (agent records are per operator); their
/// memberships arrive with the org facts.
fn agents_only(p: &mut Peer) {
    for a in ["alice", "bob", "carol"] {
        p.node.agent_add(a, "agent", &[]).unwrap();
    }
}

fn add(p: &mut Peer, agent: &str, text: &str, share: &[&str]) -> String {
    let who = p.node.requester(agent).unwrap();
    let mut m = NewMemory::new(text);
    m.share = share.iter().map(|s| s.parse::<Scope>().unwrap()).collect();
    p.node.add(&who, m).unwrap().to_string()
}

fn sees(p: &mut Peer, agent: &str, query: &str) -> Vec<String> {
    let who = p.node.requester(agent).unwrap();
    p.node
        .search(&who, query, 50)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.content().to_owned())
        .collect()
}

#[test]
fn full_peers_converge_both_ways() {
    let mut a = peer("a");
    let mut b = peer("b");
    pair(&mut a, &mut b, "full");
    org(&mut a);
    add(&mut a, "alice", "alpha private note", &[]);
    add(&mut a, "alice", "alpha team note", &["team:apollo"]);
    send(&a, &mut b);
    add(&mut b, "bob", "beta note for bob only", &["agent:alice"]);
    send(&b, &mut a);
    assert_eq!(a.node.digest(&[]).unwrap(), b.node.digest(&[]).unwrap());
    // The same on both sides, including alice's private memory (full peers).
    let mut on_a = sees(&mut a, "alice", "note");
    let mut on_b = sees(&mut b, "alice", "note");
    on_a.sort();
    on_b.sort();
    assert_eq!(on_a, on_b);
    assert_eq!(on_a.len(), 3);
    // Sending again changes nothing.
    let again = send(&a, &mut b);
    assert_eq!(again.applied, 0);
    assert_eq!(a.node.digest(&[]).unwrap(), b.node.digest(&[]).unwrap());
}

#[test]
fn scoped_peer_gets_only_its_scope_and_learns_of_revocation() {
    let mut a = peer("a");
    let mut b = peer("b");
    pair(&mut a, &mut b, "team:apollo");
    org(&mut a);
    agents_only(&mut b);
    let team = add(&mut a, "alice", "gamma team runbook", &["team:apollo"]);
    add(&mut a, "alice", "gamma private", &[]);
    add(&mut a, "alice", "gamma for carol", &["agent:carol"]);
    add(&mut a, "alice", "gamma global", &["global"]);
    add(&mut a, "carol", "gamma zeus", &["team:zeus"]);
    send(&a, &mut b);
    assert_eq!(sees(&mut b, "bob", "gamma"), vec!["gamma team runbook"]);
    assert!(sees(&mut b, "carol", "gamma").is_empty());
    assert_eq!(
        a.node.digest(&["team:apollo".into()]).unwrap(),
        b.node.digest(&["team:apollo".into()]).unwrap()
    );

    // Revoke on a: b learns it on the next exchange, and purges the content.
    let who = a.node.requester("alice").unwrap();
    a.node.set_grant(&who, &team, "team:apollo", false).unwrap();
    send(&a, &mut b);
    assert!(sees(&mut b, "bob", "gamma").is_empty());
    assert!(
        sees(&mut b, "alice", "gamma").is_empty(),
        "owner rule does not hold for a scoped peer's memory"
    );
    assert_eq!(
        a.node.digest(&["team:apollo".into()]).unwrap(),
        b.node.digest(&["team:apollo".into()]).unwrap()
    );
}

#[test]
fn tombstone_reaches_peer_and_is_terminal() {
    let mut a = peer("a");
    let mut b = peer("b");
    pair(&mut a, &mut b, "full");
    org(&mut a);
    let id = add(&mut a, "alice", "delta to be forgotten", &["team:apollo"]);
    send(&a, &mut b);
    assert_eq!(sees(&mut b, "bob", "delta").len(), 1);
    // Keep the old content facts to replay later.
    let mut old = Vec::new();
    a.node
        .export(&PeerPolicy::Full, 0, 500, |f| {
            old.extend(f);
            Ok(())
        })
        .unwrap();
    let who = a.node.requester("alice").unwrap();
    a.node.forget(&who, &id).unwrap();
    send(&a, &mut b);
    assert!(sees(&mut b, "bob", "delta").is_empty());
    // Replay the pre-tombstone facts: nothing comes back.
    let replay = old
        .iter()
        .map(|b| SignedFact::decode_verified(b).unwrap())
        .collect();
    let r = b.node.apply_from(&a.node.node_id(), replay).unwrap();
    assert_eq!(r.applied, 0);
    assert!(sees(&mut b, "bob", "delta").is_empty());
    assert_eq!(a.node.digest(&[]).unwrap(), b.node.digest(&[]).unwrap());
}

#[test]
fn relay_through_a_middle_node_keeps_the_origin_signature() {
    let mut a = peer("a");
    let mut b = peer("b");
    let mut c = peer("c");
    pair(&mut a, &mut b, "team:apollo");
    pair(&mut b, &mut c, "team:apollo");
    org(&mut a);
    agents_only(&mut b);
    agents_only(&mut c);
    add(&mut a, "alice", "epsilon relayed", &["team:apollo"]);
    send(&a, &mut b);
    send(&b, &mut c);
    assert_eq!(sees(&mut c, "bob", "epsilon"), vec!["epsilon relayed"]);
    assert_eq!(
        a.node.digest(&["team:apollo".into()]).unwrap(),
        c.node.digest(&["team:apollo".into()]).unwrap()
    );
}

#[test]
fn unregistered_sender_is_refused() {
    let mut a = peer("a");
    let mut b = peer("b");
    org(&mut a);
    add(&mut a, "alice", "zeta", &["global"]);
    a.node
        .peer_add(&b.node.node_id().to_string(), None, "full")
        .unwrap();
    let mut facts = Vec::new();
    a.node
        .export(&PeerPolicy::Full, 0, 100, |f| {
            facts.extend(f);
            Ok(())
        })
        .unwrap();
    let v = facts
        .iter()
        .map(|x| SignedFact::decode_verified(x).unwrap())
        .collect();
    let err = b.node.apply_from(&a.node.node_id(), v).unwrap_err();
    assert_eq!(err.exit_code(), 3);
    assert_eq!(b.node.digest(&[]).unwrap().1, 0);
}

#[test]
fn facts_from_a_clock_far_ahead_are_quarantined_then_applied_later() {
    use amos_node::clock::FixedClock;
    use std::sync::Arc;
    const NOW: u64 = 1_800_000_000_000;
    const HOUR: u64 = 3_600_000;
    let dir = tempfile::tempdir().unwrap();
    let (ha, hb) = (
        Home::new(dir.path().join("a")),
        Home::new(dir.path().join("b")),
    );
    Node::init(&ha, Some("a")).unwrap();
    Node::init(&hb, Some("b")).unwrap();
    // b's clock runs an hour ahead of a's.
    let mut a = Node::open_with_clock(&ha, Arc::new(FixedClock(NOW))).unwrap();
    let mut b = Node::open_with_clock(&hb, Arc::new(FixedClock(NOW + HOUR))).unwrap();
    a.peer_add(&b.node_id().to_string(), None, "full").unwrap();
    b.peer_add(&a.node_id().to_string(), None, "full").unwrap();
    b.team_create("apollo", None).unwrap();
    b.agent_add("bob", "agent", &["apollo".into()]).unwrap();
    let who = b.requester("bob").unwrap();
    b.add(&who, NewMemory::new("theta from the future"))
        .unwrap();

    let mut facts = Vec::new();
    b.export(&PeerPolicy::Full, 0, 100, |f| {
        facts.extend(f);
        Ok(())
    })
    .unwrap();
    let n = facts.len() as u64;
    let v = facts
        .iter()
        .map(|x| SignedFact::decode_verified(x).unwrap())
        .collect();
    let r = a.apply_from(&b.node_id(), v).unwrap();
    assert_eq!((r.applied, r.deferred), (0, n), "{r:?}");
    let q = a.status().unwrap().quarantined;
    assert_eq!(q.len() as u64, n);
    assert!(q.iter().all(|d| d.peer == b.node_id().to_string()));
    assert!(q.iter().all(|d| d.ahead_ms == Some(HOUR)), "{q:?}");
    assert_eq!(a.digest(&[]).unwrap().1, 0, "nothing applied early");
    // Retrying while still behind changes nothing and loses nothing.
    assert_eq!(a.retry_deferred().unwrap().applied, 0);
    assert_eq!(a.quarantined().unwrap().len() as u64, n);
    drop(a);

    // An hour later (a's physical clock caught up): the retry applies them.
    let mut a = Node::open_with_clock(&ha, Arc::new(FixedClock(NOW + HOUR))).unwrap();
    let r = a.retry_deferred().unwrap();
    assert_eq!(r.applied, n, "{r:?}");
    assert!(a.quarantined().unwrap().is_empty());
    assert_eq!(a.digest(&[]).unwrap(), b.digest(&[]).unwrap());
}

/// `amos sync retry` retries the deferred facts of its home with no
/// network and says how many it took up, applied and still holds: facts
/// from a clock two hours ahead of the real one stay deferred (the
/// command runs on the system clock), and are counted both ways.
#[test]
fn sync_retry_says_what_it_retried_and_what_is_still_deferred() {
    use amos_node::clock::FixedClock;
    use std::sync::Arc;
    let a = crate::common::Home::new();
    assert_eq!(
        a.json(&["sync", "retry"]),
        serde_json::json!({"retried": 0, "applied": 0, "stale": 0, "refused": 0, "still_deferred": 0})
    );
    let dir = tempfile::tempdir().unwrap();
    let hb = Home::new(dir.path().join("b"));
    Node::init(&hb, Some("b")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut b = Node::open_with_clock(&hb, Arc::new(FixedClock(now + 2 * 3_600_000))).unwrap();
    let mut na = Node::open(&Home::new(a.path())).unwrap();
    na.peer_add(&b.node_id().to_string(), None, "full").unwrap();
    b.peer_add(&na.node_id().to_string(), None, "full").unwrap();
    b.agent_add("bob", "agent", &[]).unwrap();
    let who = b.requester("bob").unwrap();
    b.add(&who, NewMemory::new("from two hours ahead")).unwrap();
    let mut facts = Vec::new();
    b.export(&PeerPolicy::Full, 0, 100, |f| {
        facts.extend(f);
        Ok(())
    })
    .unwrap();
    let n = facts.len() as u64;
    let v = facts
        .iter()
        .map(|x| SignedFact::decode_verified(x).unwrap())
        .collect();
    assert_eq!(na.apply_from(&b.node_id(), v).unwrap().deferred, n);
    drop(na);
    let r = a.json(&["sync", "retry"]);
    assert_eq!(r["retried"], n, "{r}");
    assert_eq!(r["applied"], 0, "{r}");
    assert_eq!(r["still_deferred"], n, "{r}");
    let text = a.ok(&["sync", "retry"]).stdout;
    assert!(
        text.contains(&format!(
            "retried {n} deferred facts: 0 applied, {n} still deferred"
        )),
        "{text}"
    );
}
