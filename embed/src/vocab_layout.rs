//! How the built-in vocabulary's lookup table is laid out, shared by
//! `build.rs` (which lays it out) and the tokenizer (which reads it, and
//! keys a user's vocabulary by the same hash): [`token_hash`] and
//! [`layout`]. The table is the vocabulary itself, bucketed by hash (no
//! token list beside it), so the binary carries 283 KB for it rather than
//! tokenizer.json's 446 KB, and a process builds nothing before its first
//! lookup.
//!
//! The hash is Fx (the multiply-rotate hash rustc uses for its own tables) with
//! MurmurHash3's finaliser. The keys are a model's vocabulary, fixed once
//! loaded, so a text can only look entries up, never lengthen a bucket.
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

/// The prefix the built-in layout keeps as a flag rather than as bytes:
/// WordPiece's continuing-subword mark, on a fifth of BERT's tokens.
pub const CONTINUED: &str = "##";

/// The length byte's flag for a token that began with [`CONTINUED`].
pub const CONTINUED_FLAG: u8 = 0x80;

/// A token as the layout keeps it: [`CONTINUED_FLAG`] and the rest for a
/// token that begins with [`CONTINUED`], else no flag and the whole token.
/// Both the layout and its lookups split a token here, so they cannot
/// disagree.
pub fn split_continued(token: &str) -> (u8, &[u8]) {
    match token.strip_prefix(CONTINUED) {
        Some(body) => (CONTINUED_FLAG, body.as_bytes()),
        None => (0, token.as_bytes()),
    }
}

/// The buckets a token list of `tokens` is laid out in: a power of two,
/// four to eight tokens to a bucket.
#[cfg_attr(not(test), allow(dead_code))]
pub fn buckets_for(tokens: usize) -> usize {
    (tokens / 8).max(1).next_power_of_two()
}

/// The lookup table of `list` (ids are positions) in `buckets` buckets (a
/// power of two): the `u32` token count and bucket count, `buckets + 1`
/// `u32` offsets (bucket `b`'s records lie between offsets `b` and `b + 1`
/// of the record area that follows), then each bucket's records, tokens
/// put in bucket `token_hash(token) & (buckets - 1)`: a length byte
/// ([`CONTINUED_FLAG`] set and the prefix dropped for a token that began
/// with [`CONTINUED`]), the `u16` id, the token's bytes. All little-endian.
// build.rs lays the table out; the library only in its tests.
#[cfg_attr(not(test), allow(dead_code))]
pub fn layout(list: &[&str], buckets: usize) -> Vec<u8> {
    assert!(list.len() <= u16::MAX as usize, "ids must fit a u16");
    assert!(buckets.is_power_of_two());
    let mask = buckets - 1;
    let mut records = vec![Vec::new(); buckets];
    for (id, token) in list.iter().enumerate() {
        let (flag, body) = split_continued(token);
        assert!(
            body.len() < usize::from(CONTINUED_FLAG),
            "token {token:?} is too long"
        );
        let r = &mut records[token_hash(token.as_bytes()) as usize & mask];
        r.push(flag | body.len() as u8);
        r.extend_from_slice(&(id as u16).to_le_bytes());
        r.extend_from_slice(body);
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(list.len() as u32).to_le_bytes());
    out.extend_from_slice(&(buckets as u32).to_le_bytes());
    let mut at = 0u32;
    for r in &records {
        out.extend_from_slice(&at.to_le_bytes());
        at += r.len() as u32;
    }
    out.extend_from_slice(&at.to_le_bytes());
    for r in &records {
        out.extend_from_slice(r);
    }
    out
}
