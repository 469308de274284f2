//! Recall (docs/design.md §9): candidates from the index and from resonance over
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
//! Submodules: [`rank`] (the score and its explanation), [`resonance`]
//! (spreading over links), [`pack`] (context packs), [`text`] (duplicate and
//! contradiction heuristics), [`latency`] (the recall latency histogram).

pub mod latency;
pub mod pack;
pub mod rank;
pub mod resonance;
pub mod text;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;
use rusqlite::params;
use serde::Serialize;

pub use latency::RecallKind;
pub use pack::{DEFAULT_BUDGET, DEFAULT_K, Pack, PackDecision, PackOptions, estimate_tokens};
pub use rank::{Explain, RecallOptions, ResonanceConfig};
pub use text::normalize_text;

use crate::api::node::Node;
use crate::api::profile::ProfileWeights;
use crate::error::{NodeError, Result};
use crate::index::owner_term;
use crate::store::memory::{self, MemoryRecord};

/// Largest `k` a search accepts.
pub const MAX_K: usize = 1000;

/// A memory counts as recalled again (for idleness) at most this often, so
/// repeated searches do not each take the write lock.
const RECALL_NOTE_EVERY_MS: u64 = 60 * 60 * 1000;

/// Feedback multiplies a memory's local reinforcement by this (helpful) or
/// divides by it (unhelpful), within [`REINFORCEMENT_RANGE`].
pub const FEEDBACK_FACTOR: f64 = 1.1;
pub const REINFORCEMENT_RANGE: (f64, f64) = (0.5, 2.0);
/// Feedback multiplies the local strength of links among the memories named
/// together by this (or divides), within [`LINK_STRENGTH_RANGE`].
pub const LINK_FEEDBACK_FACTOR: f64 = 1.25;
pub const LINK_STRENGTH_RANGE: (f64, f64) = (0.2, 3.0);
/// Helpful feedback on memories named together associates each pair locally
/// (Hebbian): a new association starts at this strength, grows by
/// [`LINK_FEEDBACK_FACTOR`] up to the top of [`LINK_STRENGTH_RANGE`], shrinks
/// by it on unhelpful feedback, and is dropped below [`ASSOCIATION_MIN`].
pub const ASSOCIATION_START: f64 = 0.25;
pub const ASSOCIATION_MIN: f64 = 0.1;

/// One ranked, visible memory.
#[derive(Debug, Clone)]
pub struct Hit {
    pub memory: Visible<MemoryRecord>,
    /// The relevance the score used (BM25, or resonance when higher).
    pub relevance: f32,
    pub score: f32,
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

impl Node {
    /// Gated, ranked recall of `query` for `who`, with default options.
    pub fn search(&mut self, who: &AuthorizedScopes, query: &str, k: usize) -> Result<Vec<Hit>> {
        self.search_with(who, query, &RecallOptions::top(k))
    }

    /// Gated, ranked recall of `query` for `who`; notes the hits as
    /// recalled (with `opts.note_recall`) and records the latency.
    pub fn search_with(
        &mut self,
        who: &AuthorizedScopes,
        query: &str,
        opts: &RecallOptions,
    ) -> Result<Vec<Hit>> {
        let started = Instant::now();
        let hits = self.recall(who, query, opts)?;
        let recalled: Vec<MemoryId> = match opts.note_recall {
            true => hits.iter().map(|h| h.memory.id).collect(),
            false => Vec::new(),
        };
        self.finish_recall(RecallKind::Search, started, &recalled);
        Ok(hits)
    }

    /// After a recall that started at `started`: note `recalled` memories
    /// (for retention) and record the latency, in one write that never
    /// waits long for another process's write lock. Never fails the recall:
    /// a busy or failing store skips the bookkeeping (logged at debug).
    pub(crate) fn finish_recall(
        &mut self,
        kind: RecallKind,
        started: Instant,
        recalled: &[MemoryId],
    ) {
        let now = self.now_ms();
        if let Err(e) = bookkeeping(&mut self.store, kind, started, recalled, now) {
            tracing::debug!(error = %e, kind = kind.as_str(), "recall bookkeeping skipped");
        }
    }

    /// The gated, ranked hits, without bookkeeping.
    pub(crate) fn recall(
        &mut self,
        who: &AuthorizedScopes,
        query: &str,
        opts: &RecallOptions,
    ) -> Result<Vec<Hit>> {
        let k = opts.k;
        if query.trim().is_empty() {
            return Err(NodeError::BadInput("empty query".into()));
        }
        if k == 0 || k > MAX_K {
            return Err(NodeError::BadInput(format!(
                "-k must be between 1 and {MAX_K}"
            )));
        }
        if opts.half_life_ms < 1000 {
            return Err(NodeError::BadInput(
                "--half-life must be at least 1s".into(),
            ));
        }
        let now = self.now_ms();
        let profile = match who.requester() {
            Some(agent) => ProfileWeights::load(self.store.conn(), agent)?,
            None => ProfileWeights::default(),
        };
        let (index, store) = self.caught_up_index()?;
        let terms = index.terms(query)?;
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let access: Option<Vec<String>> = who.requester().map(|r| {
            who.scopes()
                .map(ToString::to_string)
                .chain(std::iter::once(owner_term(r.as_str())))
                .collect()
        });
        let mut limit = (4 * k).max(50);
        let mut hits: Vec<Hit> = loop {
            let candidates = index.search(&terms, access.as_deref(), limit)?;
            let exhausted = candidates.len() < limit;
            let relevance: HashMap<MemoryId, f32> = candidates.iter().copied().collect();
            let ids: Vec<MemoryId> = candidates.iter().map(|c| c.0).collect();
            let hits: Vec<Hit> = store
                .visible(who, &ids, now)?
                .into_iter()
                .filter(|m| !m.archived)
                .map(|m| {
                    let bm25 = relevance.get(&m.id).copied().unwrap_or(0.0);
                    let explain = rank::score(&m, bm25, None, now, opts.half_life_ms, &profile);
                    hit(m, explain)
                })
                .collect();
            if hits.len() >= k || exhausted || limit >= 100_000 {
                break hits;
            }
            limit *= 4;
        };
        sort_hits(&mut hits);

        // Resonance from the strongest direct hits, over visible memories only.
        let seeds: Vec<(MemoryId, f32)> = hits
            .iter()
            .take(opts.resonance.seeds)
            .map(|h| (h.memory.id, h.relevance))
            .collect();
        if !seeds.is_empty() && opts.resonance.hops > 0 {
            let known: HashMap<MemoryId, f32> =
                hits.iter().map(|h| (h.memory.id, h.relevance)).collect();
            let at: HashMap<MemoryId, usize> = hits
                .iter()
                .enumerate()
                .map(|(i, h)| (h.memory.id, i))
                .collect();
            let reached =
                resonance::spread(store.conn(), who, now, &seeds, &known, &opts.resonance)?;
            for r in reached {
                let bm25 = known.get(&r.memory.id).copied().unwrap_or(0.0);
                let explain = rank::score(
                    &r.memory,
                    bm25,
                    Some((r.relevance, r.path)),
                    now,
                    opts.half_life_ms,
                    &profile,
                );
                let h = hit(r.memory, explain);
                match at.get(&h.memory.id) {
                    Some(&i) => hits[i] = h,
                    None => hits.push(h),
                }
            }
            sort_hits(&mut hits);
        }
        hits.truncate(k);
        Ok(hits)
    }

    /// Recall feedback on memories the requester can see: `helpful` raises
    /// their local reinforcement, the local strength of the links among them
    /// and their pairwise local association (memories recalled together);
    /// `unhelpful` lowers all three. Local-only: no replicated fact changes.
    pub fn feedback(
        &mut self,
        who: &AuthorizedScopes,
        ids: &[String],
        helpful: bool,
    ) -> Result<FeedbackReport> {
        if ids.is_empty() {
            return Err(NodeError::BadInput("name at least one memory".into()));
        }
        let mut mids = Vec::new();
        for id in ids {
            let id = self.get(who, id)?.id;
            if !mids.contains(&id) {
                mids.push(id);
            }
        }
        let now = self.now_ms() as i64;
        let (factor, link_factor) = if helpful {
            (FEEDBACK_FACTOR, LINK_FEEDBACK_FACTOR)
        } else {
            (1.0 / FEEDBACK_FACTOR, 1.0 / LINK_FEEDBACK_FACTOR)
        };
        self.store.write(|tx| {
            let mut memories = 0;
            let mut stmt = tx.conn().prepare_cached(
                "UPDATE memories SET reinforcement = min(?3, max(?2, reinforcement * ?4)),
                    last_access_ms = max(coalesce(last_access_ms, 0), ?5)
                 WHERE id = ?1",
            )?;
            for id in &mids {
                memories += stmt.execute(params![
                    &id.0[..],
                    REINFORCEMENT_RANGE.0,
                    REINFORCEMENT_RANGE.1,
                    factor,
                    now
                ])?;
            }
            let mut links = 0;
            let mut stmt = tx.conn().prepare_cached(
                "UPDATE links SET strength = min(?4, max(?3, strength * ?5))
                 WHERE from_id = ?1 AND to_id = ?2 AND present = 1",
            )?;
            for a in &mids {
                for b in &mids {
                    if a != b {
                        links += stmt.execute(params![
                            &a.0[..],
                            &b.0[..],
                            LINK_STRENGTH_RANGE.0,
                            LINK_STRENGTH_RANGE.1,
                            link_factor
                        ])?;
                    }
                }
            }
            let mut associations = 0;
            let mut grow = tx.conn().prepare_cached(
                "INSERT INTO associations(a, b, strength) VALUES (?1, ?2, ?3)
                 ON CONFLICT(a, b) DO UPDATE SET strength = min(?4, strength * ?5)",
            )?;
            let mut shrink = tx.conn().prepare_cached(
                "UPDATE associations SET strength = strength / ?3 WHERE a = ?1 AND b = ?2",
            )?;
            let mut drop = tx.conn().prepare_cached(
                "DELETE FROM associations WHERE a = ?1 AND b = ?2 AND strength < ?3",
            )?;
            for (i, a) in mids.iter().enumerate() {
                for b in &mids[i + 1..] {
                    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                    associations += if helpful {
                        grow.execute(params![
                            &lo.0[..],
                            &hi.0[..],
                            ASSOCIATION_START,
                            LINK_STRENGTH_RANGE.1,
                            LINK_FEEDBACK_FACTOR
                        ])?
                    } else {
                        let n =
                            shrink.execute(params![&lo.0[..], &hi.0[..], LINK_FEEDBACK_FACTOR])?;
                        drop.execute(params![&lo.0[..], &hi.0[..], ASSOCIATION_MIN])?;
                        n
                    };
                }
            }
            Ok(FeedbackReport {
                memories,
                links,
                associations,
            })
        })
    }
}

fn hit(memory: Visible<MemoryRecord>, explain: Explain) -> Hit {
    Hit {
        relevance: explain.relevance,
        score: explain.score,
        explain,
        memory,
    }
}

/// Best first; ties by id (newest first) so results are deterministic.
fn sort_hits(hits: &mut [Hit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.memory.id.cmp(&a.memory.id))
    });
}

/// Record `ids` as recalled at `now_ms` (local-only), taking the write lock
/// only when one of them was last noted more than an hour ago.
/// Note the stale ones of `ids` as recalled (at most once per
/// [`RECALL_NOTE_EVERY_MS`]) and add a latency sample, in one write. With
/// nothing to note the write waits for no one: if another process holds the
/// write lock, the sample is dropped.
fn bookkeeping(
    store: &mut crate::store::Store,
    kind: RecallKind,
    started: Instant,
    ids: &[MemoryId],
    now_ms: u64,
) -> Result<()> {
    let stale_before = now_ms.saturating_sub(RECALL_NOTE_EVERY_MS) as i64;
    let stale: Vec<MemoryId> = {
        let mut stmt = store.conn().prepare_cached(
            "SELECT 1 FROM memories WHERE id = ?1 AND (last_access_ms IS NULL OR last_access_ms < ?2)",
        )?;
        let mut out = Vec::new();
        for id in ids {
            if stmt.exists(params![&id.0[..], stale_before])? {
                out.push(*id);
            }
        }
        out
    };
    let wait = match stale.is_empty() {
        true => Duration::ZERO,
        false => Duration::from_millis(50),
    };
    store.conn().busy_timeout(wait)?;
    // The time to the answer; this write is bookkeeping, not recall.
    let elapsed = started.elapsed();
    let done = store.write(|tx| {
        if !stale.is_empty() {
            memory::note_recalled(tx.conn(), &stale, now_ms)?;
        }
        latency::record(tx.conn(), kind, elapsed)
    });
    store.conn().busy_timeout(crate::store::BUSY_TIMEOUT)?;
    done
}
