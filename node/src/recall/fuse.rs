//! Which candidates a recall draws on, and how the lexical and semantic
//! lists become one relevance (docs/recall.md, "Modes").
//!
//! * `lexical`: BM25 from the full-text index; relevance = BM25.
//! * `semantic`: the nearest vectors; relevance = cosine similarity.
//! * `hybrid` (the default): both lists, fused by a convex combination of
//!   the scores, each scaled to the list's best visible candidate:
//!   `0.4 × bm25 / best_bm25 + 0.6 × (cos − floor) / (best_cos − floor)`
//!   ([`LEXICAL_WEIGHT`]; the floor is the model's, [`MIN_SIMILARITY`]
//!   where it names none). So relevance is in [0, 1],
//!   1 only for a memory best in both lists. (Reciprocal-rank fusion was
//!   tried first and measured worse on the golden set: a long tail of weak
//!   matches in both lists outranked a strong match in one; see
//!   docs/recall.md.)
//!
//! Invariant: ranks are counted over *visible* candidates only — the
//! caller passes the gate's verdict — so a memory the requester cannot see
//! never moves another one's rank, let alone its own into the output.
//!
//! Boundary: pure arithmetic over ids and scores; no store, no index.

use std::collections::HashMap;

use amos_protocol::MemoryId;
use serde::Serialize;

/// The lexical share of a `fast` relevance (the static vectors' share is
/// the rest).
pub const LEXICAL_WEIGHT: f32 = 0.4;

/// `hybrid`: how much lexical evidence adds to the encoder's similarity:
/// relevance = cos + `ENCODER_LEXICAL_WEIGHT` × bm25 / (bm25 + [`BM25_HALF`]).
/// Tuned on the tuning part of node/eval/deep (docs/recall.md, "Fusion").
pub const ENCODER_LEXICAL_WEIGHT: f32 = 0.1;

/// The BM25 at which lexical evidence counts half (it saturates: a long
/// list of word matches cannot outvote the encoder).
pub const BM25_HALF: f32 = 20.0;

/// `hybrid` for a question written mostly in Chinese, Japanese or Korean,
/// which the English encoder does not read: relevance = bm25 / (bm25 +
/// [`CJK_BM25_HALF`]) + [`CJK_ENCODER_WEIGHT`] × cos.
pub const CJK_BM25_HALF: f32 = 5.0;
pub const CJK_ENCODER_WEIGHT: f32 = 0.1;

/// In the encoder's modes (`hybrid`, `semantic`) a candidate whose relevance
/// is below this is dropped: an unrelated question gets few memories or
/// none, instead of the best of a bad lot (tuned with the fusion).
pub const RELEVANCE_FLOOR: f32 = 0.25;

/// A semantic candidate below the model's cosine floor is not a candidate
/// at all: the nearest vectors of a store always exist, but an unrelated
/// memory should not answer a query just because nothing closer was there.
/// The floor belongs to the model (`min_similarity` in its `config.json`;
/// the built-in model's is 0.17); this one is for a model that names none.
pub const MIN_SIMILARITY: f32 = 0.25;

/// The cosine floor of the encoder's candidates (all-MiniLM-L6-v2's
/// similarity of unrelated English sentences is mostly below it).
pub const ENCODER_FLOOR: f32 = 0.2;

/// A static-model similarity `s` (floor `static_floor`) on the encoder's
/// scale, for a memory the encoder has not encoded yet: the two floors
/// meet and 1 stays 1, linearly between.
pub fn static_on_encoder_scale(s: f32, static_floor: f32) -> f32 {
    let span = (1.0 - static_floor).max(f32::EPSILON);
    ENCODER_FLOOR + (s - static_floor) * (1.0 - ENCODER_FLOOR) / span
}

/// The cosine floor of semantic candidates under `model`.
pub fn floor_of(model: &amos_embed::StaticModel) -> f32 {
    model.min_similarity().unwrap_or(MIN_SIMILARITY)
}

/// Which candidates a recall draws on (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecallMode {
    /// Lexical candidates fused with the encoder's (static vectors for the
    /// memories it has not encoded yet).
    #[default]
    Hybrid,
    /// BM25 alone.
    Lexical,
    /// The encoder's nearest vectors alone (static for pending memories).
    Semantic,
    /// Lexical fused with the static model's vectors: no encoder at query
    /// time (the hybrid of releases before the encoder).
    Fast,
}

impl RecallMode {
    /// Every mode, in the order reports list them.
    pub const ALL: [RecallMode; 4] = [
        RecallMode::Hybrid,
        RecallMode::Lexical,
        RecallMode::Semantic,
        RecallMode::Fast,
    ];

    /// The name `--mode` and MCP take.
    pub fn as_str(self) -> &'static str {
        match self {
            RecallMode::Hybrid => "hybrid",
            RecallMode::Lexical => "lexical",
            RecallMode::Semantic => "semantic",
            RecallMode::Fast => "fast",
        }
    }

    /// Parse `hybrid`, `lexical`, `semantic` or `fast`.
    pub fn parse(s: &str) -> Option<RecallMode> {
        RecallMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether BM25 candidates count.
    pub fn lexical(self) -> bool {
        self != RecallMode::Semantic
    }

    /// Whether vector candidates count (static, encoder or both).
    pub fn semantic(self) -> bool {
        self != RecallMode::Lexical
    }

    /// Whether the encoder's vectors are asked (with the static ones of the
    /// memories it has not encoded yet).
    pub fn encoder(self) -> bool {
        matches!(self, RecallMode::Hybrid | RecallMode::Semantic)
    }

    /// The relevance below which a candidate is dropped (the encoder's
    /// modes; the others keep every candidate, as before the encoder).
    pub fn relevance_floor(self) -> Option<f32> {
        self.encoder().then_some(RELEVANCE_FLOOR)
    }
}

impl std::fmt::Display for RecallMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A memory's direct relevance to the query, with its parts (what
/// `--explain` shows).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Direct {
    /// What the score uses: BM25 (lexical), cosine (semantic) or the
    /// fusion of both (hybrid).
    #[serde(rename = "direct")]
    pub relevance: f32,
    /// BM25 from the index (0 when the index did not find it, or only
    /// resonance did).
    pub bm25: f32,
    /// Its place among the visible lexical candidates (1 = first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    /// Cosine similarity of its vector and the query's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic: Option<f32>,
    /// Its place among the visible semantic candidates (1 = first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_rank: Option<usize>,
    /// The relevance a candidate needed to be kept, in the modes that have
    /// one ([`RecallMode::relevance_floor`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<f32>,
}

/// Fuse the `lexical` (BM25) and `semantic` (cosine) candidate lists, each
/// best first, into each visible candidate's [`Direct`] relevance under
/// `mode`. Candidates `visible` refuses are skipped before ranks are
/// counted; semantic ones below `floor` (the model's, [`floor_of`]) are no
/// candidates. (Tests call it; search knows the question's script.)
#[cfg(test)]
pub fn fuse(
    mode: RecallMode,
    lexical: &[(MemoryId, f32)],
    semantic: &[(MemoryId, f32)],
    floor: f32,
    visible: impl Fn(&MemoryId) -> bool,
) -> HashMap<MemoryId, Direct> {
    fuse_for(mode, false, lexical, semantic, floor, visible)
}

/// [`fuse`] for a question written mostly in CJK scripts or not
/// ([`crate::index::mostly_cjk`]) (`hybrid` then
/// leans on the words, not the English encoder).
pub fn fuse_for(
    mode: RecallMode,
    cjk: bool,
    lexical: &[(MemoryId, f32)],
    semantic: &[(MemoryId, f32)],
    floor: f32,
    visible: impl Fn(&MemoryId) -> bool,
) -> HashMap<MemoryId, Direct> {
    let mut out: HashMap<MemoryId, Direct> = HashMap::new();
    if mode.lexical() {
        for (rank, (id, bm25)) in lexical.iter().filter(|(id, _)| visible(id)).enumerate() {
            let d = out.entry(*id).or_default();
            d.bm25 = *bm25;
            d.lexical_rank = Some(rank + 1);
        }
    }
    if mode.semantic() {
        let near = semantic
            .iter()
            .filter(|(id, sim)| *sim >= floor && visible(id));
        for (rank, (id, sim)) in near.enumerate() {
            let d = out.entry(*id).or_default();
            d.semantic = Some(*sim);
            d.semantic_rank = Some(rank + 1);
        }
    }
    // Each list's scores scaled to its best visible candidate, then mixed.
    let top_bm25 = out.values().map(|d| d.bm25).fold(0.0f32, f32::max);
    let top_cosine = out
        .values()
        .filter_map(|d| d.semantic)
        .fold(floor, f32::max);
    for d in out.values_mut() {
        let lexical = match top_bm25 > 0.0 {
            true => d.bm25 / top_bm25,
            false => 0.0,
        };
        let semantic = d.semantic.map_or(0.0, |c| {
            ((c - floor) / (top_cosine - floor).max(f32::EPSILON)).max(0.0)
        });
        let cos = d.semantic.unwrap_or(0.0).max(0.0);
        let bm25 = d.bm25.max(0.0);
        d.relevance = match mode {
            RecallMode::Lexical => d.bm25,
            RecallMode::Semantic => cos,
            RecallMode::Hybrid if cjk => bm25 / (bm25 + CJK_BM25_HALF) + CJK_ENCODER_WEIGHT * cos,
            RecallMode::Hybrid => cos + ENCODER_LEXICAL_WEIGHT * bm25 / (bm25 + BM25_HALF),
            RecallMode::Fast => LEXICAL_WEIGHT * lexical + (1.0 - LEXICAL_WEIGHT) * semantic,
        };
        d.floor = mode.relevance_floor();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> MemoryId {
        MemoryId([n; 16])
    }

    #[test]
    fn hybrid_rewards_agreement_and_lexical_keeps_bm25() {
        let lex = [(id(1), 9.0), (id(2), 5.0)];
        let sem = [(id(2), 0.9), (id(3), 0.8)];
        let h = fuse(RecallMode::Fast, &lex, &sem, MIN_SIMILARITY, |_| true);
        assert!((h[&id(1)].relevance - LEXICAL_WEIGHT).abs() < 1e-6);
        assert!(
            h[&id(2)].relevance > h[&id(1)].relevance,
            "in both lists beats first in one"
        );
        assert!(h[&id(2)].relevance <= 1.0);
        assert_eq!(h[&id(3)].semantic_rank, Some(2));
        let l = fuse(RecallMode::Lexical, &lex, &sem, MIN_SIMILARITY, |_| true);
        assert_eq!(l.len(), 2);
        assert_eq!(l[&id(1)].relevance, 9.0);
        let s = fuse(RecallMode::Semantic, &lex, &sem, MIN_SIMILARITY, |_| true);
        assert_eq!(s.len(), 2);
        assert!((s[&id(2)].relevance - 0.9).abs() < 1e-6);
    }

    #[test]
    fn hybrid_adds_saturating_word_evidence_to_the_encoders_similarity() {
        let lex = [(id(1), 20.0), (id(2), 2000.0)];
        let sem = [(id(1), 0.5), (id(3), 0.54)];
        let h = fuse(RecallMode::Hybrid, &lex, &sem, 0.2, |_| true);
        assert!((h[&id(1)].relevance - (0.5 + ENCODER_LEXICAL_WEIGHT * 0.5)).abs() < 1e-6);
        // Any number of word matches adds at most the weight: a memory the
        // encoder finds no nearer is not outvoted by words alone.
        assert!(h[&id(2)].relevance <= ENCODER_LEXICAL_WEIGHT);
        assert!(h[&id(1)].relevance > h[&id(3)].relevance);
        // A question in Japanese leans on its words instead.
        let j = fuse_for(RecallMode::Hybrid, true, &lex, &sem, 0.2, |_| true);
        assert!(j[&id(2)].relevance > j[&id(3)].relevance);
    }

    #[test]
    fn a_hidden_candidate_moves_no_rank() {
        let hidden = id(9);
        let lex = [(hidden, 20.0), (id(1), 9.0), (id(2), 5.0)];
        let sem = [(hidden, 0.99), (id(2), 0.9)];
        let with = fuse(RecallMode::Hybrid, &lex, &sem, MIN_SIMILARITY, |m| {
            *m != hidden
        });
        let without = fuse(
            RecallMode::Hybrid,
            &lex[1..],
            &sem[1..],
            MIN_SIMILARITY,
            |_| true,
        );
        assert_eq!(with, without);
        assert!(!with.contains_key(&hidden));
    }

    proptest::proptest! {
        /// The gate's half of fusion: whatever hidden candidates either list
        /// holds, and wherever they sit, the visible ones fuse exactly as if
        /// the hidden ones had never been there, in every mode.
        #[test]
        fn hidden_candidates_never_shift_the_visible_ones(
            lexical in proptest::collection::vec((0u8..40, 0.0f32..30.0), 0..30),
            semantic in proptest::collection::vec((0u8..40, -1.0f32..1.0), 0..30),
            hidden in proptest::collection::btree_set(0u8..40, 0..20),
        ) {
            let sorted = |mut l: Vec<(u8, f32)>| {
                l.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                l.dedup_by_key(|x| x.0);
                l.into_iter().map(|(n, s)| (id(n), s)).collect::<Vec<_>>()
            };
            let (lexical, semantic) = (sorted(lexical), sorted(semantic));
            let is_hidden = |m: &MemoryId| hidden.contains(&m.0[0]);
            for mode in RecallMode::ALL {
                let gated = fuse(mode, &lexical, &semantic, MIN_SIMILARITY, |m| !is_hidden(m));
                let keep = |l: &[(MemoryId, f32)]| {
                    l.iter().copied().filter(|(m, _)| !is_hidden(m)).collect::<Vec<_>>()
                };
                let never_there = fuse(mode, &keep(&lexical), &keep(&semantic), MIN_SIMILARITY, |_| true);
                proptest::prop_assert_eq!(&gated, &never_there);
                proptest::prop_assert!(gated.keys().all(|m| !is_hidden(m)));
            }
        }
    }

    #[test]
    fn far_vectors_are_no_candidates() {
        let sem = [(id(1), MIN_SIMILARITY - 0.01)];
        assert!(fuse(RecallMode::Semantic, &[], &sem, MIN_SIMILARITY, |_| true).is_empty());
        // The floor is the one given: a lower one lets it in.
        let lower = fuse(
            RecallMode::Semantic,
            &[],
            &sem,
            MIN_SIMILARITY - 0.1,
            |_| true,
        );
        assert_eq!(lower[&id(1)].semantic_rank, Some(1));
    }
}
