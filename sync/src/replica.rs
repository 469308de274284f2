//! The replica contract: what the replication core needs to know of a
//! store ([`ReplicaStore`], [`MemoryState`]) and of who sent a batch
//! ([`Sender`]). `amos-node` implements it over SQLite; the in-memory twin
//! (`memstore`, behind the `twin` feature) implements it for tests.
//!
//! Boundary: types and the trait only; the gate, the merge rule and the
//! batch driver (`apply`) build on it, never the other way round.

use amos_acl::PeerPolicy;
use amos_protocol::{
    Grants, Hlc, MemoryFixed, MemoryId, NodeId, OrgScope, ProjectId, Register, SignedFact, TeamId,
};

use crate::admission::{Admission, DeferReason, Refusal};

/// Who sent a batch, with the policy *we* gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// The sending node.
    pub node: NodeId,
    /// The policy we gave it: what its facts may do here.
    pub policy: PeerPolicy,
}

/// What the merge rule and the gate need to know of a stored memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryState {
    /// The fields fixed at creation; a fact disagreeing with them is refused.
    pub fixed: MemoryFixed,
    /// The content register's clock — kept after a purge.
    pub content_v: Option<Hlc>,
    /// Whether the content itself is held (false after a purge).
    pub content_held: bool,
    /// The acl register's clock.
    pub acl_v: Option<Hlc>,
    /// The tombstone's clock, if the memory is forgotten.
    pub tombstone_v: Option<Hlc>,
    /// The grants in force on this node.
    pub effective: Grants,
    /// Whether the owner rule holds here (origin is us or a `full` peer).
    pub owner_trusted: bool,
    /// Whether the memory's text is an automerge document here (it has been
    /// edited): see [`crate::text`].
    pub edited: bool,
}

/// A legacy team or project id that another node created too, as recorded
/// here (docs/design.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The origin of the one held here.
    pub held: NodeId,
    /// The other origins whose records of it arrived.
    pub theirs: Vec<NodeId>,
    /// A `full` peer (our own operator's node) brought one: any node but
    /// `held` and this one may mean another. Brought only by scoped peers,
    /// only the origins in `theirs` are taken to (a scoped peer cannot
    /// make us distrust third nodes' grants).
    pub closed: bool,
}

impl Clash {
    /// Whether node `x` may mean the other scope by this id, on a node `me`.
    pub fn may_mean_other(&self, x: NodeId, me: NodeId) -> bool {
        x != self.held && x != me && (self.closed || self.theirs.contains(&x))
    }
}

/// Storage as the replication core sees it. `amos-node` implements it over
/// SQLite (inside one transaction per batch); tests implement it in memory.
pub trait ReplicaStore {
    /// What the store's own operations fail with.
    type Error;
    /// This node's id.
    fn local_node(&self) -> NodeId;
    /// The policy we gave `node`, if it is a registered peer.
    fn peer_policy(&mut self, node: &NodeId) -> Result<Option<PeerPolicy>, Self::Error>;
    /// What is held of memory `id`, if anything.
    fn memory(&mut self, id: &MemoryId) -> Result<Option<MemoryState>, Self::Error>;
    /// The clock of a non-memory register, if held.
    fn clock_of(&mut self, register: &Register) -> Result<Option<Hlc>, Self::Error>;
    /// A project's team in our org graph.
    fn project_team(&mut self, project: &ProjectId) -> Result<Option<TeamId>, Self::Error>;
    /// The node that created a team or project we hold (its fixed `origin`).
    fn org_origin(&mut self, scope: &OrgScope) -> Result<Option<NodeId>, Self::Error>;
    /// If `scope` is a legacy id two origins created and a clash with it
    /// is recorded here ([`ReplicaStore::record_clash`]): what is known of
    /// it. `None` for every other scope.
    fn clash(&mut self, scope: &OrgScope) -> Result<Option<Clash>, Self::Error>;
    /// Record, locally (never a fact), that a record of the legacy scope
    /// `scope` arrived with origin `theirs` while we hold the one `held`
    /// created — from a `full` peer (`closed`) or a scoped one — and, if
    /// that is news, re-judge what is held as the gate now would
    /// ([`crate::gate::clash_cut`]: a grant to it that may mean the other
    /// scope stops counting; a member the gate now refuses leaves).
    fn record_clash(
        &mut self,
        scope: &OrgScope,
        held: &NodeId,
        theirs: &NodeId,
        closed: bool,
    ) -> Result<(), Self::Error>;
    /// Write an admitted fact that won the merge. Only the gate makes an
    /// [`Admission`] ([`crate::gate::check`], [`Admission::local`]).
    fn put(&mut self, admission: Admission) -> Result<(), Self::Error>;
    /// Offer the text of a content fact that lost by clock to the memory's
    /// text log ([`crate::text::TextLog::offer`]); its other fields are
    /// dropped. Returns whether anything changed.
    fn merge_text(&mut self, admission: &Admission) -> Result<bool, Self::Error>;
    /// Advance our clock past a received one.
    fn observe(&mut self, clock: &Hlc) -> Result<(), Self::Error>;
    /// Keep a fact aside to retry later.
    fn defer(
        &mut self,
        fact: &SignedFact,
        from: &NodeId,
        reason: &DeferReason,
    ) -> Result<(), Self::Error>;
    /// Record a refusal (the audit log).
    fn refuse(
        &mut self,
        fact: &SignedFact,
        from: &NodeId,
        reason: &Refusal,
    ) -> Result<(), Self::Error>;
}
