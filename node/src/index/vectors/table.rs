//! The vector table: every stored vector of the index in memory, in slots,
//! with the access terms each is found under. Pure data and search; the
//! index module loads, catches up and persists it.
//!
//! A search is restricted to a set of slots *before* any slot is compared:
//! each access term keeps a posting of its slots with their sign codes
//! packed alongside, and a search reads only its requester's terms'
//! postings (each slot once), so a vector the requester may not see never
//! takes a candidate place, and the search reads the codes it may consider
//! in order instead of picking them out of the whole table. It then
//! narrows those slots in [`stages`] (sign codes by Hamming
//! distance, then by the query's dot product with the signs) and scores
//! what is left by the int8 rows ([`quantize::nearest`]); with no more
//! allowed slots than the last stage keeps, every one is scored and the
//! answer is exact.
//!
//! Must never: decide visibility (the terms are the index's record of what
//! the store said; the recall pipeline re-reads and gates every id), or
//! depend on slot numbers for an answer (slots die and are compacted; results
//! are ordered by similarity, then memory id).

use std::collections::{BTreeMap, HashMap};

use amos_protocol::MemoryId;
use roaring::RoaringBitmap;

use super::quantize::{self, CodeList, Quantized, Query, Slots, Stages};

/// What a search for `limit` keeps at each stage: the `by_sign` it scores
/// exactly by their rows, chosen from the `by_code` nearest by sign codes.
pub fn stages(limit: usize) -> Stages {
    let by_sign = limit.saturating_mul(16).max(512);
    Stages {
        by_code: by_sign.saturating_mul(8).max(4096),
        by_sign,
    }
}

/// Every stored vector, in slots.
#[derive(Debug, Clone)]
pub struct VectorTable {
    dim: usize,
    words: usize,
    /// Slot → memory (a dead slot keeps its last id; it is not in `live`).
    ids: Vec<MemoryId>,
    scales: Vec<f32>,
    codes: Vec<u64>,
    rows: Vec<i8>,
    live: SlotSet,
    /// Access term → the slots stored under it, with their sign codes
    /// packed alongside: a search reads only its requester's codes, in
    /// order. Append-only: a dead slot stays until the table is compacted
    /// and is skipped by its `live` bit.
    postings: BTreeMap<String, Posting>,
    /// Slots below this came from a snapshot, in memory-id order: found by
    /// binary search, so a loaded table needs no map of them.
    base: usize,
    /// Memory → slot for the live slots from `base` on.
    added: HashMap<MemoryId, u32>,
}

/// The slots stored under one access term, and their sign codes.
#[derive(Debug, Clone, Default)]
struct Posting {
    slots: Vec<u32>,
    codes: Vec<u64>,
}

/// A set of slots, one bit each.
#[derive(Debug, Clone, Default)]
struct SlotSet {
    bits: Vec<u64>,
    len: u64,
}

impl SlotSet {
    fn insert(&mut self, slot: u32) {
        let (w, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        if self.bits.len() <= w {
            self.bits.resize(w + 1, 0);
        }
        if self.bits[w] & bit == 0 {
            self.bits[w] |= bit;
            self.len += 1;
        }
    }

    fn remove(&mut self, slot: u32) {
        let (w, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        if let Some(word) = self.bits.get_mut(w)
            && *word & bit != 0
        {
            *word &= !bit;
            self.len -= 1;
        }
    }

    fn contains(&self, slot: u32) -> bool {
        self.bits
            .get(slot as usize / 64)
            .is_some_and(|w| w >> (slot % 64) & 1 == 1)
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.bits.iter().enumerate().flat_map(|(w, word)| {
            let mut x = *word;
            std::iter::from_fn(move || {
                (x != 0).then(|| {
                    let b = x.trailing_zeros();
                    x &= x - 1;
                    w as u32 * 64 + b
                })
            })
        })
    }

    /// One bit per slot below `slots`, set where the slot is *not* in the
    /// set: what a search must skip.
    fn complement(&self, slots: usize) -> Vec<u64> {
        let mut out = vec![u64::MAX; slots.div_ceil(64)];
        for (o, w) in out.iter_mut().zip(&self.bits) {
            *o = !w;
        }
        out
    }
}

/// The parts of a table, as a snapshot holds them: live slots only.
#[derive(Debug, Clone, PartialEq)]
pub struct TableParts {
    pub dim: usize,
    pub ids: Vec<MemoryId>,
    pub scales: Vec<f32>,
    pub codes: Vec<u64>,
    pub rows: Vec<i8>,
    pub access: BTreeMap<String, RoaringBitmap>,
}

impl VectorTable {
    /// An empty table of `dim`-dimensional vectors.
    pub fn new(dim: usize) -> VectorTable {
        VectorTable {
            dim,
            words: quantize::code_words(dim),
            ids: Vec::new(),
            scales: Vec::new(),
            codes: Vec::new(),
            rows: Vec::new(),
            live: SlotSet::default(),
            postings: BTreeMap::new(),
            base: 0,
            added: HashMap::new(),
        }
    }

    /// A table from a snapshot's parts, whose lengths the snapshot checked.
    pub fn from_parts(parts: TableParts) -> VectorTable {
        let n = parts.ids.len() as u32;
        let words = quantize::code_words(parts.dim);
        let mut live = SlotSet::default();
        for slot in 0..n {
            live.insert(slot);
        }
        let postings = parts
            .access
            .iter()
            .map(|(term, bitmap)| {
                let mut p = Posting {
                    slots: Vec::with_capacity(bitmap.len() as usize),
                    codes: Vec::with_capacity(bitmap.len() as usize * words),
                };
                for slot in bitmap.iter().filter(|s| *s < n) {
                    let s = slot as usize;
                    p.slots.push(slot);
                    p.codes
                        .extend_from_slice(&parts.codes[s * words..(s + 1) * words]);
                }
                (term.clone(), p)
            })
            .collect();
        VectorTable {
            words,
            dim: parts.dim,
            ids: parts.ids,
            scales: parts.scales,
            codes: parts.codes,
            rows: parts.rows,
            live,
            postings,
            base: n as usize,
            added: HashMap::new(),
        }
    }

    /// The live vectors, in memory-id order (the same content gives the
    /// same parts, whatever the history of slots).
    pub fn to_parts(&self) -> TableParts {
        let mut slots: Vec<u32> = self.live.iter().collect();
        slots.sort_by_key(|s| self.ids[*s as usize]);
        let mut renumber = HashMap::with_capacity(slots.len());
        let mut parts = TableParts {
            dim: self.dim,
            ids: Vec::with_capacity(slots.len()),
            scales: Vec::with_capacity(slots.len()),
            codes: Vec::with_capacity(slots.len() * self.words),
            rows: Vec::with_capacity(slots.len() * self.dim),
            access: BTreeMap::new(),
        };
        for (new, slot) in slots.iter().enumerate() {
            let s = *slot as usize;
            renumber.insert(*slot, new as u32);
            parts.ids.push(self.ids[s]);
            parts.scales.push(self.scales[s]);
            parts
                .codes
                .extend_from_slice(&self.codes[s * self.words..(s + 1) * self.words]);
            parts
                .rows
                .extend_from_slice(&self.rows[s * self.dim..(s + 1) * self.dim]);
        }
        for (term, posting) in &self.postings {
            let renumbered: RoaringBitmap = posting
                .slots
                .iter()
                .filter_map(|s| renumber.get(s).copied())
                .collect();
            if !renumbered.is_empty() {
                parts.access.insert(term.clone(), renumbered);
            }
        }
        parts
    }

    /// The dimension of the vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Live vectors.
    pub fn len(&self) -> u64 {
        self.live.len
    }

    /// Whether no vector is stored.
    pub fn is_empty(&self) -> bool {
        self.live.len == 0
    }

    /// Memory `id`'s live slot.
    fn slot_of(&self, id: &MemoryId) -> Option<u32> {
        if let Some(slot) = self.added.get(id) {
            return Some(*slot);
        }
        let slot = self.ids[..self.base].binary_search(id).ok()? as u32;
        self.live.contains(slot).then_some(slot)
    }

    /// Store `vector` as memory `id`'s, found under `terms` (replacing what
    /// the table held for it). A slot is never reused: a replaced or
    /// removed vector's slot is dead until the table is compacted, once
    /// dead slots outnumber live ones.
    pub fn upsert(&mut self, id: MemoryId, vector: Quantized, terms: &[String]) {
        debug_assert_eq!(vector.row.len(), self.dim);
        self.remove(&id);
        let slot = self.ids.len() as u32;
        self.ids.push(id);
        self.scales.push(vector.scale);
        self.codes.extend_from_slice(&vector.code);
        self.rows.extend_from_slice(&vector.row);
        self.live.insert(slot);
        let mut terms: Vec<&String> = terms.iter().collect();
        terms.sort_unstable();
        terms.dedup();
        for term in terms {
            let p = self.postings.entry(term.clone()).or_default();
            p.slots.push(slot);
            p.codes.extend_from_slice(&vector.code);
        }
        self.added.insert(id, slot);
        if self.ids.len() as u64 > 2 * self.live.len + 4096 {
            *self = VectorTable::from_parts(self.to_parts());
        }
    }

    /// Forget memory `id`'s vector; whether there was one. Its slot stays
    /// in the postings, dead (skipped by every search), until compaction.
    pub fn remove(&mut self, id: &MemoryId) -> bool {
        let Some(slot) = self.slot_of(id) else {
            return false;
        };
        self.added.remove(id);
        self.live.remove(slot);
        true
    }

    /// The `limit` vectors a requester holding access `terms` may be shown
    /// (`None`: every live one, for the local admin) nearest to `query`,
    /// with their cosine similarity, nearest first (ties by memory id).
    /// Only the terms' own slots are ever compared: a vector the requester
    /// may not see never takes a candidate place.
    pub fn nearest(
        &self,
        query: &Query,
        terms: Option<&[String]>,
        limit: usize,
    ) -> Vec<(MemoryId, f32)> {
        self.nearest_in(query, terms, limit, stages(limit))
    }

    /// [`nearest`](Self::nearest) with every allowed vector scored by its
    /// row: the exact answer the stages approximate (for measuring them).
    pub fn nearest_exact(
        &self,
        query: &Query,
        terms: Option<&[String]>,
        limit: usize,
    ) -> Vec<(MemoryId, f32)> {
        let all = Stages {
            by_code: usize::MAX,
            by_sign: usize::MAX,
        };
        self.nearest_in(query, terms, limit, all)
    }

    fn nearest_in(
        &self,
        query: &Query,
        terms: Option<&[String]>,
        limit: usize,
        stages: Stages,
    ) -> Vec<(MemoryId, f32)> {
        if limit == 0 || self.is_empty() || query.dim() != self.dim {
            return Vec::new();
        }
        let lists: Vec<CodeList<'_>> = match terms {
            None => vec![CodeList {
                slots: None,
                codes: &self.codes,
            }],
            Some(terms) => {
                let mut terms: Vec<&String> = terms.iter().collect();
                terms.sort_unstable();
                terms.dedup();
                terms
                    .into_iter()
                    .filter_map(|t| self.postings.get(t))
                    .map(|p| CodeList {
                        slots: Some(&p.slots),
                        codes: &p.codes,
                    })
                    .collect()
            }
        };
        if lists.is_empty() {
            return Vec::new();
        }
        let store = Slots {
            dim: self.dim,
            rows: &self.rows,
            scales: &self.scales,
        };
        // Dead slots are skipped; so is a slot already seen under another
        // of the requester's terms.
        let mut skip = self.live.complement(self.ids.len());
        let near = quantize::nearest(store, query, &lists, &mut skip, stages);
        let mut scored: Vec<(MemoryId, f32)> = near
            .into_iter()
            .map(|(slot, similarity)| (self.ids[slot as usize], similarity))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        scored.truncate(limit);
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u8) -> MemoryId {
        MemoryId([n; 16])
    }

    fn vector(seed: u64, dim: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..dim)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn terms(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    /// One operation on a table: store memory `n` (vector seed, visible
    /// under "team" or only its owner), or remove it.
    #[derive(Debug, Clone)]
    enum Op {
        Upsert(u8, u64, bool),
        Remove(u8),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                3 => (0u8..40, any::<u64>(), any::<bool>()).prop_map(|(n, s, t)| Op::Upsert(n, s, t)),
                1 => (0u8..40).prop_map(Op::Remove),
            ],
            0..120,
        )
    }

    fn run(ops: &[Op], dim: usize) -> VectorTable {
        let mut table = VectorTable::new(dim);
        for op in ops {
            match op {
                Op::Upsert(n, seed, team) => {
                    let t = if *team {
                        terms(&["team:a", "owner"])
                    } else {
                        terms(&["owner"])
                    };
                    table.upsert(id(*n), quantize::quantize(&vector(*seed, dim)).unwrap(), &t);
                }
                Op::Remove(n) => {
                    table.remove(&id(*n));
                }
            }
        }
        table
    }

    proptest! {
        /// Whatever the history, a search answers only from the allowed
        /// terms' live memories, and exactly as a table built afresh from
        /// the surviving memories (and one loaded from its parts) does.
        #[test]
        fn answers_depend_on_content_not_history(ops in ops(), qseed in any::<u64>(), limit in 1usize..30) {
            let dim = 24;
            let table = run(&ops, dim);
            // The surviving memories, replayed in id order into a new table.
            let mut last: BTreeMap<u8, Option<(u64, bool)>> = BTreeMap::new();
            for op in &ops {
                match op {
                    Op::Upsert(n, s, t) => { last.insert(*n, Some((*s, *t))); }
                    Op::Remove(n) => { last.insert(*n, None); }
                }
            }
            let fresh_ops: Vec<Op> = last.iter().filter_map(|(n, v)| v.map(|(s, t)| Op::Upsert(*n, s, t))).collect();
            let fresh = run(&fresh_ops, dim);
            let loaded = VectorTable::from_parts(table.to_parts());
            prop_assert_eq!(table.to_parts(), fresh.to_parts());
            let q = quantize::query(&vector(qseed, dim)).unwrap();
            // A requester under both terms sees a team memory once.
            for who in [Some(terms(&["team:a"])), Some(terms(&["owner"])), Some(terms(&["team:a", "owner", "team:a"])), None] {
                let got = table.nearest(&q, who.as_deref(), limit);
                prop_assert_eq!(&got, &fresh.nearest(&q, who.as_deref(), limit));
                prop_assert_eq!(&got, &loaded.nearest(&q, who.as_deref(), limit));
                let mut ids: Vec<_> = got.iter().map(|g| g.0).collect();
                ids.sort_unstable();
                ids.dedup();
                prop_assert_eq!(ids.len(), got.len(), "a memory came back twice");
                if who.as_deref() == Some(&terms(&["team:a"])[..]) {
                    for (m, _) in &got {
                        prop_assert!(matches!(last.get(&m.0[0]), Some(Some((_, true)))), "not shared with the team");
                    }
                }
            }
        }
    }

    /// A memory outside the allowed set never takes a place, even when it
    /// is the query itself.
    #[test]
    fn a_hidden_vector_never_takes_a_place() {
        let dim = 32;
        let mut table = VectorTable::new(dim);
        let q = vector(7, dim);
        table.upsert(id(1), quantize::quantize(&q).unwrap(), &terms(&["private"]));
        for n in 2..=60 {
            table.upsert(
                id(n),
                quantize::quantize(&vector(n as u64, dim)).unwrap(),
                &terms(&["team:a"]),
            );
        }
        let query = quantize::query(&q).unwrap();
        let all = table.nearest(&query, None, 5);
        assert_eq!(all[0].0, id(1));
        let team = table.nearest(&query, Some(&terms(&["team:a"])), 5);
        assert_eq!(team.len(), 5);
        assert!(team.iter().all(|(m, _)| *m != id(1)));
        assert!(
            table
                .nearest(&query, Some(&terms(&["nobody"])), 5)
                .is_empty()
        );
    }

    /// Past the stages' bounds the sign codes choose what is scored; the
    /// exact nearest still come back (here: the query's own near copies).
    #[test]
    fn past_the_rescoring_bound_the_nearest_still_come_back() {
        let dim = 64;
        let mut table = VectorTable::new(dim);
        let q = vector(1, dim);
        for n in 0..12_000u32 {
            let mut m = MemoryId([0; 16]);
            m.0[..4].copy_from_slice(&n.to_be_bytes());
            let v = if n % 2400 == 0 {
                q.iter()
                    .enumerate()
                    .map(|(i, x)| x + 0.01 * ((i + n as usize) % 3) as f32)
                    .collect()
            } else {
                vector(u64::from(n) + 10, dim)
            };
            table.upsert(m, quantize::quantize(&v).unwrap(), &terms(&["t"]));
        }
        let hits = table.nearest(&quantize::query(&q).unwrap(), None, 5);
        let near: Vec<u32> = hits
            .iter()
            .map(|(m, _)| u32::from_be_bytes([m.0[0], m.0[1], m.0[2], m.0[3]]))
            .collect();
        let mut sorted = near.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 2400, 4800, 7200, 9600]);
    }
}
