//! How the built-in vocabulary's lookup table is laid out, shared by
//! `build.rs` (which lays it out) and the tokenizer (which probes it, and
//! keys a user's vocabulary by the same hash): [`token_hash`] and
//! [`layout`].
//!
//! The hash is Fx (the multiply-rotate hash rustc uses for its own tables) with
//! MurmurHash3's finaliser. The keys are a model's vocabulary, fixed once
//! loaded, so a text can only look entries up, never lengthen a probe chain.
//! Must never: change on one side only (the built-in table is compiled with
//! it), or depend on anything but the bytes (no per-process seed).

use std::hash::Hasher;

/// Fx over 8-byte words, the tail padded and tagged with its length.
#[derive(Default)]
pub struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 59));
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        // MurmurHash3's finaliser: every input bit reaches every output bit,
        // which hashbrown needs (buckets from the low bits, tags from the high).
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// The hash of one token's bytes.
pub fn token_hash(token: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(token);
    h.finish()
}

/// The lookup table of `list` (ids are positions) in `slots` slots (a power
/// of two, more than the tokens, or probing never ends here): the `u32`
/// slot count, the `u16` slots (0 empty, else id + 1, each token at its
/// hash or the next free slot after it), then the start of each token's
/// line in the list joined by newlines, and one past the last line's end.
// build.rs lays the table out; the library only in its tests.
#[cfg_attr(not(test), allow(dead_code))]
pub fn layout(list: &[&str], slots: usize) -> Vec<u8> {
    assert!(list.len() < u16::MAX as usize, "ids must fit a u16 slot");
    assert!(slots.is_power_of_two() && slots >= list.len());
    let mask = slots - 1;
    let mut table = vec![0u16; slots];
    for (id, token) in list.iter().enumerate() {
        let mut i = token_hash(token.as_bytes()) as usize & mask;
        while table[i] != 0 {
            i = (i + 1) & mask;
        }
        table[i] = id as u16 + 1;
    }
    let mut out = Vec::with_capacity(4 + 2 * slots + 4 * (list.len() + 1));
    out.extend_from_slice(&(slots as u32).to_le_bytes());
    for s in table {
        out.extend_from_slice(&s.to_le_bytes());
    }
    let mut start = 0u32;
    for token in list {
        out.extend_from_slice(&start.to_le_bytes());
        start += token.len() as u32 + 1;
    }
    out.extend_from_slice(&start.to_le_bytes());
    out
}
