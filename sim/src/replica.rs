//! One simulated node's replica: the in-memory twin (`MemStore`) with what
//! a real store keeps beside it for sync — a change log (`seq` per row,
//! bumped whenever any of the row's facts or its standing changes), the
//! log epoch, the watermarks it holds of its peers, when each peer's policy
//! last changed, what is held back for each peer that lacks a feature
//! (`amos_sync::session::HeldBack`, the peer's row on a node), and the
//! per-policy digest cache.
//!
//! Every fact goes in through the product's own paths: local writes
//! through `MemStore::write` (`Admission::local`), a peer's batch through
//! `amos_protocol::verify_all` and `amos_sync::apply_batch` (gate, skew
//! check, merge), and out through `MemStore::export_rows` (the export filter
//! of `amos_sync::export`, retractions included).
//!
//! Boundary: never decides what is admitted, merged or exported itself;
//! never touches the mesh, the clock or other replicas.

use std::collections::BTreeMap;

use amos_acl::PeerPolicy;
use amos_protocol::wire::{Epoch, Watermark};
use amos_protocol::{
    FactBody, Grants, Hlc, NodeId, NodeIdentity, Register, Scope, SignedFact, Verified,
};
use amos_sync::MemStore;
use amos_sync::session::HeldBack;
use amos_sync::{ApplyReport, Sender, apply_batch};

/// Facts whose clock is further ahead than this are deferred (as the node).
pub const MAX_SKEW_MS: u64 = 10 * 60 * 1000;

/// What a replica's row looks like to the change log: if any of it moves,
/// the row takes a fresh `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowState {
    clocks: [Option<Hlc>; 3],
    effective: Option<Grants>,
    grants_ever: Option<Grants>,
    flags: (bool, bool, Option<Hlc>),
    text_facts: usize,
}

/// The row a register belongs to: a memory's acl and tombstone are part of
/// its row (named by its content register); every other register is a row.
pub fn row_of(reg: &Register) -> Register {
    match reg {
        Register::MemoryAcl(id) | Register::MemoryTombstone(id) => Register::MemoryContent(*id),
        r => r.clone(),
    }
}

/// The order a store sends kinds in, so a receiver applying batch by batch
/// has org records before the memories shared with them and memories before
/// their links (`amos_sync::apply` orders within a batch the same way).
fn kind_order(body: &FactBody) -> u8 {
    match body {
        FactBody::Project(_) => 0,
        FactBody::Team(_) => 1,
        FactBody::Membership(_) => 2,
        FactBody::Agent(_) => 3,
        FactBody::Profile(_) => 4,
        FactBody::MemoryAcl(_) | FactBody::MemoryContent(_) | FactBody::MemoryTombstone(_) => 5,
        FactBody::Link(_) => 6,
    }
}

/// A node's replicated state and its sync bookkeeping.
#[derive(Debug, Clone)]
pub struct SimReplica {
    pub store: MemStore,
    pub epoch: Epoch,
    seq: i64,
    rows: BTreeMap<Register, i64>,
    pub watermarks: BTreeMap<NodeId, Watermark>,
    policy_seq: BTreeMap<NodeId, i64>,
    /// What is held back for each peer (docs/design.md §13).
    pub held_back: BTreeMap<NodeId, HeldBack>,
    /// Per policy and digest kind (`true`: the set digest).
    digest_cache: BTreeMap<(bool, String), (i64, [u8; 32], usize)>,
}

/// A verification failure: the batch is rejected whole and the session
/// aborts, as the node does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBatch(pub String);

impl SimReplica {
    pub fn new(me: NodeId, epoch: Epoch) -> SimReplica {
        SimReplica {
            store: MemStore::new(me),
            epoch,
            seq: 0,
            rows: BTreeMap::new(),
            watermarks: BTreeMap::new(),
            policy_seq: BTreeMap::new(),
            held_back: BTreeMap::new(),
            digest_cache: BTreeMap::new(),
        }
    }

    pub fn me(&self) -> NodeId {
        self.store.me
    }

    /// The highest `seq` of this log.
    pub fn seq(&self) -> i64 {
        self.seq
    }

    fn bump(&mut self, row: Register) {
        self.seq += 1;
        self.rows.insert(row, self.seq);
    }

    fn row_state(&self, row: &Register) -> RowState {
        let clock = |r: Register| self.store.facts.get(&r).map(|f| f.fact.clock);
        match row {
            Register::MemoryContent(id) => {
                let m = self.store.memories.get(id);
                RowState {
                    clocks: [
                        clock(Register::MemoryContent(*id)),
                        clock(Register::MemoryAcl(*id)),
                        clock(Register::MemoryTombstone(*id)),
                    ],
                    effective: m.map(|m| m.effective.clone()),
                    grants_ever: m.map(|m| m.grants_ever.clone()),
                    flags: m.map_or((false, false, None), |m| {
                        (m.owner_trusted, m.tombstoned, m.purged_v)
                    }),
                    text_facts: self
                        .store
                        .texts
                        .get(id)
                        .map_or(0, |(l, _)| l.facts().count()),
                }
            }
            r => RowState {
                clocks: [clock(r.clone()), None, None],
                effective: None,
                grants_ever: None,
                flags: (false, false, None),
                text_facts: 0,
            },
        }
    }

    /// Run `change` and give every row in `rows` that it moved a fresh `seq`.
    fn logged<T>(&mut self, rows: Vec<Register>, change: impl FnOnce(&mut Self) -> T) -> T {
        let mut rows = rows;
        rows.sort();
        rows.dedup();
        let before: Vec<RowState> = rows.iter().map(|r| self.row_state(r)).collect();
        let out = change(self);
        for (row, b) in rows.into_iter().zip(before) {
            if self.row_state(&row) != b {
                self.bump(row);
            }
        }
        out
    }

    /// Register a peer or change its policy: every memory it originated is
    /// re-judged (`MemStore::set_peer_policy`) and takes a fresh `seq` if it
    /// moved; a watermark that peer holds of us from before counts as 0.
    pub fn set_peer_policy(&mut self, node: NodeId, policy: PeerPolicy) {
        let rows: Vec<Register> = self
            .store
            .memories
            .iter()
            .filter(|(_, m)| m.fixed.origin == node)
            .map(|(id, _)| Register::MemoryContent(*id))
            .collect();
        self.logged(rows, |r| r.store.set_peer_policy(node, policy));
        self.seq += 1;
        self.policy_seq.insert(node, self.seq);
    }

    /// The `seq` that `node`'s policy last changed at (0: never since it
    /// was set): a watermark below it counts as 0.
    pub fn policy_changed_at(&self, node: &NodeId) -> i64 {
        self.policy_seq.get(node).copied().unwrap_or(0)
    }

    pub fn policy_of(&self, node: &NodeId) -> Option<&PeerPolicy> {
        self.store.peers.get(node)
    }

    /// A local write, signed by `identity` (this node's key).
    pub fn write(
        &mut self,
        identity: &NodeIdentity,
        body: FactBody,
        now_ms: u64,
    ) -> Verified<SignedFact> {
        let row = row_of(&body.register());
        self.logged(vec![row], |r| r.store.write(identity, body, now_ms))
    }

    /// Verify and apply a batch from `from` in one step, then retry the
    /// deferred facts (as `Node::apply_from` does). A batch that does not
    /// verify is rejected whole.
    pub fn apply(
        &mut self,
        from: NodeId,
        batch: &[Vec<u8>],
        now_ms: u64,
    ) -> Result<ApplyReport, BadBatch> {
        let facts = amos_protocol::verify_all(batch)
            .map_err(|e| BadBatch(format!("fact {}: {}", e.index, e.error)))?;
        let Some(policy) = self.store.peers.get(&from).cloned() else {
            return Err(BadBatch("not a registered peer".into()));
        };
        let sender = Sender { node: from, policy };
        let rows = facts
            .iter()
            .map(|f| row_of(&f.fact.body.register()))
            .collect();
        let mut report = self.logged(rows, |r| {
            let Ok(rep) = apply_batch(&mut r.store, &sender, facts, now_ms, MAX_SKEW_MS);
            rep
        });
        report.add(self.retry_deferred(now_ms));
        Ok(report)
    }

    /// Retry every deferred fact as from the peer that sent it.
    pub fn retry_deferred(&mut self, now_ms: u64) -> ApplyReport {
        let mut total = ApplyReport::default();
        let deferred = std::mem::take(&mut self.store.deferred);
        for (fact, from, _) in deferred {
            let Ok(fact) = fact.verify() else { continue };
            let Some(policy) = self.store.peers.get(&from).cloned() else {
                continue;
            };
            let sender = Sender { node: from, policy };
            let row = row_of(&fact.fact.body.register());
            let rep = self.logged(vec![row], |r| {
                let Ok(rep) = apply_batch(&mut r.store, &sender, vec![fact], now_ms, MAX_SKEW_MS);
                rep
            });
            total.add(rep);
        }
        total
    }

    /// What a session exports to `peer` after its watermark `since`
    /// (`peer_reset`: its log is new to us, so its own facts go too), as
    /// wire bytes in sending order, and the `seq` it covers. A watermark
    /// from before the peer's policy last changed counts as 0.
    pub fn export_for(&self, peer: &NodeId, since: i64, peer_reset: bool) -> (Vec<Vec<u8>>, i64) {
        let Some(policy) = self.store.peers.get(peer) else {
            return (Vec::new(), self.seq);
        };
        let since = if since < self.policy_seq.get(peer).copied().unwrap_or(0) {
            0
        } else {
            since
        };
        let seq_of = |reg: &Register| self.rows.get(&row_of(reg)).copied().unwrap_or(0);
        let mut facts = self.store.export_rows(policy, |row| seq_of(row) > since);
        if !peer_reset {
            facts.retain(|f| f.fact.author() != *peer);
        }
        facts.sort_by_key(|f| (kind_order(&f.fact.body), seq_of(&f.fact.body.register())));
        (facts.iter().map(|f| f.to_bytes()).collect(), self.seq)
    }

    /// What is held back for `peer` (nothing if it never lacked a feature).
    pub fn held_back_for(&self, peer: &NodeId) -> HeldBack {
        self.held_back.get(peer).copied().unwrap_or_default()
    }

    /// Our digest over what the policy we give `peer` admits, with its
    /// scopes (empty: `full`) — the set digest when `set` (a session of
    /// `amos_sync::digest::SET_DIGEST_SINCE` or later; a node keeps it
    /// running on write, here it is computed), else the sorted-hash one —
    /// cached per policy and kind while `seq` stands still.
    pub fn session_digest(&mut self, peer: &NodeId, set: bool) -> (Vec<Scope>, [u8; 32], u64) {
        let policy = self
            .store
            .peers
            .get(peer)
            .cloned()
            .unwrap_or(PeerPolicy::Scoped(Default::default()));
        let scopes: Vec<Scope> = policy.scopes().cloned().collect();
        let (d, n) = self.digest_over(&policy, set);
        (scopes, d, n as u64)
    }

    fn digest_over(&mut self, policy: &PeerPolicy, set: bool) -> ([u8; 32], usize) {
        let key = (set, policy.to_string());
        if let Some((at, d, n)) = self.digest_cache.get(&key)
            && *at == self.seq
        {
            return (*d, *n);
        }
        let (d, n) = if set {
            self.store.scoped_set_digest_bytes(policy)
        } else {
            self.store.scoped_digest_bytes(policy)
        };
        self.digest_cache.insert(key, (self.seq, d, n));
        (d, n)
    }

    /// Whether `peer`'s session digest over `scopes` (of the kind `set`
    /// says, as [`SimReplica::session_digest`]) matches ours; `None`: not
    /// compared, the scopes name one we do not give it
    /// (`amos_sync::digest::compared_over`, the node's rule).
    pub fn compare_digest(
        &mut self,
        peer: &NodeId,
        scopes: &[Scope],
        digest: &[u8; 32],
        set: bool,
    ) -> Option<bool> {
        let ours = self
            .store
            .peers
            .get(peer)
            .cloned()
            .unwrap_or(PeerPolicy::Scoped(Default::default()));
        let policy = amos_sync::digest::compared_over(&ours, scopes)?;
        Some(self.digest_over(&policy, set).0 == *digest)
    }

    /// Restore this replica from `backup` as `amos restore` does: the old
    /// state and watermarks come back under a new log epoch.
    pub fn restore(&mut self, backup: &SimReplica, new_epoch: Epoch) {
        *self = backup.clone();
        self.epoch = new_epoch;
        self.digest_cache.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amos_protocol::{AgentId, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryType};

    fn content(id: MemoryId, origin: NodeId, text: &str) -> FactBody {
        FactBody::MemoryContent(MemoryContent {
            id,
            fixed: MemoryFixed {
                owner: AgentId::parse("a0").unwrap(),
                created_ms: 1,
                origin,
            },
            kind: MemoryType::default(),
            text: MemoryText::Plain(text.into()),
            tags: vec![],
            importance: 0.5,
            confidence: 1.0,
            pinned: false,
            expires_ms: None,
            supersedes: None,
            validity: Default::default(),
        })
    }

    #[test]
    fn rows_take_a_seq_when_they_change_and_exports_follow_the_watermark() {
        let (ia, ib) = (
            NodeIdentity::from_secret([1; 32]),
            NodeIdentity::from_secret([2; 32]),
        );
        let mut a = SimReplica::new(ia.node_id(), [1; 16]);
        let mut b = SimReplica::new(ib.node_id(), [2; 16]);
        a.set_peer_policy(ib.node_id(), PeerPolicy::Full);
        b.set_peer_policy(ia.node_id(), PeerPolicy::Full);
        let m1 = MemoryId::new(1, [1; 10]);
        a.write(&ia, content(m1, ia.node_id(), "one"), 1_000);
        let (facts, high) = a.export_for(&ib.node_id(), 0, true);
        assert_eq!(facts.len(), 1);
        let r = b.apply(ia.node_id(), &facts, 1_000).unwrap();
        assert_eq!(r.applied, 1);
        // Nothing new after `high`; b's own export to a skips a's facts
        // (incremental) but sends them back when a's log is new.
        assert!(a.export_for(&ib.node_id(), high, false).0.is_empty());
        assert!(b.export_for(&ia.node_id(), 0, false).0.is_empty());
        assert_eq!(b.export_for(&ia.node_id(), 0, true).0.len(), 1);
        // A stale re-apply moves no row.
        let seq = b.seq();
        assert_eq!(b.apply(ia.node_id(), &facts, 1_000).unwrap().applied, 0);
        assert_eq!(b.seq(), seq);
        // Junk is rejected whole.
        assert!(b.apply(ia.node_id(), &[vec![1, 2, 3]], 1_000).is_err());
        // Digests agree once both hold the same.
        for set in [false, true] {
            let (scopes, d, n) = a.session_digest(&ib.node_id(), set);
            assert!(scopes.is_empty());
            assert_eq!(n, 1);
            assert_eq!(
                b.compare_digest(&ia.node_id(), &scopes, &d, set),
                Some(true)
            );
            assert_eq!(
                b.compare_digest(&ia.node_id(), &scopes, &d, !set),
                Some(false),
                "the two kinds are never equal"
            );
        }
    }
}
