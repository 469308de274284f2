//! A tokenizer's vocabulary: token → id.
//!
//! Owns its two forms. The built-in model's is laid out by `build.rs` as an
//! open-addressing table over the token list compiled into the binary, so a
//! process that embeds one query pays a few probes, not 30,000 inserts
//! before its first lookup. A user's is read from its `tokenizer.json` into
//! a hash map. Both hash with [`token_hash`]. Must never: panic or allocate
//! on a lookup (the built-in table's entries are read with bounds; its
//! shape is checked once, when opened).

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;

use crate::vocab_layout::{FxHasher, token_hash};

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

/// The built-in vocabulary, all of it borrowed from the binary: the tokens
/// one a line in id order, and a table of `slots` (a power of two of them,
/// `u16` each: 0 empty, else id + 1, placed by [`token_hash`] with linear
/// probing) followed by each line's start (`len + 1` `u32`s, the last one
/// past the final line's end).
#[derive(Clone, Copy)]
pub(crate) struct BuiltinVocab {
    tokens: &'static [u8],
    slots: &'static [u8],
    starts: &'static [u8],
    len: usize,
}

impl fmt::Debug for BuiltinVocab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuiltinVocab({} tokens)", self.len)
    }
}

fn u16_at(bytes: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])
}

fn u32_at(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

impl BuiltinVocab {
    /// The vocabulary of `tokens` (one a line) laid out in `table` (a `u32`
    /// slot count, the slots, the line starts), or `None` if the layout's
    /// shape does not fit the list. Only the shape is checked (no pass over
    /// the table at every start): a lookup reads every entry with bounds, so
    /// an entry that does not fit finds nothing rather than panicking.
    pub(crate) fn new(tokens: &'static str, table: &'static [u8]) -> Option<Self> {
        let slots = u32::from_le_bytes(table.get(..4)?.try_into().ok()?) as usize;
        if !slots.is_power_of_two() {
            return None;
        }
        let (slot_bytes, starts) = table.get(4..)?.split_at_checked(2 * slots)?;
        if starts.len() % 4 != 0 || starts.len() < 4 {
            return None;
        }
        let len = starts.len() / 4 - 1;
        let tokens = tokens.as_bytes();
        let shape = u32_at(starts, 0) == 0 && u32_at(starts, len) as usize == tokens.len() + 1;
        shape.then_some(BuiltinVocab {
            tokens,
            slots: slot_bytes,
            starts,
            len,
        })
    }

    /// Token `id`'s bytes (its line without the newline), if the table's
    /// entry for it lies in the list.
    fn token(&self, id: usize) -> Option<&'static [u8]> {
        if id >= self.len {
            return None;
        }
        let (a, b) = (
            u32_at(self.starts, id) as usize,
            u32_at(self.starts, id + 1) as usize,
        );
        self.tokens.get(a..b.checked_sub(1)?)
    }

    fn get(&self, token: &str) -> Option<u32> {
        let mask = self.slots.len() / 2 - 1;
        let mut i = token_hash(token.as_bytes()) as usize & mask;
        // A table with no empty slot ends after one full round.
        for _ in 0..=mask {
            let id = match u16_at(self.slots, i) {
                0 => return None,
                s => s as usize - 1,
            };
            if self.token(id) == Some(token.as_bytes()) {
                return Some(id as u32);
            }
            i = (i + 1) & mask;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab_layout::layout;

    fn leak(bytes: Vec<u8>) -> &'static [u8] {
        Box::leak(bytes.into_boxed_slice())
    }

    #[test]
    fn a_full_table_finds_every_token_and_ends_for_the_rest() {
        let list = ["a", "b", "##c", "d"];
        let v = BuiltinVocab::new("a\nb\n##c\nd", leak(layout(&list, 4))).unwrap();
        for (id, t) in list.iter().enumerate() {
            assert_eq!(v.get(t), Some(id as u32));
        }
        // No empty slot: the probe stops after one round.
        assert_eq!(v.get("e"), None);
        assert_eq!(Vocab::Builtin(v).max_id(), Some(3));
    }

    #[test]
    fn a_table_that_does_not_fit_its_list_is_refused_or_finds_nothing() {
        let list = ["a", "b"];
        let good = layout(&list, 4);
        assert!(BuiltinVocab::new("a\nb", leak(good.clone())).is_some());
        // Another list, a truncated table, a slot count that is not a power
        // of two: refused.
        assert!(BuiltinVocab::new("a\nbc", leak(good.clone())).is_none());
        assert!(BuiltinVocab::new("a\nb", leak(good[..good.len() - 1].to_vec())).is_none());
        let mut three = good.clone();
        three[0] = 3;
        assert!(BuiltinVocab::new("a\nb", leak(three)).is_none());
        assert!(BuiltinVocab::new("a\nb", &[]).is_none());
        // Slots naming ids past the list, line starts past the text: the
        // lookups find nothing, and never panic.
        let mut past = good.clone();
        for b in &mut past[4..4 + 2 * 4] {
            *b = 0x7f;
        }
        let v = BuiltinVocab::new("a\nb", leak(past)).unwrap();
        assert_eq!((v.get("a"), v.get("b"), v.get("c")), (None, None, None));
        let mut starts = good;
        let at = starts.len() - 8;
        starts[at..at + 4].copy_from_slice(&40u32.to_le_bytes());
        let v = BuiltinVocab::new("a\nb", leak(starts)).unwrap();
        assert_eq!((v.get("a"), v.get("b")), (None, None));
    }
}
