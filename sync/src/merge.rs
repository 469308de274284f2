//! The merge rule: last writer wins per register, by [`Hlc`].
//!
//! * A memory's content (`v`) and acl (`acl_v`) registers are independent.
//! * A tombstone is terminal: it beats every other fact for its memory
//!   whatever the clocks, and nothing after it (later, replayed or
//!   concurrent) brings the memory back.
//! * Fixed fields (a memory's owner, creation time and origin; a project's
//!   team) never change: a fact that disagrees with the stored ones is refused.
//!
//! Applying the same fact twice, or facts in any order, gives the same state.

use amos_protocol::{Fact, FactBody, Hlc};

use crate::apply::MemoryState;
use crate::gate::Refusal;

/// What to do with one incoming fact, as far as the merge rule goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than what we hold: write it.
    Apply,
    /// Not newer (or the memory is tombstoned): drop it silently.
    Stale,
    /// Contradicts a fixed field: refuse and record why.
    Refuse(Refusal),
}

/// Decide a memory fact against the memory's stored state.
pub fn decide_memory(fact: &Fact, held: Option<&MemoryState>) -> Verdict {
    let Some((_, fixed)) = fact.body.memory() else {
        return Verdict::Stale;
    };
    let Some(held) = held else {
        return Verdict::Apply;
    };
    if &held.fixed != fixed {
        return Verdict::Refuse(Refusal::FixedFieldMismatch(
            "owner, creation time or origin differ from the stored memory".into(),
        ));
    }
    if held.tombstoned {
        return Verdict::Stale;
    }
    match &fact.body {
        FactBody::MemoryTombstone(_) => Verdict::Apply,
        FactBody::MemoryContent(_) => newer(&fact.clock, held.content_v.as_ref()),
        FactBody::MemoryAcl(_) => newer(&fact.clock, held.acl_v.as_ref()),
        _ => Verdict::Stale,
    }
}

/// Decide any other register by its stored clock.
pub fn newer(incoming: &Hlc, stored: Option<&Hlc>) -> Verdict {
    match stored {
        Some(s) if s >= incoming => Verdict::Stale,
        _ => Verdict::Apply,
    }
}
