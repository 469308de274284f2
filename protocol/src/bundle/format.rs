//! The bundle's bytes: the format's versions, magic and limits, the
//! signed trailer's layout, a frame's plaintext (canonical bincode of
//! `Vec<Vec<u8>>`, written and split here without bincode's allocations)
//! and its stored, compressed form (a declared length, then one zstd
//! frame). The module doc of `bundle` gives the layout byte by byte.
//!
//! Invariant: `frame_items` accepts exactly the canonical encodings of a
//! non-empty `Vec<Vec<u8>>`, and `decompress_frame` never allocates more
//! than the declared length, which it checks against [`MAX_FRAME_BYTES`]
//! first.
//!
//! Boundary: no cryptography (that is `seal`'s) and no reading or writing of
//! streams (`reader`, `writer`): byte slices in, byte vectors out.

use std::io;
use std::ops::Range;

use bincode::{Decode, Encode};

use super::{BundleError, decode_err};

/// The first 8 bytes of every bundle.
pub const MAGIC: [u8; 8] = *b"AMOSBNDL";
/// The format version this code writes: each frame's plaintext is
/// compressed (zstd) before it is encrypted. The header names its
/// [`Recipient`](super::Recipient).
pub const FORMAT_VERSION: u16 = 5;
/// The same format with a [`PairingProof`](super::PairingProof) after the header (a joiner's
/// first bundle, `amos join --offline`). Written only when a proof is
/// carried, so every other bundle is version [`FORMAT_VERSION`].
pub const PAIRING_FORMAT_VERSION: u16 = 6;
/// A bundle sealed to its recipient's identity (docs/design.md §8.1): the
/// layout of [`FORMAT_VERSION`] with a [`SealedExt`] after the header body
/// (the sender's ephemeral X25519 key, and the pairing proof and postmark
/// it may carry), frames encrypted under a key only the recipient can
/// derive. Written only for a sealed bundle, so a reader of the release
/// before refuses it in one line ("bundle format version 7 is not
/// supported") before reading further.
pub const SEALED_FORMAT_VERSION: u16 = 7;
/// The format amos wrote before frames were compressed: the same layout with
/// each frame's plaintext stored as it is. Still read, never written.
pub const UNCOMPRESSED_FORMAT_VERSION: u16 = 3;
/// [`UNCOMPRESSED_FORMAT_VERSION`] with a [`PairingProof`](super::PairingProof). Still read.
pub const UNCOMPRESSED_PAIRING_FORMAT_VERSION: u16 = 4;
/// The versions older amos wrote, before bundles named their recipient.
pub(super) const OLD_VERSIONS: [u16; 2] = [1, 2];
/// Largest header body.
pub const MAX_HEADER_BYTES: u32 = 64 * 1024;
/// Largest frame as stored (ciphertext and tag included), and largest
/// frame plaintext once decompressed.
pub const MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;
/// The zstd level frames are compressed at (see docs/bench.md, "Bundle
/// compression", for the comparison that chose it).
pub const COMPRESSION_LEVEL: i32 = 3;
/// The first four bytes of a zstd frame (RFC 8878 §3.1.1, little-endian
/// 0xFD2FB528): the only kind of compressed data a frame may hold.
pub(super) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The declared plaintext length that begins a compressed frame.
pub(super) const DECLARED_LEN: usize = 4;
/// Largest trailer body.
pub const MAX_TRAILER_BYTES: u32 = 256;
/// [`BundleWriter::push_fact`](super::BundleWriter::push_fact) closes a frame at this many facts…
pub const FRAME_FACTS: usize = 4096;
/// …or at this many bytes of facts, whichever comes first.
pub const FRAME_TARGET_BYTES: usize = 4 * 1024 * 1024;

pub(super) const PREFIX_LEN: usize = 8 + 2 + 4;
pub(super) const TAG_LEN: usize = 16;

/// What a sealed bundle's header carries after [`BundleHeader`](super::BundleHeader)
/// (format [`SEALED_FORMAT_VERSION`]), covered by the signature like the rest.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub(super) struct SealedExt {
    /// The sender's ephemeral X25519 public key for this bundle.
    pub(super) ephemeral: [u8; 32],
    /// A joiner's pairing proof (what format 6 carries unsealed).
    pub(super) pairing: Option<super::PairingProof>,
    /// A mailbox bundle's place in its sender's log.
    pub(super) postmark: Option<super::Postmark>,
}

/// The signed end of a bundle: the counts the writer could not know when
/// it wrote the header, and its signature over the content hash and them.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub(super) struct BundleTrailer {
    pub(super) frames: u64,
    pub(super) facts: u64,
    pub(super) signature: [u8; 64],
}

pub(super) fn varint_len(v: u64) -> usize {
    if v < 251 {
        1
    } else if v <= u64::from(u16::MAX) {
        3
    } else if v <= u64::from(u32::MAX) {
        5
    } else {
        9
    }
}

pub(super) fn put_varint(out: &mut Vec<u8>, v: u64) {
    // Truncating casts below are guarded by the range checks.
    if v < 251 {
        out.push(v as u8);
    } else if v <= u64::from(u16::MAX) {
        out.push(251);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(252);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The canonical plaintext of a frame (same bytes as bincode of `Vec<Vec<u8>>`).
pub(super) fn encode_frame(facts: &[Vec<u8>], out: &mut Vec<u8>) {
    put_varint(out, facts.len() as u64);
    for f in facts {
        put_varint(out, f.len() as u64);
        out.extend_from_slice(f);
    }
}

pub(super) fn frame_plain_len(facts: &[Vec<u8>]) -> usize {
    varint_len(facts.len() as u64)
        + facts
            .iter()
            .map(|f| varint_len(f.len() as u64) + f.len())
            .sum::<usize>()
}

/// Append the stored form of a compressed frame (format 5/6) whose
/// plaintext is `plain` to `out`: `plain.len()` as u32 LE, then one zstd
/// frame (which records the content size: zstd's default for one-shot
/// compression).
pub(super) fn compress_frame(
    compressor: &mut zstd::bulk::Compressor<'static>,
    plain: &[u8],
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let declared =
        u32::try_from(plain.len()).map_err(|_| io::Error::other("frame plaintext over 4 GiB"))?;
    out.reserve(DECLARED_LEN + zstd::zstd_safe::compress_bound(plain.len()));
    let start = out.len() + DECLARED_LEN;
    out.extend_from_slice(&declared.to_le_bytes());
    // The compressor writes into the capacity after the cursor.
    let mut cursor = io::Cursor::new(out);
    cursor.set_position(start as u64);
    compressor
        .compress_to_buffer(plain, &mut cursor)
        .map(|_| ())
}

/// Read one minimal bincode varint at `*at`.
pub(super) fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let first = *b.get(*at)?;
    *at += 1;
    let (n, min) = match first {
        0..=250 => return Some(first.into()),
        251 => (2, 251),
        252 => (4, 1 << 16),
        253 => (8, 1 << 32),
        _ => return None,
    };
    let bytes = b.get(*at..*at + n)?;
    *at += n;
    let mut v = [0u8; 8];
    v[..n].copy_from_slice(bytes);
    let v = u64::from_le_bytes(v);
    (v >= min).then_some(v)
}

/// Split a frame's plaintext into the byte ranges of its facts' wire
/// encodings. Accepts exactly the canonical bincode encodings of a non-empty
/// `Vec<Vec<u8>>` (minimal varints, nothing left over).
pub(super) fn frame_items(plain: &[u8]) -> Result<Vec<Range<usize>>, BundleError> {
    let bad = |reason: &str| decode_err("frame", reason);
    let mut at = 0;
    let n = read_varint(plain, &mut at).ok_or_else(|| bad("bad fact count"))?;
    if n == 0 {
        return Err(bad("empty frame"));
    }
    // Every fact takes at least its length byte: bound the count before allocating.
    if n > (plain.len() - at) as u64 {
        return Err(bad("fact count exceeds the frame"));
    }
    let mut items = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = read_varint(plain, &mut at).ok_or_else(|| bad("bad fact length"))?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| at.checked_add(len))
            .filter(|end| *end <= plain.len())
            .ok_or_else(|| bad("fact runs past the frame"))?;
        items.push(at..end);
        at = end;
    }
    if at != plain.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(items)
}

/// The plaintext of a compressed frame (format 5/6) whose decrypted bytes
/// are `stored`: the declared length, then exactly one zstd frame that
/// records the same content size and decompresses to exactly that many
/// bytes. The output is allocated at the declared size (at most
/// [`MAX_FRAME_BYTES`], checked first) and decompression stops there, so a
/// decompression bomb costs at most that much memory and is refused.
pub(super) fn decompress_frame(stored: &[u8]) -> Result<Vec<u8>, BundleError> {
    let bad = |reason: &str| decode_err("frame", reason);
    let (declared, z) = stored
        .split_first_chunk::<DECLARED_LEN>()
        .ok_or_else(|| bad("compressed frame is too short"))?;
    let declared = u32::from_le_bytes(*declared);
    if declared > MAX_FRAME_BYTES {
        return Err(BundleError::TooLarge {
            what: "decompressed frame",
            size: declared.into(),
            limit: MAX_FRAME_BYTES.into(),
        });
    }
    // Only zstd's current frame format: no skippable frames, and no legacy
    // formats even where the library was built to read them.
    if !z.starts_with(&ZSTD_MAGIC) {
        return Err(bad("compressed data is not a zstd frame"));
    }
    match zstd::zstd_safe::find_frame_compressed_size(z) {
        Ok(n) if n == z.len() => {}
        Ok(_) => return Err(bad("bytes after the compressed data")),
        Err(_) => return Err(bad("compressed data is corrupt")),
    }
    match zstd::zstd_safe::get_frame_content_size(z) {
        Ok(Some(n)) if n == u64::from(declared) => {}
        Ok(Some(_)) => return Err(bad("compressed data does not match its declared length")),
        Ok(None) => return Err(bad("compressed data does not record its length")),
        Err(_) => return Err(bad("compressed data is corrupt")),
    }
    let mut d = zstd::bulk::Decompressor::new()
        .map_err(|e| io::Error::other(format!("frame decompressor: {e}")))?;
    // The output goes into this Vec's capacity and never past it.
    let mut plain = Vec::with_capacity(declared as usize);
    match d.decompress_to_buffer(z, &mut plain) {
        Ok(n) if n == declared as usize && plain.len() == n => Ok(plain),
        Ok(_) => Err(bad("compressed data does not match its declared length")),
        Err(_) => Err(bad("compressed data is corrupt")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::bundle::{PairingProof, Recipient};
    use crate::{
        AgentId, Fact, FactBody, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryType,
        MeshKey, NodeIdentity, verify_bundle,
    };
    use proptest::prelude::*;

    #[test]
    fn frame_encoding_is_bincode_of_vec_vec_u8() {
        let facts = vec![vec![1u8; 3], vec![], vec![9u8; 300], vec![7u8; 70_000]];
        let mut ours = Vec::new();
        encode_frame(&facts, &mut ours);
        let theirs = bincode::encode_to_vec(&facts, bincode::config::standard()).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(frame_plain_len(&facts), ours.len());
        assert_eq!(frame_items(&ours).unwrap().len(), 4);
        for v in [
            0u64,
            250,
            251,
            65_535,
            65_536,
            u32::MAX.into(),
            u64::from(u32::MAX) + 1,
        ] {
            let mut a = Vec::new();
            put_varint(&mut a, v);
            assert_eq!(
                a,
                bincode::encode_to_vec(v, bincode::config::standard()).unwrap()
            );
            assert_eq!(a.len(), varint_len(v));
        }
    }

    /// Deterministic pseudo-random numbers for the tests (SplitMix64).
    struct Mix(u64);
    impl Mix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Roughly what a store exports: memories of 8 to 24 words from an
    /// English-like vocabulary with frequent words much more frequent, by
    /// 20 agents on three nodes, with random id bytes, and now and then a
    /// team fact. Signatures, node ids and ids are what they are.
    fn realistic_facts(n: u64) -> Vec<Vec<u8>> {
        const COMMON: &[&str] = &[
            "the", "a", "to", "of", "and", "in", "is", "for", "on", "with", "that", "it", "we",
            "build", "release", "test", "deploy", "server", "config", "user", "team", "review",
            "branch", "database", "index", "query", "latency", "cache", "memory", "agent", "node",
            "sync", "bundle", "key", "error", "fix", "after", "before",
        ];
        const SYLLABLES: &[&str] = &[
            "ka", "lo", "mi", "ren", "tor", "vas", "ul", "pe", "shi", "dan", "or", "qui", "bel",
            "zo", "ny", "tra", "es", "gon", "fi", "ar",
        ];
        let mut r = Mix(0x5eed);
        let rare: Vec<String> = (0..800)
            .map(|_| {
                (0..2 + r.below(3))
                    .map(|_| SYLLABLES[r.below(SYLLABLES.len())])
                    .collect()
            })
            .collect();
        let ids: Vec<NodeIdentity> = (1..=3).map(ident).collect();
        (0..n)
            .map(|i| {
                let id = &ids[r.below(3)];
                if i % 8 == 7 {
                    return team_fact(id, i);
                }
                let words: Vec<&str> = (0..8 + r.below(17))
                    .map(|_| {
                        // Frequent words about half the time, the rest
                        // skewed towards the start of the list.
                        if r.below(2) == 0 {
                            COMMON[r.below(COMMON.len())]
                        } else {
                            let k = r.below(rare.len());
                            &rare[k * r.below(rare.len()) / rare.len()]
                        }
                    })
                    .collect();
                let mut text = words.join(" ");
                text[..1].make_ascii_uppercase();
                text.push('.');
                let node = id.node_id();
                let ms = 1_700_000_000_000 + i * 997;
                let random: [u8; 10] = r.next().to_le_bytes()[..]
                    .iter()
                    .chain(&r.next().to_le_bytes()[..2])
                    .copied()
                    .collect::<Vec<_>>()
                    .try_into()
                    .unwrap();
                let fact = Fact {
                    clock: clock(node, ms),
                    body: FactBody::MemoryContent(MemoryContent {
                        id: MemoryId::new(ms, random),
                        fixed: MemoryFixed {
                            owner: AgentId::parse(&format!("agent-{}", r.below(20))).unwrap(),
                            created_ms: ms,
                            origin: node,
                        },
                        kind: MemoryType::default(),
                        text: MemoryText::Plain(text),
                        tags: ["build", "ops", "design"][..r.below(3)]
                            .iter()
                            .map(|t| t.to_string())
                            .collect(),
                        importance: 0.5,
                        confidence: 1.0,
                        pinned: false,
                        expires_ms: None,
                        supersedes: None,
                        validity: Default::default(),
                    }),
                };
                id.sign(fact).unwrap().to_bytes()
            })
            .collect()
    }

    #[test]
    fn compressed_frames_are_smaller_than_their_plaintext() {
        let facts = realistic_facts(6000);
        let mut plain = Vec::new();
        encode_frame(&facts[..FRAME_FACTS], &mut plain);
        let mut c = zstd::bulk::Compressor::new(COMPRESSION_LEVEL).unwrap();
        let mut stored = Vec::new();
        compress_frame(&mut c, &plain, &mut stored).unwrap();
        println!(
            "frame of {FRAME_FACTS} facts: {} bytes plain, {} stored ({:.3})",
            plain.len(),
            stored.len(),
            stored.len() as f64 / plain.len() as f64
        );
        assert!(stored.len() * 10 < plain.len() * 8, "less than 80%");
        assert_eq!(decompress_frame(&stored).unwrap(), plain);
        // Whole bundles through the writer (push_fact's frames), keyed or not.
        for key in [None, Some(key())] {
            let write = |format| {
                let mut w = writer(
                    format,
                    &ident(1),
                    Recipient::AnyPeer,
                    key.as_ref(),
                    [2; 16],
                    None,
                );
                for f in &facts {
                    w.push_fact(f.clone()).unwrap();
                }
                w.finish().unwrap().0
            };
            let (small, big) = (write(Format::Compressed), write(Format::Uncompressed));
            println!("bundle: {} bytes, uncompressed {}", small.len(), big.len());
            assert!(small.len() * 10 < big.len() * 8, "less than 80%");
            assert_eq!(layout(&small).frames.len(), 2);
            assert_eq!(import(&small, key.as_ref()).unwrap().concat(), facts);
            assert_eq!(import(&big, key.as_ref()).unwrap().concat(), facts);
        }
    }

    /// A signed bundle (today's format) whose one frame stores `stored` as
    /// it is, encrypted under `key` with a valid tag: what a sender could
    /// make, so only the frame's contents can refuse it.
    fn with_stored_frame(stored: &[u8], key: Option<&MeshKey>) -> Vec<u8> {
        let mut w = writer(
            Format::Compressed,
            &ident(1),
            Recipient::AnyPeer,
            key,
            [4; 16],
            None,
        );
        w.seal_and_emit(stored.to_vec(), 1).unwrap();
        w.finish().unwrap().0
    }

    fn zstd_of(plain: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(plain, COMPRESSION_LEVEL).unwrap()
    }

    /// `declared` as u32 LE, then `z`.
    fn stored(declared: u32, z: &[u8]) -> Vec<u8> {
        [&declared.to_le_bytes()[..], z].concat()
    }

    /// Offset and size of the content size field of the zstd frame `z`
    /// (RFC 8878 §3.1.1.1).
    fn content_size_field(z: &[u8]) -> (usize, usize) {
        let fhd = z[4];
        let single_segment = fhd & 0x20 != 0;
        let size = match fhd >> 6 {
            0 if single_segment => 1,
            0 => 0,
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let dict = [0, 1, 2, 4][usize::from(fhd & 3)];
        (5 + usize::from(!single_segment) + dict, size)
    }

    #[test]
    fn decompression_bombs_and_malformed_compressed_frames_are_refused() {
        let fact = team_fact(&ident(1), 1);
        let mut plain = Vec::new();
        encode_frame(std::slice::from_ref(&fact), &mut plain);
        let good = zstd_of(&plain);
        let n = plain.len() as u32;
        // A frame with that good one's plaintext but no recorded size.
        let unsized_z = {
            let mut c = zstd::bulk::Compressor::new(COMPRESSION_LEVEL).unwrap();
            c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
                .unwrap();
            c.compress(&plain).unwrap()
        };
        // 64 MiB of zeros compress to a few KiB.
        let zeros = vec![0u8; 64 << 20];
        let bomb = zstd_of(&zeros);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        // The bomb claiming to be as small as the good frame: its recorded
        // content size rewritten, the data left as it is.
        let lying_bomb = {
            let (at, size) = content_size_field(&bomb);
            assert!(size >= 4, "{size}");
            let mut z = bomb.clone();
            z[at..at + size].fill(0);
            z[at..at + 4].copy_from_slice(&n.to_le_bytes());
            z
        };
        let skippable = [&[0x50, 0x2a, 0x4d, 0x18][..], &4u32.to_le_bytes(), &[0; 4]].concat();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "bomb, declared",
                stored(MAX_FRAME_BYTES + 1, &bomb),
                "too large",
            ),
            (
                "bomb, declared at most",
                stored(u32::MAX, &good),
                "too large",
            ),
            (
                "bomb, small declared size",
                stored(n, &bomb),
                "declared length",
            ),
            (
                "bomb, lying content size",
                stored(n, &lying_bomb),
                "corrupt",
            ),
            (
                "no recorded size",
                stored(n, &unsized_z),
                "record its length",
            ),
            ("declared too long", stored(n + 1, &good), "declared length"),
            (
                "declared too short",
                stored(n - 1, &good),
                "declared length",
            ),
            ("truncated", stored(n, &good[..good.len() - 1]), "corrupt"),
            ("header only", stored(n, &good[..6]), "corrupt"),
            ("magic only", stored(n, &good[..4]), "corrupt"),
            ("no data", stored(n, &[]), "not a zstd frame"),
            ("short", vec![1, 0], "too short"),
            ("empty", vec![], "too short"),
            (
                "a byte after it",
                stored(n, &[&good[..], &[0]].concat()),
                "after",
            ),
            (
                "two frames",
                stored(n, &[&good[..], &good[..]].concat()),
                "after",
            ),
            (
                "skippable first",
                stored(n, &[&skippable[..], &good[..]].concat()),
                "not a zstd frame",
            ),
            ("not zstd", stored(n, &plain), "not a zstd frame"),
            (
                "a legacy zstd magic",
                stored(n, &[&[0x27, 0xb5, 0x2f, 0xfd][..], &good[4..]].concat()),
                "not a zstd frame",
            ),
        ];
        let mut damaged = good.clone();
        let last = damaged.len() - 2;
        damaged[last] ^= 0x55;
        let mut cases = cases;
        cases.push(("damaged", stored(n, &damaged), ""));
        // The good frame itself reads: the cases differ from it only as named.
        for key in [None, Some(key())] {
            let ok = with_stored_frame(&stored(n, &good), key.as_ref());
            assert_eq!(import(&ok, key.as_ref()).unwrap(), vec![vec![fact.clone()]]);
            for (what, frame, says) in &cases {
                if frame.is_empty() && key.is_none() {
                    continue; // a zero length there is the terminator
                }
                let bytes = with_stored_frame(frame, key.as_ref());
                // The signature holds, so the frame's problem is named.
                let err = verify_bundle(&bytes[..], key.as_ref()).unwrap_err();
                let line = err.to_string();
                assert!(
                    matches!(
                        err,
                        BundleError::Decode { what: "frame", .. }
                            | BundleError::TooLarge {
                                what: "decompressed frame",
                                ..
                            }
                    ),
                    "{what}: {line}"
                );
                assert!(line.contains(says), "{what}: {line}");
                assert!(!line.contains('\n'), "{what}: {line}");
            }
        }
        // Directly: the bounded decompressor refuses the bomb (its blocks
        // run past the declared size), never more than declared allocated.
        assert!(decompress_frame(&stored(n, &lying_bomb)).is_err());
        assert_eq!(decompress_frame(&stored(n, &good)).unwrap(), plain);
    }

    /// The committed bundles of formats 3 and 4 (protocol/tests/fixtures),
    /// first written by amos's format-3 writer before frames were
    /// compressed: (file name, committed bytes, what the test-only
    /// uncompressed writer makes now). Regenerate with
    /// `AMOS_WRITE_BUNDLE_FIXTURES=1 cargo test -p amos-protocol legacy_fixtures`.
    fn legacy_fixtures() -> Vec<(&'static str, &'static [u8], Vec<u8>)> {
        let id = ident(1);
        let v4 = {
            let mut w = writer(
                Format::Uncompressed,
                &id,
                Recipient::Node(ident(3).node_id()),
                Some(&key()),
                [9; 16],
                Some(PairingProof {
                    invite: [3; 16],
                    proof: [4; 32],
                }),
            );
            for f in sample_frames() {
                w.write_frame(&f).unwrap();
            }
            w.finish().unwrap().0
        };
        vec![
            (
                "bundle-v3-plain.bndl",
                include_bytes!("../../tests/fixtures/bundle-v3-plain.bndl"),
                sample_in(Format::Uncompressed, None),
            ),
            (
                "bundle-v3-encrypted.bndl",
                include_bytes!("../../tests/fixtures/bundle-v3-encrypted.bndl"),
                sample_in(Format::Uncompressed, Some(&key())),
            ),
            (
                "bundle-v4-pairing.bndl",
                include_bytes!("../../tests/fixtures/bundle-v4-pairing.bndl"),
                v4,
            ),
        ]
    }

    #[test]
    fn legacy_fixtures_still_verify_and_import() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for (name, committed, now) in legacy_fixtures() {
            if std::env::var_os("AMOS_WRITE_BUNDLE_FIXTURES").is_some() {
                std::fs::write(dir.join(name), &now).unwrap();
                continue;
            }
            // The test-only writer writes exactly the old layout, so the
            // other tests that use it test the old format.
            assert_eq!(committed, &now[..], "{name}");
            let v = verify_bundle(committed, Some(&key())).unwrap();
            assert_eq!((v.summary().frames, v.summary().facts), (3, 6), "{name}");
            assert_eq!(
                import(committed, Some(&key())).unwrap(),
                sample_frames(),
                "{name}"
            );
            let version = u16::from_le_bytes([committed[8], committed[9]]);
            if name.contains("v4") {
                assert_eq!(version, UNCOMPRESSED_PAIRING_FORMAT_VERSION);
                assert_eq!(
                    v.pairing(),
                    Some(PairingProof {
                        invite: [3; 16],
                        proof: [4; 32]
                    })
                );
                assert_eq!(v.recipient(), Recipient::Node(ident(3).node_id()));
            } else {
                assert_eq!(version, UNCOMPRESSED_FORMAT_VERSION);
                assert_eq!(v.pairing(), None);
            }
            assert_eq!(v.header().encrypted, !name.contains("plain"), "{name}");
            // The same facts in today's format read back the same.
            let today = build_with(&ident(1), Some(&key()), [7; 16], &sample_frames());
            assert_eq!(today[8..10], FORMAT_VERSION.to_le_bytes());
            assert_eq!(import(&today, Some(&key())).unwrap(), sample_frames());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The frame parser accepts exactly bincode's canonical encodings of
        /// a non-empty `Vec<Vec<u8>>`.
        #[test]
        fn frame_parser_matches_bincode(
            facts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..20),
            junk in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let cfg = bincode::config::standard();
            let bytes = bincode::encode_to_vec(&facts, cfg).unwrap();
            let items = frame_items(&bytes).unwrap();
            let back: Vec<Vec<u8>> = items.into_iter().map(|r| bytes[r].to_vec()).collect();
            prop_assert_eq!(&back, &facts);
            for plain in [junk.clone(), [&bytes[..], &junk[..]].concat()] {
                if let Ok(items) = frame_items(&plain) {
                    let (d, used): (Vec<Vec<u8>>, usize) =
                        bincode::decode_from_slice(&plain, cfg).unwrap();
                    prop_assert_eq!(used, plain.len());
                    prop_assert_eq!(bincode::encode_to_vec(&d, cfg).unwrap(), plain.clone());
                    prop_assert_eq!(d.len(), items.len());
                }
            }
        }

        /// Any frame plaintext comes back from its compressed form byte for
        /// byte, and splits into the same facts.
        #[test]
        fn frames_round_trip_through_compression(
            facts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..400), 1..40),
            repeat in 1usize..4,
        ) {
            // Repeated facts as well as random ones (repeats compress).
            let facts: Vec<Vec<u8>> = facts.iter().cycle().take(facts.len() * repeat).cloned().collect();
            let mut plain = Vec::new();
            encode_frame(&facts, &mut plain);
            let mut c = zstd::bulk::Compressor::new(COMPRESSION_LEVEL).unwrap();
            let mut stored = vec![0xaa; 3]; // appends after what is there
            compress_frame(&mut c, &plain, &mut stored).unwrap();
            prop_assert_eq!(&stored[..3], &[0xaa; 3]);
            let back = decompress_frame(&stored[3..]).unwrap();
            prop_assert_eq!(&back, &plain);
            let items = frame_items(&back).unwrap();
            let got: Vec<Vec<u8>> = items.into_iter().map(|r| back[r].to_vec()).collect();
            prop_assert_eq!(got, facts);
        }

        /// Arbitrary bytes after a declared length and zstd's magic never
        /// panic the decompressor, and what it accepts is the declared size.
        #[test]
        fn arbitrary_compressed_frames_never_panic(
            declared in prop_oneof![0u32..2000, any::<u32>()],
            tail in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let z = [&ZSTD_MAGIC[..], &tail].concat();
            for candidate in [stored(declared, &z), stored(declared, &tail)] {
                if let Ok(plain) = decompress_frame(&candidate) {
                    prop_assert_eq!(plain.len() as u64, u64::from(declared));
                }
            }
        }
    }
}
