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

use amos_protocol::MemoryId;
use serde::Serialize;

use super::Hit;
use super::rank::RecallOptions;
use super::similarity::{self as text, NEAR_DUPLICATE};

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
    /// Token budget of the pack (tokens estimated by [`estimate_tokens`]).
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
    /// Defaults for a pack of `budget` tokens.
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
    /// The candidate memory's id.
    pub id: String,
    /// Whether it went into the pack.
    pub included: bool,
    /// `pinned`, `relevant`, `duplicate`, `near-duplicate`, `over-budget`
    /// or `reserve-full`.
    pub decision: &'static str,
    /// The decision in words, for `--report`.
    pub reason: String,
    /// Its estimated tokens.
    pub tokens: usize,
    /// Its recall score.
    pub score: f32,
    /// Included items this one contradicts (CONFLICT).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflict_with: Vec<String>,
}

/// Two included items that state different values for the same subject.
#[derive(Debug, Clone, Serialize)]
pub struct Conflict {
    /// One item's id.
    pub a: String,
    /// The other item's id.
    pub b: String,
    /// The subject both give a value for.
    pub subject: String,
}

/// A token-budgeted context pack.
#[derive(Debug, Clone)]
pub struct Pack {
    /// The included memories, pinned first, then by score.
    pub items: Vec<Hit>,
    /// Tokens the items take (at most the budget).
    pub tokens: usize,
    /// The budget asked for.
    pub budget: usize,
    /// Tokens reserved for pinned memories.
    pub reserved: usize,
    /// Every candidate's decision, in the order considered.
    pub report: Vec<PackDecision>,
    /// Included pairs that contradict each other (CONFLICT).
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

/// What the duplicate checks compare of a text, computed once per
/// candidate: its normalised form (exact duplicates) and its hashed token
/// set (near duplicates).
pub(crate) struct Fingerprint {
    norm: String,
    tokens: Vec<u64>,
}

impl Fingerprint {
    pub(crate) fn of(text: &str) -> Fingerprint {
        Fingerprint {
            norm: text::normalize_text(text),
            tokens: text::token_hashes(text),
        }
    }
}

/// An item in the pack, as later candidates are compared with it.
pub(crate) struct Included {
    id: MemoryId,
    print: Fingerprint,
}

pub(crate) fn included_of(h: &Hit, print: Fingerprint) -> Included {
    Included {
        id: h.memory.id,
        print,
    }
}

pub(crate) fn decision(
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

/// An exclusion if `h` (whose text has fingerprint `print`) duplicates
/// (exactly, or nearly) an included item.
pub(crate) fn duplicate(
    h: &Hit,
    print: &Fingerprint,
    included: &[Included],
    threshold: f32,
    tokens: usize,
) -> Option<PackDecision> {
    if let Some(dup) = included.iter().find(|i| i.print.norm == print.norm) {
        return Some(decision(
            h,
            false,
            "duplicate",
            format!("duplicate of {}", dup.id),
            tokens,
        ));
    }
    let (best, j) = included
        .iter()
        .filter_map(|i| {
            let j = text::jaccard_at_least(&print.tokens, &i.print.tokens, threshold)?;
            Some((i, j))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(decision(
        h,
        false,
        "near-duplicate",
        format!(
            "near-duplicate of {} (token-set Jaccard {j:.2} ≥ {threshold})",
            best.id
        ),
        tokens,
    ))
}
