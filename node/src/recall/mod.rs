//! Recall (docs/design.md §9): candidates from the full-text index and the
//! vector index ([`fuse`]: lexical, semantic or hybrid) and from resonance over
//! links → rows re-read from SQLite → the gate → score (with the requester's
//! profile weights) → top k. Context packs ([`pack`]) fill a token budget from
//! the same hits; feedback reinforces what helped.
//!
//! Invariant: scoring, resonance, packing, feedback and every output see only
//! [`Visible`] memories; the index's word on visibility is never trusted
//! (it is only a pre-filter), and a row is re-read after the index speaks.
//! A memory the requester cannot see is never a candidate, never a bridge
//! between linked memories, and never counted or named.
//!
//! Invariant: recall writes only local-only state (`last_access_ms`,
//! `recall_count`, `reinforcement`, link `strength`, `associations`,
//! `recall_latency`); it never writes a replicated fact, so `amos digest`
//! does not move.
//!
//! Submodules: [`fuse`] (modes and the fusion of lexical and semantic
//! candidates), [`rank`] (the score and its explanation), [`resonance`]
//! (spreading over links), [`pack`] (context packs), [`similarity`] (duplicate and
//! contradiction heuristics), [`latency`] (the recall latency histogram),
//! [`time`] (valid time, supersession and the time filters).

pub(crate) mod fuse;
pub(crate) mod latency;
pub(crate) mod pack;
pub(crate) mod rank;
pub(crate) mod resonance;
pub(crate) mod similarity;
pub(crate) mod time;

use std::time::{Duration, Instant};

use amos_acl::Visible;
use amos_protocol::MemoryId;
use serde::Serialize;

pub use fuse::{Direct, RecallMode};
pub use latency::RecallKind;
pub use pack::{
    Conflict, DEFAULT_BUDGET, DEFAULT_K, Pack, PackDecision, PackOptions, estimate_tokens,
};
pub use rank::{DAY_MS, Explain, RecallOptions, ResonanceConfig, ResonancePath};
pub use similarity::normalize_text;
pub use time::{SUPERSEDED_FACTOR, Superseder, TimeQuery, ValidTime};

use crate::error::Result;
use crate::store::memory::{self, MemoryRecord};

/// Largest `k` a search accepts.
pub const MAX_K: usize = 1000;

/// A memory counts as recalled again (for idleness) at most this often, so
/// repeated searches do not each take the write lock.
const RECALL_NOTE_EVERY_MS: u64 = 60 * 60 * 1000;

/// Feedback multiplies a memory's local reinforcement by this (helpful) or
/// divides by it (unhelpful), within [`REINFORCEMENT_RANGE`].
pub const FEEDBACK_FACTOR: f64 = 1.1;
/// The bounds a memory's local reinforcement stays within.
pub const REINFORCEMENT_RANGE: (f64, f64) = (0.5, 2.0);
/// Feedback multiplies the local strength of links among the memories named
/// together by this (or divides), within [`LINK_STRENGTH_RANGE`].
pub const LINK_FEEDBACK_FACTOR: f64 = 1.25;
/// The bounds a link's local strength stays within.
pub const LINK_STRENGTH_RANGE: (f64, f64) = (0.2, 3.0);
/// Helpful feedback on memories named together associates each pair locally
/// (Hebbian): a new association starts at this strength, grows by
/// [`LINK_FEEDBACK_FACTOR`] up to the top of [`LINK_STRENGTH_RANGE`], shrinks
/// by it on unhelpful feedback, and is dropped below [`ASSOCIATION_MIN`].
pub const ASSOCIATION_START: f64 = 0.25;
/// Below this strength a local association is dropped.
pub const ASSOCIATION_MIN: f64 = 0.1;

/// One ranked, visible memory.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The memory, as the gate let the requester see it.
    pub memory: Visible<MemoryRecord>,
    /// The relevance the score used (BM25, or resonance when higher).
    pub relevance: f32,
    /// Its score ([`Explain::score`]); hits are sorted by it, best first.
    pub score: f32,
    /// Every factor of the score.
    pub explain: Explain,
}

/// What recall feedback changed (local-only state).
#[derive(Debug, Clone, Serialize)]
pub struct FeedbackReport {
    /// Memories whose reinforcement changed.
    pub memories: usize,
    /// Links among them whose local strength changed.
    pub links: usize,
    /// Local associations among them made, strengthened, weakened or dropped.
    pub associations: usize,
}

pub(crate) fn hit(memory: Visible<MemoryRecord>, explain: Explain) -> Hit {
    Hit {
        relevance: explain.relevance,
        score: explain.score,
        explain,
        memory,
    }
}

/// Best first; ties by id (newest first) so results are deterministic.
pub(crate) fn sort_hits(hits: &mut [Hit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.memory.id.cmp(&a.memory.id))
    });
}

/// The hits recall should note as recalled at `now_ms`: those not noted
/// within the last [`RECALL_NOTE_EVERY_MS`] (as their rows read).
pub(crate) fn due_for_note(hits: &[Hit], now_ms: u64) -> Vec<MemoryId> {
    let stale_before = now_ms.saturating_sub(RECALL_NOTE_EVERY_MS);
    hits.iter()
        .filter(|h| h.memory.last_access_ms().is_none_or(|t| t < stale_before))
        .map(|h| h.memory.id)
        .collect()
}

/// Note `stale` ([`due_for_note`]) as recalled and add a latency sample,
/// in one write. With nothing to note the write waits for no one: if
/// another process holds the write lock, the sample is dropped.
pub(crate) fn bookkeeping(
    store: &mut crate::store::Store,
    kind: RecallKind,
    started: Instant,
    stale: &[MemoryId],
    now_ms: u64,
) -> Result<()> {
    let wait = match stale.is_empty() {
        true => Duration::ZERO,
        false => Duration::from_millis(50),
    };
    // The time to the answer; this write is bookkeeping, not recall.
    let elapsed = started.elapsed();
    store.write_waiting(wait, |tx| {
        if !stale.is_empty() {
            memory::note_recalled(tx, stale, now_ms)?;
        }
        latency::record(tx, kind, elapsed)
    })
}
