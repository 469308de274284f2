//! Context packs: fill a token budget with the best visible memories for a
//! query, reserving room for pinned (core) memories, suppressing exact and
//! near duplicates, marking contradicting pairs as CONFLICT, and explaining
//! every include/exclude decision.
//!
//! Token estimate ([`estimate_tokens`]): one token per 4 bytes of UTF-8,
//! rounded up, plus 8 for the item's framing (id, type, owner).
//!
//! Invariant: every candidate, decision and conflict here is about a
//! [`Visible`](amos_acl::Visible) memory; the report never names, counts or
//! hints at anything the gate kept out.

use amos_acl::AuthorizedScopes;
use amos_protocol::MemoryId;
use serde::Serialize;

use super::rank::{self, RecallOptions};
use super::text::{self, NEAR_DUPLICATE};
use super::{Hit, hit};
use crate::api::node::Node;
use crate::api::profile::ProfileWeights;
use crate::error::{NodeError, Result};

/// Candidates a pack considers by default (the best hits of the query).
pub const PACK_CANDIDATES: usize = 50;
/// Pinned memories (query-independent core) a pack considers at most.
pub const PACK_CORE: usize = 32;
/// The share of the budget reserved for pinned memories by default.
pub const PINNED_SHARE: f32 = 0.25;

/// The token budget of a pack when none is given (`amos pack`, the MCP
/// tool `memory_context_pack`).
pub const DEFAULT_BUDGET: usize = 1200;
/// How many hits a search returns when not told (`amos search`, the MCP
/// tool `memory_search`).
pub const DEFAULT_K: usize = 10;

/// Rough token count of a text: one token per 4 bytes of UTF-8, rounded up,
/// plus 8 for the item's framing (id, type, owner) in a pack.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4) + 8
}

/// How to build a pack.
#[derive(Debug, Clone, PartialEq)]
pub struct PackOptions {
    pub budget: usize,
    /// The recall the candidates come from (`k` = how many).
    pub recall: RecallOptions,
    /// Share of the budget pinned memories may take first (0..=1).
    pub pinned_share: f32,
    /// Jaccard similarity of token sets at which a candidate is a
    /// near-duplicate of an included item.
    pub near_duplicate: f32,
    /// Treat using the pack as helpful feedback on its items.
    pub reinforce: bool,
}

impl PackOptions {
    pub fn new(budget: usize) -> Self {
        PackOptions {
            budget,
            recall: RecallOptions::top(PACK_CANDIDATES),
            pinned_share: PINNED_SHARE,
            near_duplicate: NEAR_DUPLICATE,
            reinforce: false,
        }
    }
}

/// One include/exclude decision in a context pack.
#[derive(Debug, Clone, Serialize)]
pub struct PackDecision {
    pub id: String,
    pub included: bool,
    /// `pinned`, `relevant`, `duplicate`, `near-duplicate`, `over-budget`
    /// or `reserve-full`.
    pub decision: &'static str,
    pub reason: String,
    pub tokens: usize,
    pub score: f32,
    /// Included items this one contradicts (CONFLICT).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflict_with: Vec<String>,
}

/// Two included items that state different values for the same subject.
#[derive(Debug, Clone, Serialize)]
pub struct Conflict {
    pub a: String,
    pub b: String,
    pub subject: String,
}

/// A token-budgeted context pack.
#[derive(Debug, Clone)]
pub struct Pack {
    pub items: Vec<Hit>,
    pub tokens: usize,
    pub budget: usize,
    /// Tokens reserved for pinned memories.
    pub reserved: usize,
    pub report: Vec<PackDecision>,
    pub conflicts: Vec<Conflict>,
}

impl Pack {
    /// The ids an item conflicts with.
    pub fn conflicts_of(&self, id: &MemoryId) -> Vec<String> {
        let id = id.to_string();
        self.conflicts
            .iter()
            .filter_map(|c| {
                if c.a == id {
                    Some(c.b.clone())
                } else if c.b == id {
                    Some(c.a.clone())
                } else {
                    None
                }
            })
            .collect()
    }
}

struct Included {
    id: MemoryId,
    norm: String,
    tokens: Vec<u64>,
}

impl Node {
    /// Fill `budget` tokens with the best visible memories for `query`.
    pub fn pack(&mut self, who: &AuthorizedScopes, query: &str, budget: usize) -> Result<Pack> {
        self.pack_with(who, query, &PackOptions::new(budget))
    }

    /// A context pack with explicit options; notes its hits as recalled
    /// (with `opts.recall.note_recall`) and records the latency (kind
    /// `pack`; its search is not counted again as a `search`).
    pub fn pack_with(
        &mut self,
        who: &AuthorizedScopes,
        query: &str,
        opts: &PackOptions,
    ) -> Result<Pack> {
        if opts.budget == 0 {
            return Err(NodeError::BadInput("--budget must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&opts.pinned_share) || !(0.0..=1.0).contains(&opts.near_duplicate)
        {
            return Err(NodeError::BadInput(
                "pinned share and near-duplicate threshold must be in 0..=1".into(),
            ));
        }
        let started = std::time::Instant::now();
        let hits = self.recall(who, query, &opts.recall)?;
        let recalled: Vec<MemoryId> = match opts.recall.note_recall {
            true => hits.iter().map(|h| h.memory.id).collect(),
            false => Vec::new(),
        };
        let core = self.pinned_core(who, &hits, opts)?;

        let budget = opts.budget;
        let reserved = (budget as f32 * opts.pinned_share) as usize;
        let mut used = 0;
        let mut pinned_used = 0;
        let mut included: Vec<Included> = Vec::new();
        let mut items: Vec<Hit> = Vec::new();
        let mut report: Vec<PackDecision> = Vec::new();

        // Pinned first (matched ones by score, then the query-independent core),
        // into the reserved room; a matched pinned memory that does not fit
        // there competes with the rest.
        let (pinned, rest): (Vec<Hit>, Vec<Hit>) = hits.into_iter().partition(|h| h.memory.pinned);
        let mut second: Vec<Hit> = Vec::new();
        // Core memories that missed the reserve: they take what the query leaves.
        let mut leftover: Vec<Hit> = Vec::new();
        for (h, matched) in pinned
            .into_iter()
            .map(|h| (h, true))
            .chain(core.into_iter().map(|h| (h, false)))
        {
            let tokens = estimate_tokens(&h.memory.content);
            if let Some(d) = duplicate(&h, &included, opts.near_duplicate, tokens) {
                report.push(d);
                continue;
            }
            if pinned_used + tokens <= reserved && used + tokens <= budget {
                pinned_used += tokens;
                used += tokens;
                report.push(decision(
                    &h,
                    true,
                    "pinned",
                    format!("pinned: in the reserved room ({pinned_used} of {reserved} tokens)"),
                    tokens,
                ));
                included.push(included_of(&h));
                items.push(h);
            } else if matched {
                second.push(h);
            } else {
                leftover.push(h);
            }
        }
        second.extend(rest);
        super::sort_hits(&mut second);
        for h in second {
            let tokens = estimate_tokens(&h.memory.content);
            if let Some(d) = duplicate(&h, &included, opts.near_duplicate, tokens) {
                report.push(d);
                continue;
            }
            if used + tokens > budget {
                report.push(decision(
                    &h,
                    false,
                    "over-budget",
                    format!("over budget ({used}+{tokens} > {budget})"),
                    tokens,
                ));
                continue;
            }
            used += tokens;
            let why = match &h.explain.resonance {
                Some(p) => format!(
                    "relevant (score {:.4}), linked from {} ({} hop{})",
                    h.score,
                    p.via,
                    p.hops,
                    if p.hops == 1 { "" } else { "s" }
                ),
                None => format!("relevant (score {:.4})", h.score),
            };
            report.push(decision(&h, true, "relevant", why, tokens));
            included.push(included_of(&h));
            items.push(h);
        }

        for h in leftover {
            let tokens = estimate_tokens(&h.memory.content);
            if let Some(d) = duplicate(&h, &included, opts.near_duplicate, tokens) {
                report.push(d);
            } else if used + tokens <= budget {
                used += tokens;
                report.push(decision(
                    &h,
                    true,
                    "pinned",
                    "pinned: missed the reserved room, fits in what the query left".to_owned(),
                    tokens,
                ));
                included.push(included_of(&h));
                items.push(h);
            } else {
                report.push(decision(
                    &h,
                    false,
                    "reserve-full",
                    format!(
                        "pinned but matches nothing in the query; the reserved room ({reserved} tokens) and the rest of the budget are full ({used}+{tokens} > {budget})"
                    ),
                    tokens,
                ));
            }
        }

        // Contradicting pairs among what the pack holds.
        let stated: Vec<Option<(String, String)>> = items
            .iter()
            .map(|h| text::subject_value(&h.memory.content))
            .collect();
        let mut conflicts = Vec::new();
        for (i, a) in items.iter().enumerate() {
            let Some((sa, va)) = &stated[i] else { continue };
            for (j, b) in items.iter().enumerate().skip(i + 1) {
                if let Some((sb, vb)) = &stated[j]
                    && sa == sb
                    && va != vb
                {
                    conflicts.push(Conflict {
                        a: a.memory.id.to_string(),
                        b: b.memory.id.to_string(),
                        subject: sa.clone(),
                    });
                }
            }
        }
        for d in report.iter_mut().filter(|d| d.included) {
            for c in &conflicts {
                let other = if c.a == d.id {
                    &c.b
                } else if c.b == d.id {
                    &c.a
                } else {
                    continue;
                };
                d.conflict_with.push(other.clone());
                d.reason = format!(
                    "{}; CONFLICT with {other}: same subject {:?}, different value",
                    d.reason, c.subject
                );
            }
        }

        if opts.reinforce && !items.is_empty() {
            let ids: Vec<String> = items.iter().map(|h| h.memory.id.to_string()).collect();
            self.feedback(who, &ids, true)?;
        }
        self.finish_recall(super::RecallKind::Pack, started, &recalled);
        Ok(Pack {
            items,
            tokens: used,
            budget,
            reserved,
            report,
            conflicts,
        })
    }

    /// Visible pinned memories (the requester's core), most important first,
    /// that the query did not already find.
    fn pinned_core(
        &self,
        who: &AuthorizedScopes,
        hits: &[Hit],
        opts: &PackOptions,
    ) -> Result<Vec<Hit>> {
        if opts.pinned_share <= 0.0 {
            return Ok(Vec::new());
        }
        let now = self.now_ms();
        let except: Vec<MemoryId> = hits.iter().map(|h| h.memory.id).collect();
        let pinned = self.store.visible_pinned(who, &except, PACK_CORE, now)?;
        let profile = match who.requester() {
            Some(agent) => ProfileWeights::load(self.store.conn(), agent)?,
            None => ProfileWeights::default(),
        };
        let mut out = Vec::new();
        for v in pinned {
            let explain = rank::score(&v, 0.0, None, now, opts.recall.half_life_ms, &profile);
            out.push(hit(v, explain));
        }
        Ok(out)
    }
}

fn included_of(h: &Hit) -> Included {
    Included {
        id: h.memory.id,
        norm: text::normalize_text(&h.memory.content),
        tokens: text::token_hashes(&h.memory.content),
    }
}

fn decision(
    h: &Hit,
    included: bool,
    decision: &'static str,
    reason: String,
    tokens: usize,
) -> PackDecision {
    PackDecision {
        id: h.memory.id.to_string(),
        included,
        decision,
        reason,
        tokens,
        score: h.score,
        conflict_with: Vec::new(),
    }
}

/// An exclusion if `h` duplicates (exactly, or nearly) an included item.
fn duplicate(
    h: &Hit,
    included: &[Included],
    threshold: f32,
    tokens: usize,
) -> Option<PackDecision> {
    let norm = text::normalize_text(&h.memory.content);
    if let Some(dup) = included.iter().find(|i| i.norm == norm) {
        return Some(decision(
            h,
            false,
            "duplicate",
            format!("duplicate of {}", dup.id),
            tokens,
        ));
    }
    let set = text::token_hashes(&h.memory.content);
    // Jaccard ≤ min(|a|, |b|) / max(|a|, |b|): skip pairs whose sizes rule it out.
    let size_ok = |n: usize| {
        let (lo, hi) = (n.min(set.len()), n.max(set.len()));
        hi == 0 || lo as f32 >= threshold * hi as f32
    };
    let (best, j) = included
        .iter()
        .filter(|i| size_ok(i.tokens.len()))
        .map(|i| (i, text::jaccard_sorted(&set, &i.tokens)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (j >= threshold).then(|| {
        decision(
            h,
            false,
            "near-duplicate",
            format!(
                "near-duplicate of {} (token-set Jaccard {j:.2} ≥ {threshold})",
                best.id
            ),
            tokens,
        )
    })
}
