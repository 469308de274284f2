//! Quantized vectors: what the vector index keeps of an embedding, and how
//! it compares two of them. Pure arithmetic over slices; no storage, no
//! visibility, no I/O.
//!
//! A stored vector is its unit-length embedding held two ways:
//!
//! * a [`Row`] of int8 values with one scale (`value ≈ row[i] · scale`),
//!   which scores a candidate — the dot product of two unit vectors is
//!   their cosine;
//! * a sign [`code`](Quantized::code): one bit per dimension, which ranks
//!   *all* candidates cheaply by Hamming distance so that only the nearest
//!   few are scored by their rows.
//!
//! The query is held at i16 (its quantization error is negligible beside the
//! rows'), so a score is one integer dot product and one multiplication.
//! Everything here is exact integer arithmetic except the final scaling:
//! the same vectors always give the same bits.

/// A stored vector: int8 row, its scale and its sign code.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantized {
    /// The unit vector over `scale`, rounded to int8.
    pub row: Vec<i8>,
    /// What one int8 step is worth.
    pub scale: f32,
    /// One sign bit per dimension (the Hamming pass's code).
    pub code: Vec<u64>,
}

/// A query vector: i16 values, their scale and the sign code.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    values: Vec<i16>,
    scale: f32,
    code: Vec<u64>,
}

impl Query {
    /// The query's sign code.
    pub fn code(&self) -> &[u64] {
        &self.code
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.values.len()
    }

    /// The cosine of the query and a stored row (both unit length before
    /// quantization).
    #[inline(always)]
    pub fn similarity(&self, row: &[i8], row_scale: f32) -> f32 {
        dot(&self.values, row) as f32 * self.scale * row_scale
    }
}

/// 64-bit words in the sign code of a `dim`-dimensional vector.
pub fn code_words(dim: usize) -> usize {
    dim.div_ceil(64)
}

/// `v` scaled to unit length, or `None` for a zero or non-finite vector
/// (nothing can be near it).
fn unit(v: &[f32]) -> Option<(Vec<f32>, f32)> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm <= 1e-12 {
        return None;
    }
    let u: Vec<f32> = v.iter().map(|x| x / norm).collect();
    let max = u.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    (max > 0.0).then_some((u, max))
}

/// The sign bits of `u`: bit `i` of the code is set when `u[i] > 0`.
fn sign_code(u: &[f32]) -> Vec<u64> {
    let mut code = vec![0u64; code_words(u.len())];
    for (i, x) in u.iter().enumerate() {
        if *x > 0.0 {
            code[i / 64] |= 1 << (i % 64);
        }
    }
    code
}

/// What the index stores of embedding `v`.
pub fn quantize(v: &[f32]) -> Option<Quantized> {
    let (u, max) = unit(v)?;
    let scale = max / 127.0;
    let row = u
        .iter()
        .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    Some(Quantized {
        row,
        scale,
        code: sign_code(&u),
    })
}

/// The query form of embedding `v`.
pub fn query(v: &[f32]) -> Option<Query> {
    let (u, max) = unit(v)?;
    let scale = max / 32767.0;
    let values = u
        .iter()
        .map(|x| (x / scale).round().clamp(-32767.0, 32767.0) as i16)
        .collect();
    Some(Query {
        values,
        scale,
        code: sign_code(&u),
    })
}

/// The integer dot product of a query and a row. Summed in blocks whose
/// i32 total cannot overflow (256 · 32767 · 127 < 2³¹), the blocks in i64.
/// (Plain loops, no closures, here and below: a closure is not compiled
/// for the target features of the function it sits in.)
#[inline(always)]
fn dot(q: &[i16], row: &[i8]) -> i64 {
    let n = q.len().min(row.len());
    let (q, row) = (&q[..n], &row[..n]);
    let mut total = 0i64;
    let mut start = 0;
    while start < n {
        let end = (start + 256).min(n);
        let mut block = 0i32;
        for i in start..end {
            block += i32::from(q[i]) * i32::from(row[i]);
        }
        total += i64::from(block);
        start = end;
    }
    total
}

/// Hamming distance of two codes.
#[inline(always)]
fn hamming(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len().min(b.len());
    let mut d = 0;
    for i in 0..n {
        d += (a[i] ^ b[i]).count_ones();
    }
    d
}

/// The stored vectors' rows, in two parts (a loaded table's and what was
/// appended since): slot `s` below `scales[0].len()` has row
/// `rows[0][s·dim..]` and scale `scales[0][s]`, and the next ones continue
/// in part 1 from 0.
#[derive(Clone, Copy)]
pub struct Slots<'a> {
    pub dim: usize,
    pub rows: [&'a [i8]; 2],
    pub scales: [&'a [f32]; 2],
}

impl<'a> Slots<'a> {
    #[inline(always)]
    fn row(&self, s: usize) -> Option<(&'a [i8], f32)> {
        let (part, i) = match s.checked_sub(self.scales[0].len()) {
            None => (0, s),
            Some(i) => (1, i),
        };
        Some((
            self.rows[part].get(i * self.dim..(i + 1) * self.dim)?,
            *self.scales[part].get(i)?,
        ))
    }
}

/// A list of candidates with their sign codes packed alongside, `words`
/// per slot: `slots[i]`'s code is `codes[i·words..]`; with `slots` `None`,
/// entry `i` is slot `start + i` (a run of the table, in slot order).
/// Packed lists let a search read only the codes of slots it may consider,
/// in order.
#[derive(Clone, Copy)]
pub struct CodeList<'a> {
    pub slots: Option<&'a [u32]>,
    pub start: u32,
    pub codes: &'a [u64],
}

impl<'a> CodeList<'a> {
    /// The slots from `start` on, one code each.
    pub fn whole(start: u32, codes: &'a [u64]) -> Self {
        CodeList {
            slots: None,
            start,
            codes,
        }
    }

    /// `slots`, with their codes.
    pub fn packed(slots: &'a [u32], codes: &'a [u64]) -> Self {
        CodeList {
            slots: Some(slots),
            start: 0,
            codes,
        }
    }
}

impl CodeList<'_> {
    #[inline(always)]
    fn len(&self, words: usize) -> usize {
        match self.slots {
            Some(s) => s.len().min(self.codes.len() / words.max(1)),
            None => self.codes.len() / words.max(1),
        }
    }

    #[inline(always)]
    fn slot(&self, i: usize) -> u32 {
        match self.slots {
            Some(s) => s[i],
            None => self.start + i as u32,
        }
    }
}

/// How many candidates each stage of [`nearest`] keeps.
#[derive(Debug, Clone, Copy)]
pub struct Stages {
    /// Kept by Hamming distance of the sign codes.
    pub by_code: usize,
    /// Of those, kept by the query's dot product with the signs.
    pub by_sign: usize,
}

/// A distance no code has: the entry was skipped.
const SKIPPED: u16 = u16::MAX;

/// The candidates of `lists` nearest to `query`, scored by their rows
/// (`(slot, cosine)`, in no particular order). A slot whose bit is set in
/// `skip` is not a candidate (dead, or not to be considered); each slot is
/// considered once however many lists hold it (its bit is set as it is
/// seen). Three stages, each keeping every candidate at least as near as
/// the last one it must keep (ties included, so the answer is a function
/// of the set of candidate slots, not of their order or of the lists): the
/// Hamming distance of the sign codes keeps [`Stages::by_code`]; the dot
/// product of the query itself with each candidate's signs (±1 per
/// dimension: a far better guess than the Hamming distance, for 48 table
/// lookups) keeps [`Stages::by_sign`]; the rows score those. With fewer
/// candidates than a stage keeps, it is skipped: at most `by_sign`
/// candidates are all scored exactly.
pub fn nearest(
    store: Slots<'_>,
    query: &Query,
    lists: &[CodeList<'_>],
    skip: &mut [u64],
    stages: Stages,
) -> Vec<(u32, f32)> {
    let by_code = stages.by_code.max(stages.by_sign);
    let near = by_hamming_dispatched(query.code(), lists, skip, by_code);
    scored_dispatched(store, query, near, stages.by_sign)
}

/// The candidates a stage kept: slots and their codes, packed.
#[derive(Debug, Default)]
struct Kept {
    words: usize,
    slots: Vec<u32>,
    codes: Vec<u64>,
}

/// [`by_hamming`] with the `popcnt` instruction where the CPU has it (and
/// not AVX2: a vector popcount of six words loses to six scalar ones).
fn by_hamming_dispatched(
    query: &[u64],
    lists: &[CodeList<'_>],
    skip: &mut [u64],
    keep: usize,
) -> Kept {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: `by_hamming_popcnt` is the portable function compiled for
        // the `popcnt` instruction, which the running CPU was just seen to
        // have. Nothing else differs.
        #[allow(unsafe_code)]
        return unsafe { by_hamming_popcnt(query, lists, skip, keep) };
    }
    by_hamming(query, lists, skip, keep)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn by_hamming_popcnt(query: &[u64], lists: &[CodeList<'_>], skip: &mut [u64], keep: usize) -> Kept {
    by_hamming(query, lists, skip, keep)
}

/// [`scored`] with AVX2 where the CPU has it.
fn scored_dispatched(
    store: Slots<'_>,
    query: &Query,
    candidates: Kept,
    by_sign: usize,
) -> Vec<(u32, f32)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `scored_avx2` is the portable function compiled for AVX2,
        // which the running CPU was just seen to have. Nothing else differs.
        #[allow(unsafe_code)]
        return unsafe { scored_avx2(store, query, candidates, by_sign) };
    }
    scored(store, query, candidates, by_sign)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scored_avx2(
    store: Slots<'_>,
    query: &Query,
    candidates: Kept,
    by_sign: usize,
) -> Vec<(u32, f32)> {
    scored(store, query, candidates, by_sign)
}

/// Stages two and three: the `by_sign` candidates nearest by their signs,
/// scored by their rows.
#[inline(always)]
fn scored(store: Slots<'_>, query: &Query, candidates: Kept, by_sign: usize) -> Vec<(u32, f32)> {
    let mut slots = match candidates.slots.len() > by_sign {
        true => by_signs(query, &candidates, by_sign),
        false => candidates.slots,
    };
    // The rows are scattered over the table, each a few cache lines: read
    // them in address order, asking for each one a few rows ahead of its
    // dot product, so the memory reads overlap instead of taking turns.
    // (Scores are per slot: the order changes nothing else.)
    slots.sort_unstable();
    let mut scored = Vec::with_capacity(slots.len());
    for (i, &slot) in slots.iter().enumerate() {
        if let Some(&ahead) = slots.get(i + PREFETCH_AHEAD)
            && let Some((row, _)) = store.row(ahead as usize)
        {
            prefetch(row);
        }
        if let Some((row, scale)) = store.row(slot as usize) {
            scored.push((slot, query.similarity(row, scale)));
        }
    }
    scored
}

/// How many rows ahead of its dot product a row is asked for.
const PREFETCH_AHEAD: usize = 4;

/// Ask the CPU to bring `row` into cache (a hint: no effect on results).
#[inline(always)]
fn prefetch(row: &[i8]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(64) {
        // SAFETY: a prefetch reads nothing and cannot fault; the address is
        // inside `row`.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// Every candidate of `lists` at most as far (Hamming) as the `keep`-th
/// nearest, with its code. Two passes over the lists, in the same order:
/// one for each entry's distance and their histogram (marking each slot
/// seen in `skip`), one to take those within the threshold: no sort.
#[inline(always)]
fn by_hamming(query: &[u64], lists: &[CodeList<'_>], skip: &mut [u64], keep: usize) -> Kept {
    let words = query.len();
    let mut histogram = vec![0usize; words * 64 + 1];
    let entries: usize = lists.iter().map(|l| l.len(words)).sum();
    let mut distances: Vec<u16> = Vec::with_capacity(entries);
    for list in lists {
        for i in 0..list.len(words) {
            let slot = list.slot(i) as usize;
            let Some(seen) = skip.get_mut(slot / 64) else {
                distances.push(SKIPPED);
                continue;
            };
            let bit = 1u64 << (slot % 64);
            if *seen & bit != 0 {
                distances.push(SKIPPED);
                continue;
            }
            *seen |= bit;
            let d = hamming(&list.codes[i * words..(i + 1) * words], query);
            distances.push(d as u16);
            histogram[d as usize] += 1;
        }
    }
    let mut threshold = u16::MAX - 1;
    let mut seen = 0;
    for (d, n) in histogram.iter().enumerate() {
        seen += n;
        if seen >= keep {
            threshold = d as u16;
            break;
        }
    }
    let mut kept = Kept {
        words,
        ..Kept::default()
    };
    let mut at = distances.iter();
    for list in lists {
        for i in 0..list.len(words) {
            if at.next().is_some_and(|d| *d <= threshold) {
                kept.slots.push(list.slot(i));
                kept.codes
                    .extend_from_slice(&list.codes[i * words..(i + 1) * words]);
            }
        }
    }
    kept
}

/// Of `candidates`, every one whose signs' dot product with the query is
/// at least the `keep`-th largest. The dot product is summed per byte of
/// the code from a table of the query's 256 sums per byte.
#[inline(always)]
fn by_signs(query: &Query, candidates: &Kept, keep: usize) -> Vec<u32> {
    // One table of 256 sums per byte of the code (bytes past the dimension
    // sum to 0), laid out byte after byte.
    let words = candidates.words;
    let mut table = vec![0i32; words * 8 * 256];
    for (j, t) in table.chunks_exact_mut(256).enumerate() {
        let mut q = [0i32; 8];
        for (k, v) in q.iter_mut().enumerate() {
            *v = query.values.get(8 * j + k).map_or(0, |v| i32::from(*v));
        }
        t[0] = -q.iter().sum::<i32>();
        for b in 1..256usize {
            t[b] = t[b & (b - 1)] + 2 * q[b.trailing_zeros() as usize];
        }
    }
    let mut scores: Vec<i32> = Vec::with_capacity(candidates.slots.len());
    for code in candidates.codes.chunks_exact(words.max(1)) {
        let mut sum = 0;
        for (w, word) in code.iter().enumerate() {
            let tables = &table[w * 2048..(w + 1) * 2048];
            let mut x = *word;
            for k in 0..8 {
                sum += tables[k * 256 + (x & 0xff) as usize];
                x >>= 8;
            }
        }
        scores.push(sum);
    }
    let mut sorted = scores.clone();
    let at = keep.min(sorted.len()).saturating_sub(1);
    let (_, threshold, _) = sorted.select_nth_unstable_by(at, |a, b| b.cmp(a));
    let threshold = *threshold;
    candidates
        .slots
        .iter()
        .zip(scores)
        .filter(|(_, s)| *s >= threshold)
        .map(|(slot, _)| *slot)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let (ua, _) = unit(a).unwrap();
        let (ub, _) = unit(b).unwrap();
        ua.iter().zip(&ub).map(|(x, y)| x * y).sum()
    }

    fn vector(dim: usize) -> impl Strategy<Value = Vec<f32>> {
        prop::collection::vec(-1.0f32..1.0, dim)
            .prop_filter("not zero", |v| v.iter().any(|x| x.abs() > 1e-3))
    }

    proptest! {
        /// The quantized score stays within a small error of the exact cosine.
        #[test]
        fn the_quantized_score_is_the_cosine(dim in 1usize..700, seed in any::<u64>()) {
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; (s % 2001) as f32 / 1000.0 - 1.0 };
            let a: Vec<f32> = (0..dim).map(|_| next()).collect();
            let b: Vec<f32> = (0..dim).map(|_| next()).collect();
            prop_assume!(unit(&a).is_some() && unit(&b).is_some());
            let row = quantize(&a).unwrap();
            let q = query(&b).unwrap();
            let got = q.similarity(&row.row, row.scale);
            prop_assert!((got - cosine(&a, &b)).abs() < 0.02, "{got} vs {}", cosine(&a, &b));
        }

        /// The sign code has one bit per dimension, set where the value is positive.
        #[test]
        fn the_code_is_the_signs(v in vector(130)) {
            let q = quantize(&v).unwrap();
            prop_assert_eq!(q.code.len(), 3);
            for (i, x) in v.iter().enumerate() {
                prop_assert_eq!(q.code[i / 64] >> (i % 64) & 1 == 1, *x > 0.0);
            }
        }

        /// Each stage keeps exactly what it must, ties included, whatever
        /// order the slots come in and however they are split into lists
        /// (a slot in two lists counts once; a skipped slot not at all); the
        /// compiled-for-the-CPU path answers as the portable one; with few
        /// slots every one is scored.
        #[test]
        fn the_stages_keep_ties_and_ignore_order(
            seeds in prop::collection::vec(any::<u64>(), 1..120),
            qseed in any::<u64>(),
            by_code in 1usize..60,
            by_sign in 1usize..40,
            skipped in prop::collection::vec(any::<bool>(), 120),
            cut in any::<prop::sample::Index>(),
        ) {
            let dim = 20;
            let vector = |seed: u64| -> Vec<f32> {
                let mut s = seed | 1;
                (0..dim).map(|_| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; (s % 5) as f32 - 2.0 }).collect()
            };
            let stored: Vec<Quantized> = seeds.iter().filter_map(|s| quantize(&vector(*s))).collect();
            let Some(q) = query(&vector(qseed)) else { return Ok(()) };
            let n = stored.len() as u32;
            let codes: Vec<u64> = stored.iter().flat_map(|v| v.code.clone()).collect();
            let rows: Vec<i8> = stored.iter().flat_map(|v| v.row.clone()).collect();
            let scales: Vec<f32> = stored.iter().map(|v| v.scale).collect();
            // The rows in two parts, cut anywhere, as a loaded table
            // with slots appended holds them.
            let cut = cut.index(n as usize + 1);
            let (rows_a, rows_b) = rows.split_at(cut * dim);
            let (scales_a, scales_b) = scales.split_at(cut);
            let store = Slots { dim, rows: [rows_a, rows_b], scales: [scales_a, scales_b] };
            let stages = Stages { by_code, by_sign };
            let fresh = || vec![0u64; (n as usize).div_ceil(64)];
            let sorted = |mut v: Vec<(u32, f32)>| { v.sort_by_key(|e| e.0); v };
            let all = [CodeList::whole(0, &codes)];
            let got = sorted(nearest(store, &q, &all, &mut fresh(), stages));
            // The whole table as two runs, cut where the rows are.
            let runs = [CodeList::whole(0, &codes[..cut]), CodeList::whole(cut as u32, &codes[cut..])];
            prop_assert_eq!(&got, &sorted(nearest(store, &q, &runs, &mut fresh(), stages)));
            // The same slots, packed in reverse, and split into two lists
            // that overlap.
            let rev: Vec<u32> = (0..n).rev().collect();
            let rev_codes: Vec<u64> = rev.iter().map(|s| codes[*s as usize]).collect();
            let packed = [CodeList::packed(&rev, &rev_codes)];
            prop_assert_eq!(&got, &sorted(nearest(store, &q, &packed, &mut fresh(), stages)));
            let half = (n as usize).div_ceil(2);
            let split = [
                CodeList::packed(&rev[..half], &rev_codes[..half]),
                CodeList::whole(0, &codes),
            ];
            prop_assert_eq!(&got, &sorted(nearest(store, &q, &split, &mut fresh(), stages)));
            prop_assert_eq!(&got, &sorted(scored(store, &q, by_hamming(q.code(), &all, &mut fresh(), by_code.max(by_sign)), by_sign)));
            if n as usize <= by_code.max(by_sign) && n as usize <= by_sign {
                prop_assert_eq!(got.len(), n as usize);
            }
            // Skipped slots are not candidates: the same as a list without them.
            let mut skip = fresh();
            let kept_slots: Vec<u32> = (0..n).filter(|s| !skipped[*s as usize]).collect();
            for s in (0..n).filter(|s| skipped[*s as usize]) {
                skip[s as usize / 64] |= 1 << (s % 64);
            }
            let kept_codes: Vec<u64> = kept_slots.iter().map(|s| codes[*s as usize]).collect();
            let without = [CodeList::packed(&kept_slots, &kept_codes)];
            prop_assert_eq!(
                sorted(nearest(store, &q, &all, &mut skip, stages)),
                sorted(nearest(store, &q, &without, &mut fresh(), stages))
            );
            // The Hamming stage alone: everything within the keep-th distance.
            let dist = |s: u32| hamming(&codes[s as usize..s as usize + 1], q.code());
            let kept = by_hamming(q.code(), &all, &mut fresh(), by_code);
            let mut dists: Vec<u32> = (0..n).map(dist).collect();
            dists.sort_unstable();
            let t = dists[by_code.min(dists.len()) - 1];
            prop_assert_eq!(kept.slots.len(), dists.iter().filter(|d| **d <= t).count());
            for (i, slot) in kept.slots.iter().enumerate() {
                prop_assert_eq!(kept.codes[i], codes[*slot as usize]);
            }
            // The signs stage: its score is the query's dot product with the signs.
            let every = by_hamming(q.code(), &all, &mut fresh(), usize::MAX);
            let signs = by_signs(&q, &every, by_sign);
            prop_assert!(signs.len() >= by_sign.min(n as usize));
        }
    }

    /// The sign table's sum is the dot product of the query with ±1 signs.
    #[test]
    fn the_sign_table_sums_the_signed_query() {
        let v: Vec<f32> = (0..21).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
        let q = query(&v).unwrap();
        let others: Vec<Quantized> = (0..30)
            .map(|k| {
                quantize(
                    &(0..21)
                        .map(|i| (((i + k) * 3) % 7) as f32 - 3.0)
                        .collect::<Vec<_>>(),
                )
                .unwrap()
            })
            .collect();
        let candidates = Kept {
            words: 1,
            slots: (0..30).collect(),
            codes: others.iter().flat_map(|o| o.code.clone()).collect(),
        };
        let signed = |o: &Quantized| -> i32 {
            (0..21)
                .map(|i| {
                    if o.code[0] >> i & 1 == 1 {
                        i32::from(q.values[i])
                    } else {
                        -i32::from(q.values[i])
                    }
                })
                .sum()
        };
        let mut best: Vec<(i32, u32)> = others
            .iter()
            .enumerate()
            .map(|(i, o)| (signed(o), i as u32))
            .collect();
        best.sort_by(|a, b| b.cmp(a));
        let kept = by_signs(&q, &candidates, 5);
        let threshold = best[4].0;
        let mut expect: Vec<u32> = best
            .iter()
            .filter(|b| b.0 >= threshold)
            .map(|b| b.1)
            .collect();
        expect.sort_unstable();
        let mut kept = kept;
        kept.sort_unstable();
        assert_eq!(kept, expect);
    }

    #[test]
    fn a_zero_or_broken_vector_is_not_stored() {
        assert!(quantize(&[0.0, 0.0]).is_none());
        assert!(quantize(&[f32::NAN, 1.0]).is_none());
        assert!(query(&[f32::INFINITY, 1.0]).is_none());
    }

    #[test]
    fn a_vector_is_most_similar_to_itself() {
        let a = [0.3, -0.2, 0.9, 0.05];
        let row = quantize(&a).unwrap();
        let q = query(&a).unwrap();
        assert!((q.similarity(&row.row, row.scale) - 1.0).abs() < 0.01);
    }
}
