//! Pure text heuristics shared by context packs and consolidation: token sets,
//! Jaccard similarity, near-duplicate search, and the "same subject, different
//! value" contradiction heuristic.
//!
//! Boundary: pure functions over strings; no storage, no gate. Callers hand in
//! only text they may already show.

use std::collections::{BTreeSet, HashMap};

/// Two texts whose token sets have a Jaccard similarity at or above this are
/// near-duplicates (packs suppress the lower-ranked one; `consolidate` merges).
pub const NEAR_DUPLICATE: f32 = 0.8;

/// Text compared for exact duplicates: lower case, whitespace folded.
pub fn normalize_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        // ASCII lower-cases byte by byte; anything else through
        // `str::to_lowercase` (a word-final Σ becomes ς, as it should).
        match word.is_ascii() {
            true => out.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase()))),
            false => out.push_str(&word.to_lowercase()),
        }
    }
    out
}

/// The set of lower-cased alphanumeric words of `text` (punctuation splits words).
pub fn token_set(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// |a ∩ b| / |a ∪ b|; two empty sets are identical (1.0).
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f32 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    inter as f32 / union as f32
}

/// The subject and value a memory states, for spotting contradictions.
///
/// Heuristic (documented in the README): the text before the first `:` or `=`
/// is the subject and the rest the value (`deploy port: 8080`,
/// `timeout=30s`); failing that, the words before the first ` is ` / ` are `
/// (`the deploy port is 8080`). A subject has 1 to 6 words; both parts are
/// compared normalised (lower case, whitespace folded, trailing `.` dropped).
/// Two memories contradict when their subjects are equal and values differ.
pub fn subject_value(text: &str) -> Option<(String, String)> {
    let first_line = text.lines().find(|l| !l.trim().is_empty())?;
    let split = first_line
        .find([':', '='])
        .map(|i| (&first_line[..i], &first_line[i + 1..]))
        .or_else(|| {
            let lower = first_line.to_lowercase();
            [" is ", " are "].iter().find_map(|sep| {
                lower
                    .find(sep)
                    .map(|i| (&first_line[..i], &first_line[i + sep.len()..]))
            })
        })?;
    let subject = normalize_text(split.0);
    let value = normalize_text(split.1.trim().trim_end_matches('.'));
    let words = subject.split(' ').filter(|w| !w.is_empty()).count();
    if subject.is_empty() || value.is_empty() || words > 6 {
        return None;
    }
    Some((subject, value))
}

/// [`token_set`] as sorted, distinct 64-bit hashes: the same Jaccard
/// similarity (up to hash collisions) at a fraction of the cost, for packs
/// that compare every candidate with every included item. The hashes live
/// only as long as one pack: they are never stored or sent.
pub fn token_hashes(text: &str) -> Vec<u64> {
    let mut out: Vec<u64> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(word_hash)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A lower-cased word's hash: each step `(rotl(h, 5) ^ c) × K` with `K`
/// odd is a bijection of the state, so two distinct words of one length
/// never collide; a final mix spreads the bits.
fn word_hash(word: &str) -> u64 {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let step = |h: u64, c: u32| (h.rotate_left(5) ^ u64::from(c)).wrapping_mul(K);
    let h = match word.is_ascii() {
        true => word
            .bytes()
            .fold(0, |h, b| step(h, u32::from(b.to_ascii_lowercase()))),
        false => word
            .chars()
            .flat_map(char::to_lowercase)
            .fold(0, |h, c| step(h, u32::from(c))),
    };
    // murmur3's finaliser
    let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let h = (h ^ (h >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The Jaccard similarity of two sorted, distinct slices (two empty ones:
/// 1.0) when it is at least `threshold`, else `None`. It gives up as soon
/// as the elements left cannot lift it that high: before the first
/// comparison when the sizes alone rule it out (at most min / max), and
/// most pairs in a pack soon after, within their first few elements.
pub fn jaccard_at_least(a: &[u64], b: &[u64], threshold: f32) -> Option<f32> {
    if a.is_empty() && b.is_empty() {
        return (1.0 >= threshold).then_some(1.0);
    }
    let total = a.len() + b.len();
    // Exact in f32 (small integers), and monotone in `inter`: once the
    // best still possible is below the threshold, the result is too.
    let ratio = |inter: usize| inter as f32 / (total - inter) as f32;
    if ratio(a.len().min(b.len())) < threshold {
        return None;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
                continue;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
        let left = (a.len() - i).min(b.len() - j);
        if ratio(inter + left) < threshold {
            return None;
        }
    }
    let jaccard = ratio(inter);
    (jaccard >= threshold).then_some(jaccard)
}

/// Whether two texts contradict under [`subject_value`]; returns the subject
/// (tests pin the rule; a pack compares `subject_value`s itself).
#[cfg(test)]
pub fn contradiction(a: &str, b: &str) -> Option<String> {
    let (sa, va) = subject_value(a)?;
    let (sb, vb) = subject_value(b)?;
    (sa == sb && va != vb).then_some(sa)
}

/// Greedy near-duplicate grouping within groups: walk `items` in the order
/// given; an item whose token set reaches `threshold` Jaccard similarity with
/// an earlier *survivor* of the same group becomes a source of the most
/// similar one, otherwise it becomes a survivor itself. Returns, per item,
/// `Some((survivor index, similarity))` or `None` for survivors.
///
/// Exact, and sub-quadratic in practice, by prefix filtering: with tokens in
/// one global order (rarest first), two sets with Jaccard ≥ t share a token
/// among the first `|x| - ceil(t·|x|) + 1` tokens of each.
pub fn near_duplicates<G: Eq + std::hash::Hash + Clone>(
    items: &[(G, BTreeSet<String>)],
    threshold: f32,
) -> Vec<Option<(usize, f32)>> {
    let mut df: HashMap<&str, usize> = HashMap::new();
    for (_, set) in items {
        for t in set {
            *df.entry(t.as_str()).or_default() += 1;
        }
    }
    let ordered: Vec<Vec<&str>> = items
        .iter()
        .map(|(_, set)| {
            let mut v: Vec<&str> = set.iter().map(String::as_str).collect();
            v.sort_by_key(|t| (df.get(t).copied().unwrap_or(0), *t));
            v
        })
        .collect();
    let prefix_len = |n: usize| {
        if n == 0 {
            0
        } else {
            n - ((threshold * n as f32).ceil() as usize).min(n) + 1
        }
    };
    // (group, token) → survivors whose prefix holds the token.
    let mut postings: HashMap<(G, &str), Vec<usize>> = HashMap::new();
    let mut empty_survivor: HashMap<G, usize> = HashMap::new();
    let mut out = vec![None; items.len()];
    for (i, (group, set)) in items.iter().enumerate() {
        let prefix = &ordered[i][..prefix_len(ordered[i].len()).min(ordered[i].len())];
        let mut best: Option<(usize, f32)> = None;
        if set.is_empty() {
            best = empty_survivor.get(group).map(|&s| (s, 1.0));
        }
        let mut seen = BTreeSet::new();
        for t in prefix {
            for &s in postings.get(&(group.clone(), *t)).into_iter().flatten() {
                if seen.insert(s) {
                    let j = jaccard(set, &items[s].1);
                    if j >= threshold && best.is_none_or(|(_, b)| j > b) {
                        best = Some((s, j));
                    }
                }
            }
        }
        match best {
            Some(b) => out[i] = Some(b),
            None => {
                if set.is_empty() {
                    empty_survivor.insert(group.clone(), i);
                }
                for t in prefix {
                    postings.entry((group.clone(), *t)).or_default().push(i);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain merge: the oracle [`jaccard_at_least`] is checked against.
    fn jaccard_sorted(a: &[u64], b: &[u64]) -> f32 {
        if a.is_empty() && b.is_empty() {
            return 1.0;
        }
        let (mut i, mut j, mut inter) = (0, 0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    inter += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        inter as f32 / (a.len() + b.len() - inter) as f32
    }

    #[test]
    fn jaccard_of_token_sets() {
        let a = token_set("Deploy the API, then restart.");
        let b = token_set("deploy the api then restart");
        assert_eq!(jaccard(&a, &b), 1.0);
        let c = token_set("deploy the api then reboot");
        assert!((jaccard(&a, &c) - 4.0 / 6.0).abs() < 1e-6);
        assert_eq!(jaccard(&token_set(""), &token_set("")), 1.0);
        assert_eq!(jaccard(&token_set("x"), &token_set("")), 0.0);
    }

    #[test]
    fn hashed_jaccard_agrees_with_the_set_one() {
        let texts = [
            "Deploy the API, then restart.",
            "deploy the api then restart",
            "deploy the api then reboot",
            "",
            "ÉTÉ été summer",
        ];
        for a in texts {
            for b in texts {
                let want = jaccard(&token_set(a), &token_set(b));
                let got = jaccard_sorted(&token_hashes(a), &token_hashes(b));
                assert!((want - got).abs() < 1e-6, "{a:?} {b:?}: {want} vs {got}");
            }
        }
    }

    proptest::proptest! {
        /// The one-pass normaliser is the plain one: lower-case each
        /// whitespace-separated word, join with one space.
        #[test]
        fn normalize_text_is_the_plain_normaliser(text in "(?s)[a-zA-Z ΣσςÉé\t\n.,İ]{0,40}") {
            let plain = text
                .split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
                .join(" ");
            proptest::prop_assert_eq!(normalize_text(&text), plain);
        }

        /// The early-stopping Jaccard is the full one wherever it reaches
        /// the threshold, and `None` exactly where it does not.
        #[test]
        fn jaccard_at_least_is_the_thresholded_jaccard(
            a in proptest::collection::btree_set(0u64..24, 0..16),
            b in proptest::collection::btree_set(0u64..24, 0..16),
            threshold in 0.0f32..=1.0,
        ) {
            let (a, b): (Vec<u64>, Vec<u64>) = (a.into_iter().collect(), b.into_iter().collect());
            let full = jaccard_sorted(&a, &b);
            let want = (full >= threshold).then_some(full);
            proptest::prop_assert_eq!(jaccard_at_least(&a, &b, threshold), want);
        }

        /// Hashed token sets give the Jaccard of the string sets.
        #[test]
        fn hashed_jaccard_is_the_set_jaccard(
            a in "[a-cA-CéÉ ,.]{0,24}",
            b in "[a-cA-CéÉ ,.]{0,24}",
        ) {
            let want = jaccard(&token_set(&a), &token_set(&b));
            let got = jaccard_sorted(&token_hashes(&a), &token_hashes(&b));
            proptest::prop_assert!((want - got).abs() < 1e-6, "{} vs {}", want, got);
        }
    }

    #[test]
    fn subjects_and_contradictions() {
        let table: &[(&str, &str, Option<&str>)] = &[
            (
                "deploy port: 8080",
                "Deploy port: 9090",
                Some("deploy port"),
            ),
            ("deploy port: 8080", "deploy port : 8080.", None),
            ("timeout=30s", "timeout = 45s", Some("timeout")),
            (
                "The deploy port is 8080",
                "the deploy port is 9090",
                Some("the deploy port"),
            ),
            ("the sky is blue", "the grass is green", None),
            ("no subject here", "no subject here either", None),
            ("a b c d e f g: x", "a b c d e f g: y", None),
        ];
        for (a, b, want) in table {
            assert_eq!(contradiction(a, b).as_deref(), *want, "{a} / {b}");
        }
    }

    #[test]
    fn near_duplicates_are_exact_under_prefix_filtering() {
        let texts = [
            ("g", "the quick brown fox jumps over the lazy dog"),
            ("g", "the quick brown fox jumps over the lazy dog again"),
            ("g", "something else entirely"),
            ("h", "the quick brown fox jumps over the lazy dog"),
            ("g", "the quick brown fox jumped over a lazy cat"),
            ("g", "THE QUICK brown fox jumps over the lazy dog!"),
        ];
        let items: Vec<(&str, BTreeSet<String>)> =
            texts.iter().map(|(g, t)| (*g, token_set(t))).collect();
        let got = near_duplicates(&items, NEAR_DUPLICATE);
        // Brute force agrees on which items have a similar earlier survivor.
        for (i, g) in got.iter().enumerate() {
            let brute = (0..i).any(|s| {
                got[s].is_none()
                    && items[s].0 == items[i].0
                    && jaccard(&items[s].1, &items[i].1) >= NEAR_DUPLICATE
            });
            assert_eq!(g.is_some(), brute, "item {i}: {g:?}");
        }
        assert_eq!(got[1].map(|g| g.0), Some(0));
        assert_eq!(got[5], Some((0, 1.0)));
        assert_eq!(got[3], None, "another group never merges");
        assert_eq!(got[2], None);
        assert_eq!(got[4], None);
    }
}
