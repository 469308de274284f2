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

use amos_protocol::{Fact, FactBody, Hlc, MemoryText};

use crate::admission::Refusal;
use crate::replica::MemoryState;

/// What to do with one incoming fact, as far as the merge rule goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than what we hold: write it.
    Apply,
    /// A content fact older than the one held, whose text change still
    /// counts: concurrent edits both survive ([`crate::text`]). Its other
    /// fields lose.
    MergeText,
    /// Not newer (or the memory is tombstoned): drop it silently.
    Stale,
    /// Contradicts a fixed field: refuse and record why.
    Refuse(Refusal),
}

/// Decide a memory fact against the memory's stored state.
///
/// * Two tombstones (concurrent forgets) compete like any register, so every
///   replica keeps the same one; content and acl facts after a tombstone are
///   stale whatever their clock.
/// * Content purged by a revocation keeps its clock: a replay stays stale
///   while the memory is not needed here, and the same fact re-sent once it
///   is needed again (equal clock; re-shared here, or its origin's policy
///   widened) is taken back. A tombstone still beats it.
///
/// A content fact that loses by clock may still carry a text change the
/// memory's text document lacks: [`Verdict::MergeText`]. Only the origin
/// may compact a memory's history (a snapshot).
pub fn decide_memory(fact: &Fact, held: Option<&MemoryState>) -> Verdict {
    let Some((_, fixed)) = fact.body.memory() else {
        return Verdict::Stale;
    };
    if let FactBody::MemoryContent(c) = &fact.body
        && matches!(c.text, MemoryText::Snapshot(_))
        && fact.author() != fixed.origin
    {
        return Verdict::Refuse(Refusal::NotOrigin);
    }
    let Some(held) = held else {
        return Verdict::Apply;
    };
    if &held.fixed != fixed {
        return Verdict::Refuse(Refusal::FixedFieldMismatch(
            "owner, creation time or origin differ from the stored memory".into(),
        ));
    }
    match (&fact.body, held.tombstone_v.as_ref()) {
        (FactBody::MemoryTombstone(_), t) => newer(&fact.clock, t),
        (_, Some(_)) => Verdict::Stale,
        (FactBody::MemoryContent(c), None) => {
            // Content is needed here when the owner rule holds (ours or a
            // full peer's memory) or some grant is in force.
            let needed = held.owner_trusted || !held.effective.is_empty();
            let by_clock = match held.content_v.as_ref() {
                // Purged content comes back — the very fact that was purged,
                // at its own clock — once the memory is needed here again
                // (re-shared, or its origin's policy widened; acl facts
                // apply before content in a batch).
                Some(v) if !held.content_held && needed && fact.clock >= *v => Verdict::Apply,
                v => newer(&fact.clock, v),
            };
            // An older text fact still counts for an edited memory's log,
            // and for a memory whose content was purged but is needed
            // again: what comes back may be an edited text this fact is
            // the base (or an edit) of, and the facts may arrive in any
            // order — the text must not depend on it.
            let purged_needed = !held.content_held && needed;
            let text_counts = c.text.changes_text()
                && (held.edited || c.text.plain().is_none() || purged_needed)
                && (held.content_held || needed);
            match by_clock {
                Verdict::Stale if text_counts => Verdict::MergeText,
                v => v,
            }
        }
        (FactBody::MemoryAcl(_), None) => newer(&fact.clock, held.acl_v.as_ref()),
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
