//! One replica contract for the property tests and the escalation matrix:
//! [`TestReplica`] is every operation those tests perform on a replica,
//! implemented over the in-memory twin ([`Mem`], `amos_sync::memstore`) and
//! over the real store ([`Sql`]: `amos_node::store::Store` on a SQLite file
//! in a temporary directory, written through `amos_node::store::inspect::SqlReplica`
//! inside `Store::write`, exactly as the node applies a batch).
//!
//! Each primitive lives in ONE function here (local write, apply, export,
//! digest, visibility, search, text edit, peer policy, archive), so a change
//! of the store's write API is adapted in one place.
//!
//! Boundary: this module only drives the stores through their public APIs;
//! it decides nothing about what should win, be refused or be visible (the
//! tests and their models do). It never changes replicated state behind the
//! store's back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use amos_acl::{AuthorizedScopes, PeerPolicy};
use amos_node::store::inspect::{self, ExportSpec, SqlReplica};
use amos_node::store::{Store, StoredOrg, Tx, split_grants};
use amos_protocol::{
    AgentId, Fact, FactBody, Grants, Hlc, HlcState, MemoryFixed, MemoryId, MemoryText, NodeId,
    NodeIdentity, Register, SignedFact, Verified,
};
use amos_sync::MemStore;
use amos_sync::{Admission, ApplyReport, DeferReason, Sender, apply_batch};

/// What a replica holds of one memory (its row or its twin's entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemInfo {
    pub fixed: MemoryFixed,
    /// The grants in force on this replica.
    pub effective: Grants,
    /// Whether the owner rule holds here.
    pub owner_trusted: bool,
    pub tombstoned: bool,
    /// Whether the content itself is held.
    pub content_held: bool,
    /// The content register's clock, kept after a purge.
    pub content_v: Option<Hlc>,
}

impl MemInfo {
    /// Content erased by a revocation (its clock kept, the content gone).
    pub fn purged(&self) -> bool {
        !self.tombstoned && !self.content_held && self.content_v.is_some()
    }
}

/// A refused fact as the audit log keeps it: the fact, the peer it came
/// from and the refusal's text (`Refusal`'s `Display`, which the SQL audit
/// log stores).
pub type Refused = (SignedFact, NodeId, String);

/// A deferred fact: the fact, the peer, and how far ahead its clock was
/// (`None`: a link waiting for an endpoint).
pub type Deferred = (SignedFact, NodeId, Option<u64>);

/// Every operation the replica tests perform.
pub trait TestReplica: Sized {
    /// `"mem"` or `"sql"`, for messages.
    const KIND: &'static str;

    /// A fresh, empty replica for `identity` with no peers.
    fn create(identity: &NodeIdentity) -> Self;

    fn node(&self) -> NodeId;

    /// A local write: `body` signed by this node at a fresh clock ticked
    /// from `now_ms`, stored as the node stores its own writes.
    fn write(
        &mut self,
        identity: &NodeIdentity,
        body: FactBody,
        now_ms: u64,
    ) -> Verified<SignedFact>;

    /// Edit memory `mem`'s text as `amos update` does (an automerge change in
    /// a signed content fact). `None` if the content is not held or the text
    /// is unchanged.
    fn edit_text(
        &mut self,
        identity: &NodeIdentity,
        mem: &MemoryId,
        new_text: &str,
        now_ms: u64,
    ) -> Option<Verified<SignedFact>>;

    /// Apply a batch from `sender` (with the policy we gave it) in one
    /// transaction, through the gate and the merge rule.
    fn apply(
        &mut self,
        sender: &Sender,
        facts: Vec<Verified<SignedFact>>,
        now_ms: u64,
        max_skew_ms: u64,
    ) -> ApplyReport;

    /// Everything that may go to a peer with `policy`, retractions included.
    fn export(&mut self, policy: &PeerPolicy) -> Vec<Verified<SignedFact>>;

    /// The convergence digest over every held fact.
    fn digest(&mut self) -> String;

    /// The digest over the facts `policy` admits now (no retractions).
    fn scoped_digest(&mut self, policy: &PeerPolicy) -> String;

    /// Ids of the live memories `agent` may see here.
    fn visible_to(&mut self, agent: &AgentId) -> BTreeSet<MemoryId>;

    /// What a listing for `agent` returns, restricted to texts containing
    /// `term`: visible, live and not archived here.
    fn search(&mut self, agent: &AgentId, term: &str) -> BTreeSet<MemoryId>;

    /// The text readers see, if the content is held (and not forgotten).
    fn text(&mut self, id: &MemoryId) -> Option<String>;

    fn memory(&mut self, id: &MemoryId) -> Option<MemInfo>;

    /// Every memory this replica has a row (entry) for.
    fn memory_ids(&mut self) -> Vec<MemoryId>;

    /// The fact held for a register (the register's winner).
    fn fact(&mut self, register: &Register) -> Option<Verified<SignedFact>>;

    /// Every held register with its clock (purged content not included).
    fn registers(&mut self) -> BTreeMap<Register, Hlc>;

    fn peer_policy(&mut self, node: &NodeId) -> Option<PeerPolicy>;

    /// Register a peer, or change the policy of a registered one.
    fn set_peer_policy(&mut self, node: &NodeId, policy: &PeerPolicy);

    /// Retention: archive (or restore) a memory. Local-only state.
    fn set_archived(&mut self, id: &MemoryId, archived: bool);

    /// The audit log, oldest first.
    fn refused(&mut self) -> Vec<Refused>;

    fn deferred(&mut self) -> Vec<Deferred>;

    /// Take every deferred fact out, for a retry.
    fn take_deferred(&mut self) -> Vec<(SignedFact, NodeId)>;

    /// The persisted clock state.
    fn clock(&mut self) -> HlcState;
}

// ------------------------------------------------------------------ MemStore

/// The in-memory twin, with the local-only archive flags beside it (the
/// twin has no retention: archiving touches no replicated state).
#[derive(Debug)]
pub struct Mem {
    pub store: MemStore,
    pub archived: BTreeSet<MemoryId>,
}

impl TestReplica for Mem {
    const KIND: &'static str = "mem";

    fn create(identity: &NodeIdentity) -> Self {
        Mem {
            store: MemStore::new(identity.node_id()),
            archived: BTreeSet::new(),
        }
    }

    fn node(&self) -> NodeId {
        self.store.me
    }

    fn write(
        &mut self,
        identity: &NodeIdentity,
        body: FactBody,
        now_ms: u64,
    ) -> Verified<SignedFact> {
        self.store.write(identity, body, now_ms)
    }

    fn edit_text(
        &mut self,
        identity: &NodeIdentity,
        mem: &MemoryId,
        new_text: &str,
        now_ms: u64,
    ) -> Option<Verified<SignedFact>> {
        self.store.edit_text(identity, mem, new_text, now_ms)
    }

    fn apply(
        &mut self,
        sender: &Sender,
        facts: Vec<Verified<SignedFact>>,
        now_ms: u64,
        max_skew_ms: u64,
    ) -> ApplyReport {
        let Ok(r) = apply_batch(&mut self.store, sender, facts, now_ms, max_skew_ms);
        r
    }

    fn export(&mut self, policy: &PeerPolicy) -> Vec<Verified<SignedFact>> {
        self.store.export(policy)
    }

    fn digest(&mut self) -> String {
        self.store.digest()
    }

    fn scoped_digest(&mut self, policy: &PeerPolicy) -> String {
        self.store.scoped_digest(policy)
    }

    fn visible_to(&mut self, agent: &AgentId) -> BTreeSet<MemoryId> {
        self.store.visible_to(agent)
    }

    fn search(&mut self, agent: &AgentId, term: &str) -> BTreeSet<MemoryId> {
        let visible = self.store.visible_to(agent);
        visible
            .into_iter()
            .filter(|id| !self.archived.contains(id))
            .filter(|id| self.store.text(id).is_some_and(|t| t.contains(term)))
            .collect()
    }

    fn text(&mut self, id: &MemoryId) -> Option<String> {
        self.store.text(id)
    }

    fn memory(&mut self, id: &MemoryId) -> Option<MemInfo> {
        let m = self.store.memories.get(id)?;
        let content = self.store.facts.get(&Register::MemoryContent(*id));
        Some(MemInfo {
            fixed: m.fixed.clone(),
            effective: m.effective.clone(),
            owner_trusted: m.owner_trusted,
            tombstoned: m.tombstoned,
            content_held: content.is_some(),
            content_v: content.map(|f| f.fact.clock).or(m.purged_v),
        })
    }

    fn memory_ids(&mut self) -> Vec<MemoryId> {
        self.store.memories.keys().copied().collect()
    }

    fn fact(&mut self, register: &Register) -> Option<Verified<SignedFact>> {
        self.store.facts.get(register).cloned()
    }

    fn registers(&mut self) -> BTreeMap<Register, Hlc> {
        self.store
            .facts
            .iter()
            .map(|(r, f)| (r.clone(), f.fact.clock))
            .collect()
    }

    fn peer_policy(&mut self, node: &NodeId) -> Option<PeerPolicy> {
        self.store.peers.get(node).cloned()
    }

    fn set_peer_policy(&mut self, node: &NodeId, policy: &PeerPolicy) {
        self.store.set_peer_policy(*node, policy.clone());
    }

    fn set_archived(&mut self, id: &MemoryId, archived: bool) {
        if archived && self.store.memories.contains_key(id) {
            self.archived.insert(*id);
        } else {
            self.archived.remove(id);
        }
    }

    fn refused(&mut self) -> Vec<Refused> {
        self.store
            .refused
            .iter()
            .map(|(f, from, why)| (f.clone(), *from, why.code().to_owned()))
            .collect()
    }

    fn deferred(&mut self) -> Vec<Deferred> {
        self.store
            .deferred
            .iter()
            .map(|(f, from, why)| {
                let ahead = match why {
                    DeferReason::ClockSkew { ahead_ms } => Some(*ahead_ms),
                    DeferReason::MissingEndpoint | DeferReason::MissingScope => None,
                };
                (f.clone(), *from, ahead)
            })
            .collect()
    }

    fn take_deferred(&mut self) -> Vec<(SignedFact, NodeId)> {
        std::mem::take(&mut self.store.deferred)
            .into_iter()
            .map(|(f, from, _)| (f, from))
            .collect()
    }

    fn clock(&mut self) -> HlcState {
        self.store.hlc
    }
}

// ------------------------------------------------------------------ SQLite

/// The real store: one SQLite file in its own temporary directory.
pub struct Sql {
    pub store: Store,
    me: NodeId,
    /// Keeps the directory alive as long as the store.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Sql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sql({})", self.me.short())
    }
}

/// A log epoch no other store of this process has: warm text documents are
/// kept per process, keyed by epoch and memory, and the tests make many
/// stores holding the same memory ids.
fn fresh_epoch() -> [u8; 16] {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut e = [0u8; 16];
    e[..8].copy_from_slice(&n.to_be_bytes());
    e[8..12].copy_from_slice(&std::process::id().to_be_bytes());
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    e[12..].copy_from_slice(&t.to_be_bytes());
    e
}

/// A local write on the real store: tick the persisted clock, sign, and
/// store the fact as the node's own (`Node::commit` does the same).
pub fn sql_local_write(
    store: &mut Store,
    identity: &NodeIdentity,
    body: FactBody,
    now_ms: u64,
) -> Verified<SignedFact> {
    let me = identity.node_id();
    store
        .write(|tx| {
            let clock = tx.tick(now_ms, me)?;
            let fact = identity.sign(Fact { clock, body })?;
            let admission = Admission::local(identity, fact.clone()).expect("signed here");
            tx.put(&admission)?;
            Ok(fact)
        })
        .expect("sql local write")
}

/// Register `node` as a peer with `policy` (`amos peers add`).
pub fn sql_add_peer(tx: &mut Tx<'_>, node: &NodeId, policy: &PeerPolicy) -> amos_node::Result<()> {
    inspect::upsert(tx, node, None, None, policy, 0)
}

/// Change a registered peer's policy, as `amos peers policy` does at the
/// store level (`Node::peer_set_policy`): the policy, and a fresh `seq` as
/// the peer's `policy_seq` with its watermark reset.
pub fn sql_set_peer_policy(
    tx: &mut Tx<'_>,
    me: NodeId,
    node: &NodeId,
    policy: &PeerPolicy,
) -> amos_node::Result<()> {
    if !inspect::set_policy(tx, node, policy)? {
        return Err(amos_node::NodeError::BadInput(format!(
            "unknown peer {}",
            node.short()
        )));
    }
    // Re-judge the memories it originated, as `amos peers policy` does.
    inspect::restand_origin(tx, me, node, policy)?;
    let seq = tx.next_seq()?;
    inspect::reset_watermark(tx, node, seq)
}

/// Facts refused or held aside as stored, decoded, with sender and why.
fn aside<W>(rows: Vec<inspect::AsideRow<W>>) -> Vec<(SignedFact, NodeId, W)> {
    rows.into_iter()
        .map(|r| {
            let fact = amos_protocol::codec::decode_signed(&r.fact).expect("a stored fact");
            (fact, r.peer, r.why)
        })
        .collect()
}

fn decode(bytes: &[u8]) -> Verified<SignedFact> {
    SignedFact::decode_verified(bytes).expect("a stored fact verifies")
}

fn hlc(bytes: &[u8]) -> Hlc {
    Hlc::from_sort_key(bytes).expect("a stored clock decodes")
}

impl Sql {
    /// Ids of rows that can be shown at all (content held, not tombstoned).
    fn live_ids(&self) -> Vec<MemoryId> {
        self.store.read(|r| inspect::live_ids(r)).expect("live ids")
    }

    fn who(&self, agent: &AgentId) -> AuthorizedScopes {
        self.store
            .read(|r| Ok(AuthorizedScopes::for_agent(agent.clone(), &StoredOrg(r))))
            .expect("a requester")
    }
}

impl TestReplica for Sql {
    const KIND: &'static str = "sql";

    fn create(identity: &NodeIdentity) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::create(&dir.path().join("amos.db"), fresh_epoch()).expect("store");
        Sql {
            store,
            me: identity.node_id(),
            _dir: dir,
        }
    }

    fn node(&self) -> NodeId {
        self.me
    }

    fn write(
        &mut self,
        identity: &NodeIdentity,
        body: FactBody,
        now_ms: u64,
    ) -> Verified<SignedFact> {
        sql_local_write(&mut self.store, identity, body, now_ms)
    }

    fn edit_text(
        &mut self,
        identity: &NodeIdentity,
        mem: &MemoryId,
        new_text: &str,
        now_ms: u64,
    ) -> Option<Verified<SignedFact>> {
        // As `Node::update_with` (node/src/api/edits.rs), without its gate and
        // its compaction.
        let me = self.me;
        let current = self.fact(&Register::MemoryContent(*mem))?;
        let FactBody::MemoryContent(mut body) = current.fact.body.clone() else {
            return None;
        };
        self.store
            .write(|tx| {
                let clock = tx.tick(now_ms, me)?;
                let mut state = tx.text_state(mem)?;
                let epoch = tx.epoch()?;
                let r = state.doc.edit_as(new_text, &me, epoch.as_bytes(), &clock);
                let Some(change) = r
                    // As the twin: a text that cannot be edited here yet (its
                    // base has not arrived) makes no edit.
                    .ok()
                    .flatten()
                else {
                    return Ok(None);
                };
                body.text = MemoryText::Edit(change);
                let edit = identity.sign(Fact {
                    clock,
                    body: FactBody::MemoryContent(body),
                })?;
                let admission = Admission::local(identity, edit.clone()).expect("signed here");
                tx.put_local_edit(&admission, state)?;
                Ok(Some(edit))
            })
            .expect("sql edit")
    }

    fn apply(
        &mut self,
        sender: &Sender,
        facts: Vec<Verified<SignedFact>>,
        now_ms: u64,
        max_skew_ms: u64,
    ) -> ApplyReport {
        let me = self.me;
        self.store
            .write(|tx| {
                let mut r = SqlReplica::new(tx, me, now_ms);
                let report = apply_batch(&mut r, sender, facts, now_ms, max_skew_ms)?;
                r.finish()?;
                Ok(report)
            })
            .expect("sql apply")
    }

    fn export(&mut self, policy: &PeerPolicy) -> Vec<Verified<SignedFact>> {
        let mut out = Vec::new();
        self.store
            .read(|r| {
                inspect::export_facts(
                    r,
                    &ExportSpec {
                        policy,
                        since: 0,
                        retractions: true,
                        skip_author: None,
                        echo: None,
                        until: None,
                    },
                    4096,
                    |batch| {
                        out.extend(batch.iter().map(|b| decode(b)));
                        Ok(())
                    },
                )
            })
            .expect("sql export");
        out
    }

    fn digest(&mut self) -> String {
        inspect::digest(&self.store, &PeerPolicy::Full)
            .expect("digest")
            .0
    }

    fn scoped_digest(&mut self, policy: &PeerPolicy) -> String {
        inspect::digest(&self.store, policy).expect("digest").0
    }

    fn visible_to(&mut self, agent: &AgentId) -> BTreeSet<MemoryId> {
        let who = self.who(agent);
        let ids = self.live_ids();
        self.store
            .visible(&who, &ids, 0)
            .expect("visible")
            .iter()
            .map(|m| m.id())
            .collect()
    }

    fn search(&mut self, agent: &AgentId, term: &str) -> BTreeSet<MemoryId> {
        // The gated listing `Node::list` reads (archived rows left out).
        let who = self.who(agent);
        self.store
            .visible_newest(&who, None, 100_000, 0)
            .expect("visible newest")
            .iter()
            .filter(|m| m.content().contains(term))
            .map(|m| m.id())
            .collect()
    }

    fn text(&mut self, id: &MemoryId) -> Option<String> {
        let row = self
            .store
            .read(|r| inspect::memory_row(r, id))
            .expect("text")?;
        if row.tombstoned { None } else { row.content }
    }

    fn memory(&mut self, id: &MemoryId) -> Option<MemInfo> {
        let row = self
            .store
            .read(|r| inspect::memory_row(r, id))
            .expect("memory row")?;
        Some(MemInfo {
            fixed: MemoryFixed {
                owner: AgentId::parse(&row.owner).expect("owner"),
                created_ms: row.created_ms as u64,
                origin: NodeId(row.origin.try_into().expect("origin")),
            },
            effective: split_grants(&row.effective),
            owner_trusted: row.owner_trusted,
            tombstoned: row.tombstoned,
            content_held: row.content_held,
            content_v: row.v.as_deref().map(hlc),
        })
    }

    fn memory_ids(&mut self) -> Vec<MemoryId> {
        self.store
            .read(|r| inspect::memory_ids(r))
            .expect("memory ids")
    }

    fn fact(&mut self, register: &Register) -> Option<Verified<SignedFact>> {
        self.store
            .read(|r| inspect::fact_bytes(r, register))
            .expect("fact")
            .map(|b| decode(&b))
    }

    fn registers(&mut self) -> BTreeMap<Register, Hlc> {
        let mut out = BTreeMap::new();
        for b in self
            .store
            .read(|r| inspect::all_fact_bytes(r))
            .expect("facts")
        {
            let f = amos_protocol::codec::decode_signed(&b).expect("stored fact");
            out.insert(f.fact.body.register(), f.fact.clock);
        }
        out
    }

    fn peer_policy(&mut self, node: &NodeId) -> Option<PeerPolicy> {
        self.store
            .read(|r| inspect::peer_policy(r, node))
            .expect("peer policy")
    }

    fn set_peer_policy(&mut self, node: &NodeId, policy: &PeerPolicy) {
        let known = self.peer_policy(node).is_some();
        let me = self.me;
        self.store
            .write(|tx| {
                if known {
                    sql_set_peer_policy(tx, me, node, policy)
                } else {
                    sql_add_peer(tx, node, policy)
                }
            })
            .expect("set peer policy");
    }

    fn set_archived(&mut self, id: &MemoryId, archived: bool) {
        self.store
            .write(|tx| tx.set_archived(id, archived))
            .expect("archive");
    }

    fn refused(&mut self) -> Vec<Refused> {
        aside(self.store.read(|r| inspect::refused(r)).expect("audit"))
    }

    fn deferred(&mut self) -> Vec<Deferred> {
        aside(self.store.read(|r| inspect::deferred(r)).expect("deferred"))
    }

    fn take_deferred(&mut self) -> Vec<(SignedFact, NodeId)> {
        self.store
            .write(|tx| inspect::take_deferred(tx))
            .expect("take deferred")
            .into_iter()
            .map(|(peer, b)| (decode(&b).into_inner(), peer))
            .collect()
    }

    fn clock(&mut self) -> HlcState {
        self.store.hlc_state().expect("clock")
    }
}
