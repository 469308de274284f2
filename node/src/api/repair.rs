//! The node API for range-based repair (docs/design.md §7.9): a peer's
//! repair set and the facts of it that a reconciliation asks for, whether
//! the next session with a peer repairs (and why), and recording that one
//! did.
//!
//! Must never: cover a fact the policy we give the peer keeps from it (the
//! set and the fetch both go through the export filter, in
//! `store::repair`); decide how to reconcile (`amos_sync::repair`) or when
//! in a session (`amos_sync::session`).

use crate::error::UnknownKind;
use amos_acl::PeerPolicy;
use amos_protocol::NodeId;
use amos_sync::repair::{ItemId, ItemSet};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::store::{peers, repair};

/// Periodic anti-entropy: a session with a peer repairs after this many
/// sessions without one (whatever else asked for one), so a loss no
/// watermark and no idle digest revealed still heals.
pub const REPAIR_EVERY: u64 = 20;

/// Why a session with a peer repairs (besides the epochs, which the session
/// itself sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairReason {
    /// The operator asked (`amos sync now --repair`).
    Asked,
    /// The digests with the peer disagree, and no repair ran since they
    /// began to (one repair per disagreement: if it could not help — one
    /// side refuses what the other offers — the next is the periodic one).
    DigestDisagreed,
    /// [`REPAIR_EVERY`] sessions since the last repair.
    Periodic,
}

/// How a session with a peer treats repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairPlan {
    /// Ask for one, for this reason.
    Ask(RepairReason),
    /// Repair only if the watermarks call for it or the peer opens one.
    AsNeeded,
    /// Neither open one nor skip the export (the last repair tried with
    /// this peer never completed).
    Forbid,
}

impl Node {
    fn policy_of(&self, peer: &NodeId) -> Result<PeerPolicy> {
        self.peer_policy(peer)?
            .ok_or_else(|| crate::api::peers::not_a_peer(peer))
    }

    /// The repair set for `peer`: the items of every fact the policy we give
    /// it lets it receive now (with retractions), read in one snapshot, and
    /// the highest `seq` it covers.
    pub fn repair_set(&mut self, peer: &NodeId) -> Result<(ItemSet, i64)> {
        let policy = self.policy_of(peer)?;
        self.store.read(|conn| repair::repair_set(conn, &policy))
    }

    /// Emit, in batches, the facts of `peer`'s repair set whose ids are in
    /// `ids` (others are ignored: a peer gets nothing its policy keeps from
    /// it, whatever it asks for); returns how many.
    pub fn repair_facts(
        &mut self,
        peer: &NodeId,
        ids: &[ItemId],
        batch: usize,
        emit: impl FnMut(Vec<Vec<u8>>) -> Result<()>,
    ) -> Result<u64> {
        let policy = self.policy_of(peer)?;
        self.store
            .read(|conn| repair::repair_facts(conn, &policy, ids, batch, emit))
    }

    /// How the next session with `peer` treats repair: `Forbid` after a
    /// repair that never completed (the peer may be older than repair: this
    /// one runs as an older node would, and the one after may repair
    /// again), else whether to ask for one and why.
    pub fn repair_plan(&mut self, peer: &NodeId) -> Result<RepairPlan> {
        let tried = self
            .store
            .read(|r| peers::repair_state(r, peer))?
            .is_some_and(|s| s.tried_unfinished);
        if tried {
            self.store.write(|tx| peers::clear_repair_tried(tx, peer))?;
            return Ok(RepairPlan::Forbid);
        }
        Ok(match self.repair_wanted(peer)? {
            Some(why) => RepairPlan::Ask(why),
            None => RepairPlan::AsNeeded,
        })
    }

    /// A session with `peer` begins a repair: it answers what asked for
    /// one, and counts as unfinished until [`Node::peer_record_repair`].
    pub fn peer_repair_tried(&mut self, peer: &NodeId) -> Result<()> {
        let now = self.now_ms();
        self.store
            .write(|tx| peers::record_repair_tried(tx, peer, now))
    }

    /// Whether the next session with `peer` should ask for a repair.
    pub fn repair_wanted(&self, peer: &NodeId) -> Result<Option<RepairReason>> {
        let Some(s) = self.store.read(|r| peers::repair_state(r, peer))? else {
            return Ok(None);
        };
        Ok(if s.asked {
            Some(RepairReason::Asked)
        } else if s
            .disagreed_ms
            .is_some_and(|d| s.last_ms.is_none_or(|r| d > r))
        {
            Some(RepairReason::DigestDisagreed)
        } else if s.sessions_since + 1 >= REPAIR_EVERY {
            Some(RepairReason::Periodic)
        } else {
            None
        })
    }

    /// The repair columns of `peer`'s row.
    pub fn repair_state(&self, peer: &NodeId) -> Result<Option<peers::RepairState>> {
        self.store.read(|r| peers::repair_state(r, peer))
    }

    /// Ask for a repair in the next session with `peer`.
    pub fn ask_repair(&mut self, peer: &NodeId) -> Result<()> {
        if !self.store.write(|tx| peers::ask_repair(tx, peer))? {
            return Err(NodeError::unknown(UnknownKind::Peer, peer.short()));
        }
        Ok(())
    }

    /// Ask for a repair in the next session with the peers `amos sync now
    /// [PEER]` would dial (`only`: NodeId, unique prefix or name; `None`:
    /// every peer with an address); returns how many.
    pub fn ask_repair_of(&mut self, only: Option<&str>) -> Result<usize> {
        let peers = self.peer_list()?;
        let chosen: Vec<&crate::store::replica::PeerInfo> = match only {
            Some(want) => crate::store::replica::peers_named(&peers, want),
            None => peers.iter().filter(|p| p.dialable()).collect(),
        };
        if only.is_some() && chosen.len() != 1 {
            // The sync pass names the problem (unknown or ambiguous).
            return Ok(0);
        }
        for p in &chosen {
            let id: NodeId = p
                .node_id
                .parse()
                .map_err(|e| NodeError::Corrupt(format!("stored peer id: {e}")))?;
            self.ask_repair(&id)?;
        }
        Ok(chosen.len())
    }

    /// A session with `peer` completed; `repaired`: it ran a repair.
    pub fn peer_record_repair(&mut self, peer: &NodeId, repaired: bool) -> Result<()> {
        let now = self.now_ms();
        self.store
            .write(|tx| peers::record_repair(tx, peer, repaired, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::memories::NewMemory;
    use crate::home::Home;
    use amos_protocol::{Scope, TeamId};
    use amos_sync::repair::{self as rp, Initiator, Step};
    use std::collections::BTreeSet;

    /// A fresh node's home and the id of another fresh node, its peer to
    /// be; the temp dir holds both homes.
    fn home_and_peer() -> (tempfile::TempDir, Home, NodeId) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("a"));
        Node::init(&home, Some("a")).unwrap();
        let peer_home = Home::new(dir.path().join("b"));
        Node::init(&peer_home, Some("b")).unwrap();
        let peer = Node::open(&peer_home).unwrap().node_id();
        (dir, home, peer)
    }

    /// A node with a private memory, one shared with `apollo`, one with
    /// `zeus`, and a peer given `team:apollo`: the repair set for that
    /// peer is exactly what an export to it from `seq` 0 sends; no gated
    /// fact is an item, no round of a reconciliation over it mentions one,
    /// and asking for one by id gets nothing.
    #[test]
    fn a_scoped_peer_repair_covers_only_what_it_may_receive() {
        let (_dir, home, peer) = home_and_peer();
        let mut a = Node::open(&home).unwrap();
        a.team_create("apollo", None).unwrap();
        a.team_create("zeus", None).unwrap();
        a.agent_add("alice", "agent", &["apollo".into()]).unwrap();
        a.agent_add("zed", "agent", &["zeus".into()]).unwrap();
        let team = |t: &str| Scope::Team(TeamId::parse(t).unwrap());
        let alice = a.requester("alice").unwrap();
        let zed = a.requester("zed").unwrap();
        for (who, text, share) in [
            (
                &alice,
                "apollo launch window moved to friday",
                vec![team("apollo")],
            ),
            (&alice, "alice keeps this to herself", vec![]),
            (&zed, "zeus budget is secret to zeus", vec![team("zeus")]),
        ] {
            a.add(
                who,
                NewMemory {
                    share,
                    ..NewMemory::new(text)
                },
            )
            .unwrap();
        }
        a.peer_add(&peer.to_string(), None, "team:apollo").unwrap();
        let policy = a.peer_policy(&peer).unwrap().unwrap();

        let ids_of = |a: &mut Node, policy: &PeerPolicy| {
            let mut ids = BTreeSet::new();
            a.export_snapshot(policy, 64, |facts| {
                ids.extend(facts.iter().map(|f| rp::fact_id(f)));
                Ok(())
            })
            .unwrap();
            ids
        };
        let exportable = ids_of(&mut a, &policy);
        let everything = ids_of(&mut a, &PeerPolicy::Full);
        let gated: Vec<ItemId> = everything.difference(&exportable).copied().collect();
        // The private memory, zeus's memory, zeus's record, the agents.
        assert!(gated.len() >= 4, "{} gated", gated.len());
        assert!(!exportable.is_empty());

        let (set, _) = a.repair_set(&peer).unwrap();
        let items: BTreeSet<ItemId> = set.items().iter().map(|i| i.id).collect();
        assert_eq!(items, exportable, "the repair set is the export filter's");
        for g in &gated {
            assert!(!set.contains(g));
        }

        // A reconciliation against a peer holding nothing, and one holding
        // half: no round either way mentions a gated id.
        let half = rp::ItemSet::new(set.items().iter().copied().step_by(2));
        for theirs in [rp::ItemSet::default(), half] {
            let (mut ini, mut round) = Initiator::open(set.clone()).unwrap();
            let mut rounds = vec![round.clone()];
            let outcome = loop {
                let reply = rp::respond(&theirs, &round).unwrap();
                rounds.push(reply.clone());
                match ini.step(&reply).unwrap() {
                    Step::Next(next) => {
                        rounds.push(next.clone());
                        round = next;
                    }
                    Step::Done(o) => break o,
                }
            };
            for r in &rounds {
                for g in &gated {
                    assert!(!r.windows(32).any(|w| w == g), "a round names a gated fact");
                }
            }
            assert!(outcome.send.iter().all(|id| exportable.contains(id)));
            assert!(!outcome.send.is_empty());
        }

        // Asked by id, only what the filter lets out is sent.
        let mut sent = Vec::new();
        let ask: Vec<ItemId> = gated
            .iter()
            .chain(exportable.iter().take(1))
            .copied()
            .collect();
        let n = a
            .repair_facts(&peer, &ask, 64, |facts| {
                sent.extend(facts);
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(rp::fact_id(&sent[0]), *exportable.iter().next().unwrap());
    }

    #[test]
    fn a_repair_is_wanted_when_asked_after_a_disagreement_and_periodically() {
        let (_dir, home, peer) = home_and_peer();
        let at = |ms: u64| {
            Node::open_with_clock(&home, std::sync::Arc::new(crate::clock::FixedClock(ms))).unwrap()
        };
        let mut a = at(1_000);
        a.peer_add(&peer.to_string(), Some("127.0.0.1:9"), "full")
            .unwrap();
        assert_eq!(a.repair_wanted(&peer).unwrap(), None);
        assert_eq!(a.ask_repair_of(Some(&peer.to_string()[..12])).unwrap(), 1);
        assert_eq!(a.repair_wanted(&peer).unwrap(), Some(RepairReason::Asked));
        a.peer_record_repair(&peer, true).unwrap();
        assert_eq!(a.repair_wanted(&peer).unwrap(), None, "done: cleared");
        for _ in 0..REPAIR_EVERY - 2 {
            a.peer_record_repair(&peer, false).unwrap();
        }
        assert_eq!(a.repair_wanted(&peer).unwrap(), None);
        a.peer_record_repair(&peer, false).unwrap();
        assert_eq!(
            a.repair_wanted(&peer).unwrap(),
            Some(RepairReason::Periodic),
            "the {REPAIR_EVERY}th session repairs"
        );
        a.peer_record_repair(&peer, true).unwrap();
        // A disagreeing digest after the last repair asks for one.
        let mut a = at(2_000);
        a.peer_compare_digest(&peer, &[], &[7; 32], 1).unwrap();
        assert_eq!(
            a.repair_wanted(&peer).unwrap(),
            Some(RepairReason::DigestDisagreed)
        );
        let mut a = at(3_000);
        a.peer_record_repair(&peer, true).unwrap();
        assert_eq!(a.repair_wanted(&peer).unwrap(), None, "repaired since");
        // Still disagreeing after the repair (it could not help): no repair
        // per session, until the digests agree and disagree again.
        let mut a = at(4_000);
        a.peer_compare_digest(&peer, &[], &[7; 32], 1).unwrap();
        assert_eq!(a.repair_wanted(&peer).unwrap(), None, "same disagreement");
        let mine = a.session_digest(&peer).unwrap().1;
        a.peer_compare_digest(&peer, &[], &mine, 0).unwrap();
        let mut a = at(5_000);
        a.peer_compare_digest(&peer, &[], &[7; 32], 1).unwrap();
        assert_eq!(
            a.repair_wanted(&peer).unwrap(),
            Some(RepairReason::DigestDisagreed),
            "a new disagreement"
        );
        a.peer_record_repair(&peer, true).unwrap();
        assert_eq!(a.repair_wanted(&peer).unwrap(), None, "repaired since");
        // A repair tried that never completed: the next session forbids
        // one (the peer may be older), the one after plans as usual.
        a.ask_repair(&peer).unwrap();
        assert_eq!(
            a.repair_plan(&peer).unwrap(),
            RepairPlan::Ask(RepairReason::Asked)
        );
        a.peer_repair_tried(&peer).unwrap();
        assert_eq!(a.repair_wanted(&peer).unwrap(), None, "the ask is answered");
        assert_eq!(a.repair_plan(&peer).unwrap(), RepairPlan::Forbid);
        assert_eq!(a.repair_plan(&peer).unwrap(), RepairPlan::AsNeeded);
        a.peer_repair_tried(&peer).unwrap();
        a.peer_record_repair(&peer, true).unwrap();
        assert_eq!(
            a.repair_plan(&peer).unwrap(),
            RepairPlan::AsNeeded,
            "it completed"
        );
    }

    /// A peer given `team:apollo` that names `team:apollo,team:zeus` (or
    /// `full`) as the scopes of its digest learns nothing of zeus: whether
    /// we hold nothing of zeus or its team, member and a memory, its digest
    /// is not compared and no
    /// repair is wanted; named within our policy, it is compared as ever.
    #[test]
    fn a_peer_digest_over_scopes_we_never_gave_it_tells_it_nothing() {
        let team = |t: &str| Scope::Team(TeamId::parse(t).unwrap());
        let mut seen = Vec::new();
        for holds_zeus in [false, true] {
            let (_dir, home, peer) = home_and_peer();
            let mut a = Node::open(&home).unwrap();
            a.team_create("apollo", None).unwrap();
            a.agent_add("alice", "agent", &["apollo".into()]).unwrap();
            let alice = a.requester("alice").unwrap();
            let note = |text: &str, share| NewMemory {
                share,
                ..NewMemory::new(text)
            };
            a.add(
                &alice,
                note("apollo launch is friday", vec![team("apollo")]),
            )
            .unwrap();
            if holds_zeus {
                a.team_create("zeus", None).unwrap();
                a.agent_add("zed", "agent", &["zeus".into()]).unwrap();
                let zed = a.requester("zed").unwrap();
                a.add(&zed, note("zeus budget", vec![team("zeus")]))
                    .unwrap();
            }
            a.peer_add(&peer.to_string(), Some("127.0.0.1:9"), "team:apollo")
                .unwrap();
            // What the peer holds after a sync: exactly what we let it have.
            let (_, theirs, n) = a.session_digest(&peer).unwrap();
            // The scopes as this node holds them (apollo qualified by it).
            let team = |a: &Node, t: &str| a.resolve_scope(&format!("team:{t}")).unwrap();
            let (apollo, zeus) = (team(&a, "apollo"), team(&a, "zeus"));
            let mut outcome = Vec::new();
            for claimed in [vec![apollo.clone(), zeus], vec![]] {
                let compared = a.peer_compare_digest(&peer, &claimed, &theirs, n).unwrap();
                let row = a.peer_list().unwrap()[0].digest.clone();
                outcome.push((compared, row, a.repair_wanted(&peer).unwrap()));
            }
            seen.push(outcome);
            // Within our policy the comparison runs and agrees.
            assert_eq!(
                a.peer_compare_digest(&peer, &[apollo], &theirs, n).unwrap(),
                Some(true)
            );
        }
        assert_eq!(seen[0], seen[1], "the peer's view does not depend on zeus");
        for (compared, row, wanted) in &seen[1] {
            assert_eq!(*compared, None, "not compared");
            assert_eq!(*row, None, "no comparison recorded");
            assert_eq!(*wanted, None, "no repair");
        }
    }
}
