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
//! Every array is in two parts: the slots the table was loaded with (read
//! where they lie in the snapshot's file, [`Backed`]) and the slots added
//! since, appended in memory. A process that adds a few vectors to a loaded
//! table copies nothing it loaded.
//!
//! Must never: decide visibility (the terms are the index's record of what
//! the store said; the recall pipeline re-reads and gates every id), or
//! depend on slot numbers for an answer (slots die and are compacted; results
//! are ordered by similarity, then memory id).

use std::collections::{BTreeMap, HashMap};

use amos_protocol::MemoryId;
use bytemuck::Pod;

use super::backing::Backed;
use super::image::{Image, ImageTerm, Pieces, TermCodes};
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
    ids: Column<[u8; 16]>,
    scales: Column<f32>,
    codes: Column<u64>,
    rows: Column<i8>,
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

/// One run of `width` values per slot: the loaded slots' (`base`), then
/// those appended since (`tail`).
#[derive(Debug, Clone)]
struct Column<T: Pod> {
    width: usize,
    base: Backed<T>,
    tail: Vec<T>,
}

impl<T: Pod> Column<T> {
    fn new(width: usize, base: Backed<T>) -> Column<T> {
        debug_assert_eq!(base.len() % width.max(1), 0);
        Column {
            width: width.max(1),
            base,
            tail: Vec::new(),
        }
    }

    /// Slots in the loaded part.
    fn base_slots(&self) -> usize {
        self.base.len() / self.width
    }

    /// Slots in all.
    fn slots(&self) -> usize {
        self.base_slots() + self.tail.len() / self.width
    }

    /// Slot `slot`'s run.
    fn get(&self, slot: usize) -> &[T] {
        let w = self.width;
        match slot.checked_sub(self.base_slots()) {
            None => &self.base[slot * w..(slot + 1) * w],
            Some(s) => &self.tail[s * w..(s + 1) * w],
        }
    }

    fn push(&mut self, run: &[T]) {
        debug_assert_eq!(run.len(), self.width);
        self.tail.extend_from_slice(run);
    }

    /// Both parts, in slot order.
    fn parts(&self) -> [&[T]; 2] {
        [&self.base, &self.tail]
    }
}

/// The slots stored under one access term, and their sign codes.
#[derive(Debug, Clone)]
struct Posting {
    slots: Column<u32>,
    codes: Column<u64>,
}

/// A set of slots, one bit each.
#[derive(Debug, Clone, Default)]
struct SlotSet {
    bits: Vec<u64>,
    len: u64,
}

impl SlotSet {
    /// Slots `0..n`.
    fn first(n: usize) -> SlotSet {
        let mut bits = vec![u64::MAX; n / 64];
        if !n.is_multiple_of(64) {
            bits.push((1u64 << (n % 64)) - 1);
        }
        SlotSet {
            bits,
            len: n as u64,
        }
    }

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

/// The parts of a table, as a snapshot holds them: live slots only, in
/// memory-id order.
#[derive(Debug, Clone, PartialEq)]
pub struct TableParts {
    /// Dimensions of every vector.
    pub dim: usize,
    /// The memory id in each slot.
    pub ids: Backed<[u8; 16]>,
    /// Each slot's int8 scale.
    pub scales: Backed<f32>,
    /// `quantize::code_words(dim)` per slot.
    pub codes: Backed<u64>,
    /// `dim` per slot.
    pub rows: Backed<i8>,
    /// Each access term's posting (owner, effective grants).
    pub access: BTreeMap<String, PostingParts>,
}

/// One access term's slots (ascending, each below the table's length) and
/// their codes, as [`TableParts::codes`] holds them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PostingParts {
    /// The slots holding the term, ascending.
    pub slots: Backed<u32>,
    /// Their sign codes, `code_words(dim)` per slot, in slot order.
    pub codes: Backed<u64>,
}

/// A table's live vectors renumbered `0..len` in memory-id order, with
/// each term's vectors in that numbering (see [`VectorTable::image`]).
pub struct Ordered<'a> {
    table: &'a VectorTable,
    /// New number → slot.
    order: Vec<u32>,
    terms: Vec<(&'a str, Vec<u32>)>,
}

/// An array's pieces in one run.
fn gather<T: Pod>(pieces: Pieces<'_, T>) -> Vec<T> {
    pieces.flatten().copied().collect()
}

impl Ordered<'_> {
    fn pieces<'s, T: Pod>(&'s self, column: &'s Column<T>) -> Pieces<'s, T> {
        Box::new(self.order.iter().map(move |s| column.get(*s as usize)))
    }
}

impl Image for Ordered<'_> {
    fn dim(&self) -> usize {
        self.table.dim
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    fn ids(&self) -> Pieces<'_, [u8; 16]> {
        self.pieces(&self.table.ids)
    }

    fn scales(&self) -> Pieces<'_, f32> {
        self.pieces(&self.table.scales)
    }

    fn codes(&self) -> Pieces<'_, u64> {
        self.pieces(&self.table.codes)
    }

    fn rows(&self) -> Pieces<'_, i8> {
        self.pieces(&self.table.rows)
    }

    fn terms(&self) -> Vec<ImageTerm<'_>> {
        self.terms
            .iter()
            .map(|(term, slots)| ImageTerm {
                term,
                slots,
                codes: TermCodes::OfVectors,
            })
            .collect()
    }

    fn code(&self, i: u32) -> &[u64] {
        self.table.codes.get(self.order[i as usize] as usize)
    }
}

impl VectorTable {
    /// An empty table of `dim`-dimensional vectors.
    pub fn new(dim: usize) -> VectorTable {
        let parts = TableParts {
            dim,
            ids: Backed::default(),
            scales: Backed::default(),
            codes: Backed::default(),
            rows: Backed::default(),
            access: BTreeMap::new(),
        };
        VectorTable::from_parts(parts)
    }

    /// A table from a snapshot's parts, whose lengths the snapshot checked.
    /// Nothing is copied: the parts become the table's loaded slots.
    pub fn from_parts(parts: TableParts) -> VectorTable {
        let n = parts.ids.len();
        let words = quantize::code_words(parts.dim);
        let postings = parts
            .access
            .into_iter()
            .map(|(term, p)| {
                let posting = Posting {
                    slots: Column::new(1, p.slots),
                    codes: Column::new(words, p.codes),
                };
                (term, posting)
            })
            .collect();
        VectorTable {
            words,
            dim: parts.dim,
            ids: Column::new(1, parts.ids),
            scales: Column::new(1, parts.scales),
            codes: Column::new(words, parts.codes),
            rows: Column::new(parts.dim, parts.rows),
            live: SlotSet::first(n),
            postings,
            base: n,
            added: HashMap::new(),
        }
    }

    fn id(&self, slot: u32) -> MemoryId {
        MemoryId(self.ids.get(slot as usize)[0])
    }

    /// The live vectors, in memory-id order (the same content gives the
    /// same parts, whatever the history of slots), copied out.
    pub fn to_parts(&self) -> TableParts {
        let image = self.image();
        let ids = gather(image.ids());
        let scales = gather(image.scales());
        let codes = gather(image.codes());
        let rows = gather(image.rows());
        let access = image
            .terms()
            .into_iter()
            .map(|t| {
                let term_codes = t.slots.iter().flat_map(|s| image.code(*s)).copied();
                let p = PostingParts {
                    slots: t.slots.to_vec().into(),
                    codes: Backed::Owned(term_codes.collect()),
                };
                (t.term.to_owned(), p)
            })
            .collect();
        TableParts {
            dim: self.dim,
            ids: ids.into(),
            scales: scales.into(),
            codes: codes.into(),
            rows: rows.into(),
            access,
        }
    }

    /// The live vectors in memory-id order, read where they lie: what a
    /// snapshot is written from without a copy of the table.
    pub fn image(&self) -> Ordered<'_> {
        let mut order: Vec<u32> = self.live.iter().collect();
        order.sort_by_key(|s| self.id(*s));
        let mut renumber = vec![u32::MAX; self.ids.slots()];
        for (new, slot) in order.iter().enumerate() {
            renumber[*slot as usize] = new as u32;
        }
        let terms = self
            .postings
            .iter()
            .filter_map(|(term, posting)| {
                let mut slots: Vec<u32> = posting
                    .slots
                    .parts()
                    .into_iter()
                    .flatten()
                    .map(|s| renumber[*s as usize])
                    .filter(|s| *s != u32::MAX)
                    .collect();
                slots.sort_unstable();
                (!slots.is_empty()).then_some((term.as_str(), slots))
            })
            .collect();
        Ordered {
            table: self,
            order,
            terms,
        }
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
        let slot = self.ids.base[..self.base].binary_search(&id.0).ok()? as u32;
        self.live.contains(slot).then_some(slot)
    }

    /// Store `vector` as memory `id`'s, found under `terms` (replacing what
    /// the table held for it). A slot is never reused: a replaced or
    /// removed vector's slot is dead until the table is compacted, once
    /// dead slots outnumber live ones.
    pub fn upsert(&mut self, id: MemoryId, vector: Quantized, terms: &[String]) {
        debug_assert_eq!(vector.row.len(), self.dim);
        self.remove(&id);
        let slot = self.ids.slots() as u32;
        self.ids.push(&[id.0]);
        self.scales.push(&[vector.scale]);
        self.codes.push(&vector.code);
        self.rows.push(&vector.row);
        self.live.insert(slot);
        let mut terms: Vec<&String> = terms.iter().collect();
        terms.sort_unstable();
        terms.dedup();
        for term in terms {
            let words = self.words;
            let p = self
                .postings
                .entry(term.clone())
                .or_insert_with(|| Posting {
                    slots: Column::new(1, Backed::default()),
                    codes: Column::new(words, Backed::default()),
                });
            p.slots.push(&[slot]);
            p.codes.push(&vector.code);
        }
        self.added.insert(id, slot);
        if self.ids.slots() as u64 > 2 * self.live.len + 4096 {
            *self = VectorTable::from_parts(self.to_parts());
        }
    }

    /// Memory `id`'s stored vector, as it was stored (row, scale and code).
    pub fn vector_of(&self, id: &MemoryId) -> Option<Quantized> {
        let slot = self.slot_of(id)? as usize;
        Some(Quantized {
            row: self.rows.get(slot).to_vec(),
            scale: self.scales.get(slot)[0],
            code: self.codes.get(slot).to_vec(),
        })
    }

    /// The access terms each of `ids`' vectors is found under, in one walk
    /// of every term's posting (for the rare merge of two processes'
    /// tables); an id with no vector is left out.
    pub fn terms_by_id(&self, ids: &[MemoryId]) -> HashMap<MemoryId, Vec<String>> {
        let slots: HashMap<u32, MemoryId> = ids
            .iter()
            .filter_map(|id| Some((self.slot_of(id)?, *id)))
            .collect();
        let mut out: HashMap<MemoryId, Vec<String>> = HashMap::new();
        for (term, p) in &self.postings {
            for slot in p.slots.parts().into_iter().flatten() {
                if let Some(id) = slots.get(slot) {
                    out.entry(*id).or_default().push(term.clone());
                }
            }
        }
        out
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
    /// may not see never takes a candidate place, and neither does one of
    /// `skip` (memories no one may see any more, such as those expired
    /// since they were stored).
    pub fn nearest(
        &self,
        query: &Query,
        terms: Option<&[String]>,
        skip: &[MemoryId],
        limit: usize,
    ) -> Vec<(MemoryId, f32)> {
        self.nearest_in(query, terms, skip, limit, stages(limit))
    }

    /// [`nearest`](Self::nearest) with every allowed vector scored by its
    /// row: the exact answer the stages approximate (for measuring them).
    pub fn nearest_exact(
        &self,
        query: &Query,
        terms: Option<&[String]>,
        skip: &[MemoryId],
        limit: usize,
    ) -> Vec<(MemoryId, f32)> {
        let all = Stages {
            by_code: usize::MAX,
            by_sign: usize::MAX,
        };
        self.nearest_in(query, terms, skip, limit, all)
    }

    fn nearest_in(
        &self,
        query: &Query,
        terms: Option<&[String]>,
        skip_ids: &[MemoryId],
        limit: usize,
        stages: Stages,
    ) -> Vec<(MemoryId, f32)> {
        if limit == 0 || self.is_empty() || query.dim() != self.dim {
            return Vec::new();
        }
        let lists: Vec<CodeList<'_>> = match terms {
            None => {
                let [base, tail] = self.codes.parts();
                vec![
                    CodeList::whole(0, base),
                    CodeList::whole(self.codes.base_slots() as u32, tail),
                ]
            }
            Some(terms) => {
                let mut terms: Vec<&String> = terms.iter().collect();
                terms.sort_unstable();
                terms.dedup();
                terms
                    .into_iter()
                    .filter_map(|t| self.postings.get(t))
                    .flat_map(|p| {
                        let [slots, tail_slots] = p.slots.parts();
                        let [codes, tail_codes] = p.codes.parts();
                        [
                            CodeList::packed(slots, codes),
                            CodeList::packed(tail_slots, tail_codes),
                        ]
                    })
                    .collect()
            }
        };
        let store = Slots {
            dim: self.dim,
            rows: self.rows.parts(),
            scales: self.scales.parts(),
        };
        // Dead slots are skipped; so is a slot already seen under another
        // of the requester's terms.
        let mut skip = self.live.complement(self.ids.slots());
        for slot in skip_ids.iter().filter_map(|id| self.slot_of(id)) {
            if let Some(word) = skip.get_mut(slot as usize / 64) {
                *word |= 1 << (slot % 64);
            }
        }
        let near = quantize::nearest(store, query, &lists, &mut skip, stages);
        let mut scored: Vec<(MemoryId, f32)> = near
            .into_iter()
            .map(|(slot, similarity)| (self.id(slot), similarity))
            .collect();
        // Nearest first, ties by id: a total order (a slot's id is its
        // own), so the `limit` nearest are found first and only they sorted.
        let order = |a: &(MemoryId, f32), b: &(MemoryId, f32)| {
            b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
        };
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, order);
            scored.truncate(limit);
        }
        scored.sort_unstable_by(order);
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::vectors::snapshot;
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
        apply(VectorTable::new(dim), ops)
    }

    fn apply(mut table: VectorTable, ops: &[Op]) -> VectorTable {
        let dim = table.dim();
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

    /// A table written to a snapshot and read back as views of its bytes.
    fn reloaded(table: &VectorTable) -> VectorTable {
        let provenance = snapshot::Provenance {
            model: "m".into(),
            epoch: "e".into(),
            watermark: 1,
        };
        let bytes = snapshot::encode(&provenance, &table.to_parts());
        // Written from the table where it lies, the same bytes.
        let mut streamed = Vec::new();
        snapshot::write(&provenance, &table.image(), &mut streamed).unwrap();
        assert_eq!(streamed, bytes);
        let (_, parts) = snapshot::decode_bytes(&bytes).unwrap();
        assert!(parts.ids.is_empty() || (parts.rows.is_view() && parts.codes.is_view()));
        VectorTable::from_parts(parts)
    }

    proptest! {
        /// Whatever the history, a search answers only from the allowed
        /// terms' live memories, and exactly as a table built afresh from
        /// the surviving memories (and one loaded from its parts) does.
        #[test]
        fn answers_depend_on_content_not_history(ops in ops(), qseed in any::<u64>(), limit in 1usize..30, cut in any::<prop::sample::Index>()) {
            let dim = 24;
            let table = run(&ops, dim);
            // The same history with a snapshot read back in the middle: the
            // later writes land on a table whose loaded slots are views.
            let cut = cut.index(ops.len() + 1);
            let resumed = apply(reloaded(&run(&ops[..cut], dim)), &ops[cut..]);
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
            let loaded = reloaded(&table);
            prop_assert_eq!(table.to_parts(), fresh.to_parts());
            prop_assert_eq!(resumed.to_parts(), fresh.to_parts());
            let q = quantize::query(&vector(qseed, dim)).unwrap();
            // A requester under both terms sees a team memory once.
            for who in [Some(terms(&["team:a"])), Some(terms(&["owner"])), Some(terms(&["team:a", "owner", "team:a"])), None] {
                let got = table.nearest(&q, who.as_deref(), &[], limit);
                prop_assert_eq!(&got, &fresh.nearest(&q, who.as_deref(), &[], limit));
                prop_assert_eq!(&got, &loaded.nearest(&q, who.as_deref(), &[], limit));
                prop_assert_eq!(&got, &resumed.nearest(&q, who.as_deref(), &[], limit));
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
        let all = table.nearest(&query, None, &[], 5);
        assert_eq!(all[0].0, id(1));
        let team = table.nearest(&query, Some(&terms(&["team:a"])), &[], 5);
        assert_eq!(team.len(), 5);
        assert!(team.iter().all(|(m, _)| *m != id(1)));
        assert!(
            table
                .nearest(&query, Some(&terms(&["nobody"])), &[], 5)
                .is_empty()
        );
    }

    /// A skipped memory (one expired since it was stored) takes no place
    /// either, under any terms, and the rest move up into its place.
    #[test]
    fn a_skipped_vector_never_takes_a_place() {
        let dim = 32;
        let mut table = VectorTable::new(dim);
        let q = vector(7, dim);
        table.upsert(id(1), quantize::quantize(&q).unwrap(), &terms(&["team:a"]));
        for n in 2..=8 {
            table.upsert(
                id(n),
                quantize::quantize(&vector(n as u64, dim)).unwrap(),
                &terms(&["team:a"]),
            );
        }
        let query = quantize::query(&q).unwrap();
        for who in [None, Some(terms(&["team:a"]))] {
            let all = table.nearest(&query, who.as_deref(), &[], 8);
            assert_eq!(all[0].0, id(1));
            let rest = table.nearest(&query, who.as_deref(), &[id(1)], 8);
            assert_eq!(rest, all[1..].to_vec());
        }
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
        let hits = table.nearest(&quantize::query(&q).unwrap(), None, &[], 5);
        let near: Vec<u32> = hits
            .iter()
            .map(|(m, _)| u32::from_be_bytes([m.0[0], m.0[1], m.0[2], m.0[3]]))
            .collect();
        let mut sorted = near.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 2400, 4800, 7200, 9600]);
    }
}
