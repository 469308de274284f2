//! Applying a batch of verified facts from one sender: gate → clock skew →
//! merge → store, fact by fact, in a dependency-friendly order (org records,
//! then memory acl, content, tombstones, then links).
//!
//! The caller wraps one call in one storage transaction; a refused or
//! deferred fact never stops the rest of the batch.

use amos_protocol::{FactBody, SignedFact, Verified};

use crate::gate::{self, DeferReason, Gate, Refusal};
use crate::merge::{self, Verdict};
use crate::replica::{ReplicaStore, Sender};

/// Counts of what happened to a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Facts stored (new, or newer than what was held).
    pub applied: u64,
    /// Facts older than or equal to what was held: nothing changed.
    pub stale: u64,
    /// Facts the gate refused (audited, never stored).
    pub refused: u64,
    /// Facts set aside to retry later (clock skew, a missing endpoint or scope).
    pub deferred: u64,
}

impl ApplyReport {
    /// Add another batch's counts to these.
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
