//! Recall: candidates from the index → rows re-read from SQLite → the gate →
//! scoring → top k. Context packs fill a token budget from the same hits.
//!
//! Invariant: scoring, packing and every output see only
//! [`Visible`] memories; the index's word on visibility is never trusted
//! (it is only a pre-filter), and a row is re-read after the index speaks.
//!
//! Scoring here is `relevance × importance × confidence × reinforcement`
//! (BM25 relevance). The candidate pool is `max(4k, 50)` of the requester's
//! pre-filtered BM25 hits, widened while the gate drops too many.

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;
use serde::Serialize;

use crate::error::{NodeError, Result};
use crate::index::owner_term;
use crate::node::Node;
use crate::store::memory::{self, MemoryRecord};

/// Largest `k` a search accepts.
pub const MAX_K: usize = 1000;

/// One ranked, visible memory.
#[derive(Debug, Clone)]
pub struct Hit {
    pub memory: Visible<MemoryRecord>,
    pub relevance: f32,
    pub score: f32,
}

/// Rough token count of a text: one token per 4 bytes of UTF-8, rounded up,
/// plus 8 for the item's framing (id, type, owner) in a pack.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4) + 8
}

/// One include/exclude decision in a context pack.
#[derive(Debug, Clone, Serialize)]
pub struct PackDecision {
    pub id: String,
    pub included: bool,
    pub reason: String,
    pub tokens: usize,
    pub score: f32,
}

/// A token-budgeted context pack.
#[derive(Debug, Clone)]
pub struct Pack {
    pub items: Vec<Hit>,
    pub tokens: usize,
    pub budget: usize,
    pub report: Vec<PackDecision>,
}

impl Node {
    /// Gated, ranked recall of `query` for `who`.
    pub fn search(&mut self, who: &AuthorizedScopes, query: &str, k: usize) -> Result<Vec<Hit>> {
        if query.trim().is_empty() {
            return Err(NodeError::BadInput("empty query".into()));
        }
        if k == 0 || k > MAX_K {
            return Err(NodeError::BadInput(format!(
                "-k must be between 1 and {MAX_K}"
            )));
        }
        let now = self.now_ms();
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
        loop {
            let candidates = index.search(&terms, access.as_deref(), limit)?;
            let exhausted = candidates.len() < limit;
            let relevance: std::collections::HashMap<MemoryId, f32> =
                candidates.iter().copied().collect();
            let ids: Vec<MemoryId> = candidates.iter().map(|c| c.0).collect();
            let rows = memory::get_many(store.conn(), &ids)?;
            let mut hits: Vec<Hit> = rows
                .into_iter()
                .filter(|m| !m.archived)
                .filter_map(|m| who.admit(m, now))
                .map(|m| {
                    let rel = relevance.get(&m.id).copied().unwrap_or(0.0);
                    let score = rel * m.importance * m.confidence * m.reinforcement;
                    Hit {
                        memory: m,
                        relevance: rel,
                        score,
                    }
                })
                .collect();
            if hits.len() >= k || exhausted || limit >= 100_000 {
                hits.sort_by(|a, b| {
                    b.score
                        .total_cmp(&a.score)
                        .then_with(|| b.memory.id.cmp(&a.memory.id))
                });
                hits.truncate(k);
                return Ok(hits);
            }
            limit *= 4;
        }
    }

    /// Fill `budget` tokens with the best visible memories for `query`,
    /// skipping exact duplicates, and say why each candidate went in or out.
    pub fn pack(&mut self, who: &AuthorizedScopes, query: &str, budget: usize) -> Result<Pack> {
        if budget == 0 {
            return Err(NodeError::BadInput("--budget must be at least 1".into()));
        }
        let hits = self.search(who, query, 50)?;
        let mut items = Vec::new();
        let mut report = Vec::new();
        let mut used = 0;
        let mut seen: Vec<(String, MemoryId)> = Vec::new();
        for hit in hits {
            let tokens = estimate_tokens(&hit.memory.content);
            let norm = normalize_text(&hit.memory.content);
            let (included, reason) = if let Some((_, dup)) = seen.iter().find(|(n, _)| *n == norm) {
                (false, format!("duplicate of {dup}"))
            } else if used + tokens > budget {
                (false, format!("over budget ({used}+{tokens} > {budget})"))
            } else {
                (true, "relevant".to_owned())
            };
            report.push(PackDecision {
                id: hit.memory.id.to_string(),
                included,
                reason,
                tokens,
                score: hit.score,
            });
            if included {
                used += tokens;
                seen.push((norm, hit.memory.id));
                items.push(hit);
            }
        }
        Ok(Pack {
            items,
            tokens: used,
            budget,
            report,
        })
    }

    /// Recall feedback: raise (`helpful`) or lower the local reinforcement of
    /// visible memories. Local-only: no replicated fact changes.
    pub fn feedback(
        &mut self,
        who: &AuthorizedScopes,
        ids: &[String],
        helpful: bool,
    ) -> Result<usize> {
        if ids.is_empty() {
            return Err(NodeError::BadInput("name at least one memory".into()));
        }
        let mut mids = Vec::new();
        for id in ids {
            mids.push(self.get(who, id)?.id);
        }
        let factor = if helpful { 1.1 } else { 1.0 / 1.1 };
        self.store.write(|tx| {
            let mut stmt = tx.conn().prepare_cached(
                "UPDATE memories SET reinforcement = min(2.0, max(0.5, reinforcement * ?2)) WHERE id = ?1",
            )?;
            for id in &mids {
                stmt.execute(rusqlite::params![&id.0[..], factor])?;
            }
            Ok(mids.len())
        })
    }
}

/// Text compared for exact duplicates: lower case, whitespace folded.
pub fn normalize_text(text: &str) -> String {
    text.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}
