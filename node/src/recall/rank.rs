//! Ranking: the score of one visible memory and the explanation of every
//! factor in it.
//!
//! `score = relevance × importance × confidence × freshness × reinforcement
//! × profile weight`, where freshness is `0.5^(age / half-life)` (age since the
//! last content edit; pinned memories never decay) floored at
//! [`FRESHNESS_FLOOR`], and the profile weight is the requester's weight for
//! the memory's type (1 when it has none).
//!
//! Boundary: pure arithmetic over a [`Visible`] memory; it never decides who
//! sees what, and a weight can only reorder what the gate already admitted.

use amos_acl::Visible;
use serde::Serialize;

use crate::recall::fuse::{Direct, RecallMode};
use crate::store::memory::MemoryRecord;
use crate::store::profile::ProfileWeights;

/// One day in milliseconds.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// The default freshness half-life: 30 days (`--half-life` / `AMOS_HALF_LIFE`).
pub const DEFAULT_HALF_LIFE_MS: u64 = 30 * DAY_MS;
/// Freshness never falls below this: old knowledge stays findable when
/// nothing fresher matches, it only loses ties to fresher memories.
pub const FRESHNESS_FLOOR: f32 = 0.001;

/// How resonance spreads from strong candidates over links.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResonanceConfig {
    /// How many of the best direct hits spread (0 turns resonance off).
    pub seeds: usize,
    /// How many links away from a seed a memory may be.
    pub hops: usize,
    /// How many neighbours (the strongest links) each memory spreads to.
    pub fan_out: usize,
    /// Relevance carried over one link: `parent × weight × strength × damping`.
    pub damping: f32,
}

impl Default for ResonanceConfig {
    fn default() -> Self {
        ResonanceConfig {
            seeds: 5,
            hops: 2,
            fan_out: 8,
            damping: 0.5,
        }
    }
}

/// Options of one recall.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallOptions {
    /// How many hits to return.
    pub k: usize,
    /// Freshness half-life in milliseconds (at least one second).
    pub half_life_ms: u64,
    /// How relevance spreads over links to memories sharing no query term.
    pub resonance: ResonanceConfig,
    /// Record the hits as recalled (local `last_access_ms`, for retention).
    pub note_recall: bool,
    /// Time filters (`--since`, `--until`, `--valid-at`, `--known-at`).
    pub time: crate::recall::time::TimeQuery,
    /// Which candidates to draw on (`--mode`).
    pub mode: RecallMode,
}

impl RecallOptions {
    /// The defaults, returning `k` hits.
    pub fn top(k: usize) -> Self {
        RecallOptions {
            k,
            ..RecallOptions::default()
        }
    }
}

impl Default for RecallOptions {
    fn default() -> Self {
        RecallOptions {
            k: 10,
            half_life_ms: DEFAULT_HALF_LIFE_MS,
            resonance: ResonanceConfig::default(),
            note_recall: true,
            time: Default::default(),
            mode: RecallMode::default(),
        }
    }
}

/// How a memory that shares no query term was reached: from `via` (a
/// memory the requester can see) over `hops` links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResonancePath {
    /// The id of the visible memory the path starts from.
    pub via: String,
    /// Links walked.
    pub hops: usize,
    /// `weight × local strength` of the last link.
    pub link: f32,
}

/// Every factor of a score, as `amos search --explain` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explain {
    /// The mode's direct relevance and its lexical and semantic parts
    /// (`direct`, `bm25`, `lexical_rank`, `semantic`, `semantic_rank`).
    #[serde(flatten)]
    pub direct: Direct,
    /// Set when resonance gave more relevance than the index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resonance: Option<ResonancePath>,
    /// The relevance used: the direct one, or resonance's when higher.
    pub relevance: f32,
    /// The memory's signed importance.
    pub importance: f32,
    /// The memory's signed confidence.
    pub confidence: f32,
    /// `0.5^(age / half-life)`, floored; 1 for a pinned memory.
    pub freshness: f32,
    /// Days since the last content edit (or creation).
    pub age_days: f32,
    /// The half-life freshness used, in days.
    pub half_life_days: f32,
    /// Whether the memory is pinned (no decay).
    pub pinned: bool,
    /// Local reinforcement from feedback ([`crate::recall::REINFORCEMENT_RANGE`]).
    pub reinforcement: f32,
    /// The requester's profile weight for the memory's type (1 if none).
    pub profile_weight: f32,
    /// Set when a visible memory replaced this one by the query's time: the
    /// score is then multiplied by `recall::time::SUPERSEDED_FACTOR`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// The product of the factors above.
    pub score: f32,
}

/// Down-weight a memory that `by` replaced (docs/design.md §12).
pub fn supersede(explain: &mut Explain, by: Option<crate::recall::time::Superseder>) {
    if let Some(s) = by {
        explain.superseded_by = Some(s.id.to_string());
        explain.score *= crate::recall::time::SUPERSEDED_FACTOR;
    }
}

/// Freshness of something `age_ms` old: `0.5^(age / half_life)`, floored;
/// 1 for pinned memories.
pub fn freshness(age_ms: u64, half_life_ms: u64, pinned: bool) -> f32 {
    if pinned {
        return 1.0;
    }
    let halves = age_ms as f64 / half_life_ms.max(1) as f64;
    (0.5f64.powf(halves) as f32).max(FRESHNESS_FLOOR)
}

/// The grain of the age that freshness decays by.
pub const DECAY_STEP_MS: u64 = 60 * 60 * 1000;

/// Score one visible memory.
pub fn score(
    m: &Visible<MemoryRecord>,
    direct: &Direct,
    resonance: Option<(f32, ResonancePath)>,
    now_ms: u64,
    half_life_ms: u64,
    profile: &ProfileWeights,
) -> Explain {
    let (relevance, resonance) = match resonance {
        Some((r, path)) if r > direct.relevance => (r, Some(path)),
        _ => (direct.relevance, None),
    };
    let age_ms = now_ms.saturating_sub(m.updated_ms.max(m.created_ms));
    // Decay by whole hours: a half-life of days needs no finer grain, and
    // scores then stay put between two searches a moment apart (with
    // millisecond ages, memories of near-equal score could swap places as
    // rounding moved with the clock).
    let fresh = freshness(age_ms - age_ms % DECAY_STEP_MS, half_life_ms, m.pinned);
    let weight = profile.weight(&m.kind);
    let score = relevance * m.importance * m.confidence * fresh * m.reinforcement * weight;
    Explain {
        direct: *direct,
        resonance,
        relevance,
        importance: m.importance,
        confidence: m.confidence,
        freshness: fresh,
        age_days: age_ms as f32 / DAY_MS as f32,
        half_life_days: half_life_ms as f32 / DAY_MS as f32,
        pinned: m.pinned,
        reinforcement: m.reinforcement,
        profile_weight: weight,
        superseded_by: None,
        score,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_halves_every_half_life_and_pinned_never_decays() {
        let hl = 30 * DAY_MS;
        assert_eq!(freshness(0, hl, false), 1.0);
        assert!((freshness(hl, hl, false) - 0.5).abs() < 1e-6);
        assert!((freshness(2 * hl, hl, false) - 0.25).abs() < 1e-6);
        assert_eq!(freshness(100 * hl, hl, false), FRESHNESS_FLOOR);
        for age in [0, hl, 100 * hl] {
            assert_eq!(freshness(age, hl, true), 1.0);
        }
    }
}
