//! Applying a batch of verified facts from one sender: gate → clock skew →
//! merge → store, fact by fact, in a dependency-friendly order (org records,
//! then memory acl, content, tombstones, then links).
//!
//! The caller wraps one call in one storage transaction; a refused or
//! deferred fact never stops the rest of the batch.

use amos_acl::PeerPolicy;
use amos_protocol::{
    FactBody, Grants, Hlc, MemoryFixed, MemoryId, NodeId, OrgScope, ProjectId, Register,
    SignedFact, TeamId, Verified,
};

use crate::gate::{self, Admission, DeferReason, Gate, Refusal};
use crate::merge::{self, Verdict};

/// Who sent a batch, with the policy *we* gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    pub node: NodeId,
    pub policy: PeerPolicy,
}

/// What the merge rule and the gate need to know of a stored memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryState {
    pub fixed: MemoryFixed,
    /// The content register's clock — kept after a purge.
    pub content_v: Option<Hlc>,
    /// Whether the content itself is held (false after a purge).
    pub content_held: bool,
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

/// Storage as the replication core sees it. `amos-node` implements it over
/// SQLite (inside one transaction per batch); tests implement it in memory.
pub trait ReplicaStore {
    type Error;
    /// This node's id.
    fn local_node(&self) -> NodeId;
    /// The policy we gave `node`, if it is a registered peer.
    fn peer_policy(&mut self, node: &NodeId) -> Result<Option<PeerPolicy>, Self::Error>;
    fn memory(&mut self, id: &MemoryId) -> Result<Option<MemoryState>, Self::Error>;
    /// The clock of a non-memory register, if held.
    fn clock_of(&mut self, register: &Register) -> Result<Option<Hlc>, Self::Error>;
    /// A project's team in our org graph.
    fn project_team(&mut self, project: &ProjectId) -> Result<Option<TeamId>, Self::Error>;
    /// The node that created a team or project we hold (its fixed `origin`).
    fn org_origin(&mut self, scope: &OrgScope) -> Result<Option<NodeId>, Self::Error>;
    /// Write an admitted fact that won the merge. Only the gate makes an
    /// [`Admission`] ([`gate::check`], [`Admission::local`]).
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

/// Counts of what happened to a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub applied: u64,
    pub stale: u64,
    pub refused: u64,
    pub deferred: u64,
}

impl ApplyReport {
    pub fn add(&mut self, o: ApplyReport) {
        self.applied += o.applied;
        self.stale += o.stale;
        self.refused += o.refused;
        self.deferred += o.deferred;
    }
}

fn order(body: &FactBody) -> u8 {
    match body {
        // A project first: a `project:` policy admits its team's record.
        FactBody::Project(_) => 0,
        FactBody::Team(_) => 1,
        FactBody::Membership(_) => 2,
        FactBody::Agent(_) => 3,
        FactBody::Profile(_) => 4,
        // acl before content: a re-share must be in force before the
        // content it brings back is judged (see `merge::decide_memory`).
        FactBody::MemoryAcl(_) => 5,
        FactBody::MemoryContent(_) => 6,
        FactBody::MemoryTombstone(_) => 7,
        FactBody::Link(_) => 8,
    }
}

/// Apply `facts` from `sender` at physical time `now_ms`; facts whose clock is
/// more than `max_skew_ms` ahead are deferred (quarantined), not applied.
pub fn apply_batch<S: ReplicaStore>(
    store: &mut S,
    sender: &Sender,
    mut facts: Vec<Verified<SignedFact>>,
    now_ms: u64,
    max_skew_ms: u64,
) -> Result<ApplyReport, S::Error> {
    facts.sort_by_key(|f| order(&f.fact.body));
    let mut report = ApplyReport::default();
    for f in facts {
        match apply_one(store, sender, f, now_ms, max_skew_ms)? {
            Outcome::Applied => report.applied += 1,
            Outcome::Stale => report.stale += 1,
            Outcome::Refused(f, r) => {
                store.refuse(&f, &sender.node, &r)?;
                report.refused += 1;
            }
            Outcome::Deferred(f, d) => {
                store.defer(&f, &sender.node, &d)?;
                report.deferred += 1;
            }
        }
    }
    Ok(report)
}

enum Outcome {
    Applied,
    Stale,
    Refused(Verified<SignedFact>, Refusal),
    Deferred(Verified<SignedFact>, DeferReason),
}

fn apply_one<S: ReplicaStore>(
    store: &mut S,
    sender: &Sender,
    f: Verified<SignedFact>,
    now_ms: u64,
    max_skew_ms: u64,
) -> Result<Outcome, S::Error> {
    let admission = match gate::check(store, sender, f)? {
        Gate::Refuse(f, r) => return Ok(Outcome::Refused(f, r)),
        Gate::Defer(f, d) => return Ok(Outcome::Deferred(f, d)),
        Gate::Admit(a) => a,
    };
    let fact = &admission.fact().fact;
    if fact.clock.wall_ms > now_ms.saturating_add(max_skew_ms) {
        let ahead_ms = fact.clock.wall_ms - now_ms;
        return Ok(Outcome::Deferred(
            admission.into_fact(),
            DeferReason::ClockSkew { ahead_ms },
        ));
    }
    let verdict = match &fact.body {
        FactBody::MemoryContent(_) | FactBody::MemoryAcl(_) | FactBody::MemoryTombstone(_) => {
            let held = match fact.body.memory() {
                Some((id, _)) => store.memory(&id)?,
                None => None,
            };
            merge::decide_memory(fact, held.as_ref())
        }
        body => {
            let reg = body.register();
            merge::newer(&fact.clock, store.clock_of(&reg)?.as_ref())
        }
    };
    // A refused fact never reaches the store, not even its clock.
    if let Verdict::Refuse(r) = verdict {
        return Ok(Outcome::Refused(admission.into_fact(), r));
    }
    store.observe(&fact.clock)?;
    match verdict {
        Verdict::Stale => Ok(Outcome::Stale),
        Verdict::MergeText => Ok(if store.merge_text(&admission)? {
            Outcome::Applied
        } else {
            Outcome::Stale
        }),
        Verdict::Refuse(r) => Ok(Outcome::Refused(admission.into_fact(), r)),
        Verdict::Apply => {
            store.put(admission)?;
            Ok(Outcome::Applied)
        }
    }
}
