//! A tokenizer's vocabulary: token → id.
//!
//! Owns its two forms. The built-in model's is laid out by `build.rs` as a
//! table of tokens bucketed by hash, compiled into the binary, so a process
//! that embeds one query reads a bucket or two, not 30,000 inserts before
//! its first lookup. A user's is read from its `tokenizer.json` into
//! a hash map. Both hash with [`token_hash`]. Must never: panic or allocate
//! on a lookup (the built-in table's entries are read with bounds; its
//! shape is checked once, when opened).

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;

use crate::vocab_layout::{CONTINUED_FLAG, FxHasher, split_continued, token_hash};

/// A vocabulary read from a file.
pub(crate) type OwnedVocab = HashMap<String, u32, BuildHasherDefault<FxHasher>>;

/// Token → id, built in or read.
#[derive(Clone, Debug)]
pub(crate) enum Vocab {
    Builtin(BuiltinVocab),
    Owned(OwnedVocab),
}

impl Vocab {
    pub(crate) fn get(&self, token: &str) -> Option<u32> {
        match self {
            Vocab::Builtin(v) => v.get(token),
            Vocab::Owned(v) => v.get(token).copied(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Vocab::Builtin(v) => v.len == 0,
            Vocab::Owned(v) => v.is_empty(),
        }
    }

    /// The largest id, if any.
    pub(crate) fn max_id(&self) -> Option<u32> {
        match self {
            Vocab::Builtin(v) => v.len.checked_sub(1).map(|m| m as u32),
            Vocab::Owned(v) => v.values().copied().max(),
        }
    }
}

/// The built-in vocabulary, borrowed from the binary: the token count, the
/// bucket offsets and the bucketed records [`crate::vocab_layout::layout`]
/// writes.
#[derive(Clone, Copy)]
pub(crate) struct BuiltinVocab {
    /// `buckets + 1` offsets into `records`, 4 bytes each.
    offsets: &'static [u8],
    records: &'static [u8],
    /// `buckets - 1`: a token's bucket is its hash and this.
    mask: usize,
    len: usize,
}

impl fmt::Debug for BuiltinVocab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuiltinVocab({} tokens)", self.len)
    }
}

fn u32_at(bytes: &[u8], i: usize) -> Option<usize> {
    let b = bytes.get(4 * i..4 * i + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

impl BuiltinVocab {
    /// The vocabulary laid out in `table`, or `None` if the layout's shape
    /// does not hold (a bucket count that is not a power of two, offsets
    /// that do not end at the records' end). Only the shape is checked (no
    /// pass over the table at every start): a lookup reads every record with
    /// bounds, so a record that does not fit finds nothing rather than
    /// panicking, and a record whose id is not below the header's token
    /// count (what [`Vocab::max_id`] and so the model's row check go by)
    /// finds nothing either.
    pub(crate) fn new(table: &'static [u8]) -> Option<Self> {
        let len = u32_at(table, 0)?;
        let buckets = u32_at(table, 1)?;
        if !buckets.is_power_of_two() {
            return None;
        }
        let (offsets, records) = table
            .get(8..)?
            .split_at_checked(4 * buckets.checked_add(1)?)?;
        let shape =
            u32_at(offsets, 0) == Some(0) && u32_at(offsets, buckets) == Some(records.len());
        shape.then_some(BuiltinVocab {
            offsets,
            records,
            mask: buckets - 1,
            len,
        })
    }

    fn get(&self, token: &str) -> Option<u32> {
        let (flag, body) = split_continued(token);
        let b = token_hash(token.as_bytes()) as usize & self.mask;
        let mut records = self
            .records
            .get(u32_at(self.offsets, b)?..u32_at(self.offsets, b + 1)?)?;
        // Each record: length byte (with the flag), u16 id, the bytes.
        while let [head, lo, hi, rest @ ..] = records {
            let n = usize::from(head & !CONTINUED_FLAG);
            let bytes = rest.get(..n)?;
            if head & CONTINUED_FLAG == flag && bytes == body {
                // An id at or past the header's count is not a token: the
                // model's rows are checked against that count.
                let id = u16::from_le_bytes([*lo, *hi]);
                return (usize::from(id) < self.len).then_some(u32::from(id));
            }
            records = &rest[n..];
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab_layout::{buckets_for, layout};

    fn leak(bytes: Vec<u8>) -> &'static [u8] {
        Box::leak(bytes.into_boxed_slice())
    }

    #[test]
    fn every_token_finds_its_id_and_nothing_else_is_found() {
        let list = ["a", "b", "##c", "##", "", "c", "####", "[UNK]"];
        for buckets in [1, 2, 8] {
            let v = BuiltinVocab::new(leak(layout(&list, buckets))).unwrap();
            for (id, t) in list.iter().enumerate() {
                assert_eq!(v.get(t), Some(id as u32), "{t:?} in {buckets}");
            }
            // A continued token is not its body, nor its body continued.
            for absent in ["d", "#c", "##a", "###", "#", "c##", "[unk]", "a\n"] {
                assert_eq!(v.get(absent), None, "{absent:?} in {buckets}");
            }
            assert_eq!(Vocab::Builtin(v).max_id(), Some(7));
        }
        assert_eq!(buckets_for(0), 1);
        assert_eq!(buckets_for(29_528), 4096);
    }

    #[test]
    fn a_table_that_does_not_hold_its_shape_is_refused_or_finds_nothing() {
        let list = ["a", "bb"];
        let good = layout(&list, 2);
        assert!(BuiltinVocab::new(leak(good.clone())).is_some());
        // Truncated, a bucket count that is not a power of two, an offset
        // that does not end at the records' end: refused.
        assert!(BuiltinVocab::new(leak(good[..good.len() - 1].to_vec())).is_none());
        assert!(BuiltinVocab::new(&[]).is_none());
        let mut three = good.clone();
        three[4] = 3;
        assert!(BuiltinVocab::new(leak(three)).is_none());
        let mut last = good.clone();
        last[8 + 8] += 1;
        assert!(BuiltinVocab::new(leak(last)).is_none());
        // A middle offset past the records, lengths past a bucket's end:
        // the lookups find nothing, and never panic.
        let mut past = good.clone();
        past[8 + 4] = 0x7f;
        let v = BuiltinVocab::new(leak(past)).unwrap();
        assert_eq!((v.get("a"), v.get("bb"), v.get("c")), (None, None, None));
        // One bucket: its records start right after the two offsets. A
        // first record whose length runs past the bucket's end ends the
        // lookup; the same table with the length intact finds both.
        let one = layout(&list, 1);
        let first = 8 + 8;
        assert_eq!(one[first], 1, "the first record is \"a\", one byte long");
        let v = BuiltinVocab::new(leak(one.clone())).unwrap();
        assert_eq!((v.get("a"), v.get("bb")), (Some(0), Some(1)));
        let mut long = one;
        long[first] = 0x7f;
        let v = BuiltinVocab::new(leak(long)).unwrap();
        assert_eq!((v.get("a"), v.get("bb")), (None, None));
    }

    #[test]
    fn an_id_past_the_header_count_is_not_found() {
        // The header says one token; the records hold ids 0 and 1. The
        // model's rows are checked against max_id, so id 1 must not come
        // out of a lookup (it would index past them).
        let mut table = layout(&["a", "bb"], 2);
        assert_eq!(table[..4], 2u32.to_le_bytes());
        table[..4].copy_from_slice(&1u32.to_le_bytes());
        let v = BuiltinVocab::new(leak(table)).unwrap();
        assert_eq!((v.get("a"), v.get("bb")), (Some(0), None));
        assert_eq!(Vocab::Builtin(v).max_id(), Some(0));
    }
}
