//! Bundle files: signed, optionally encrypted, streamed batches of facts for
//! carrying state across an air gap (`amos bundle export` / `import`).
//!
//! # Format (version 5), byte by byte
//!
//! All fixed-width integers are little-endian unless marked BE. "bincode" is
//! bincode 2 in its standard configuration (varint integers: a value below
//! 251 is one byte, otherwise a marker byte 251/252/253 followed by the value
//! as u16/u32/u64 LE; byte arrays of fixed size are raw, `Vec`s and `String`s
//! are a varint length then the items). Every varint must be minimal and
//! every bincode value must be exactly the canonical encoding of what it
//! decodes to: a reader refuses anything else.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `AMOSBNDL` |
//! | 8 | 2 | format version, u16 = 5 (6 with a pairing proof, below). Versions 3 and 4 are read too: the same layout with frames not compressed ([Older formats](#older-formats)). A reader refuses any other value *before reading further* ("bundle format version N is not supported"); versions 1 and 2, which older amos wrote without a recipient, with a message saying to export again |
//! | 10 | 4 | header length `H`, u32, at most 64 KiB ([`MAX_HEADER_BYTES`]) |
//! | 14 | `H` | header body: bincode of [`BundleHeader`] = `sender` (32 bytes, the NodeId), `recipient` ([`Recipient`]: varint 0 = any peer of the sender, or varint 1 then the 32-byte NodeId of the one node that may import it), `created` ([`Hlc`]: varint u64 `wall_ms`, varint u32 `logical`, 32-byte node), `scopes` (varint count, then each a varint length and UTF-8), `encrypted` (1 byte, 0 or 1), `nonce_seed` (16 bytes), `key_check` (16 bytes); in version 6 (and 4) followed by bincode of [`PairingProof`] (16 + 32 bytes) |
//!
//! The *header bytes* are offsets 0 .. 14 + `H`; `header_hash` = BLAKE3 of them.
//! The header bytes (recipient included) are covered by the trailer's
//! signature (through `content_hash`) and, when encrypted, by every frame's
//! tag (through `header_hash`): nobody but the sender can re-address a
//! bundle. An importer refuses a bundle whose recipient is another node.
//! `key_check` is the first 16 bytes of `blake3::keyed_hash(mesh key,
//! b"amos-bundle-key-check")` when `encrypted`, all zeros otherwise. It lets a
//! reader tell "wrong key" from "corrupt file"; it is the same for every
//! bundle made under one key (bundles are already linkable by `sender`).
//!
//! Then frames `i = 0, 1, 2, …`, each:
//!
//! | size | field |
//! |---|---|
//! | 4 | frame length `L`, u32, 1 ..= 16 MiB ([`MAX_FRAME_BYTES`]); checked before anything is allocated |
//! | `L` | the frame bytes |
//!
//! The *plaintext* of a frame is bincode of `Vec<Vec<u8>>`: a varint count
//! (at least 1), then for each fact a varint length and its wire encoding
//! ([`SignedFact::to_bytes`], at most [`codec::MAX_FACT_BYTES`]); it is at
//! most 16 MiB ([`MAX_FRAME_BYTES`]). It is stored compressed:
//!
//! | size | field |
//! |---|---|
//! | 4 | declared length `D`, u32: the plaintext's length, at most 16 MiB ([`MAX_FRAME_BYTES`]) |
//! | rest | exactly one zstd frame (RFC 8878) of the plaintext: it begins with zstd's magic `28 B5 2F FD` (so no skippable frame and no legacy zstd format), it records its content size, which equals `D`, and nothing follows it |
//!
//! amos compresses each frame in one shot at level [`COMPRESSION_LEVEL`]
//! (3), without a dictionary or zstd's checksum (the tag and the signature
//! cover every byte). Unencrypted, the frame bytes are this *stored form*.
//! Encrypted, they are XChaCha20-Poly1305 ciphertext of it followed by the
//! 16-byte tag, with
//!
//! * key = `blake3::derive_key("amos bundle v1 frame encryption key", mesh key)`,
//! * nonce (24 bytes) = `nonce_seed` (16) ‖ `i` as u64 BE (8),
//! * associated data (40 bytes) = `header_hash` (32) ‖ `i` as u64 BE (8),
//!
//! so a frame cannot be altered, reordered, dropped, duplicated or moved into
//! another bundle without failing its tag.
//!
//! A frame length of 0 (4 zero bytes) ends the frames. Then the trailer:
//!
//! | size | field |
//! |---|---|
//! | 4 | trailer length `T`, u32, at most 256 |
//! | `T` | bincode of `BundleTrailer { frames: u64, facts: u64, signature: [u8; 64] }` |
//!
//! `signature` is the sender's ed25519 signature (checked with
//! `verify_strict` against `header.sender`) over
//! `b"amos-bundle-v1\0"` ‖ `content_hash` (32) ‖ `frames` as u64 BE ‖ `facts` as u64 BE,
//! where `content_hash` = BLAKE3 of every byte of the file before the trailer
//! length (header bytes, every frame length and frame, and the zero
//! terminator). Nothing may follow the trailer.
//!
//! The counts live in the signed trailer, not in the header, because export
//! streams: the writer cannot know them when it writes the header, and it
//! never seeks back.
//!
//! The header is never encrypted: sender, recipient, creation clock and
//! scopes are readable without the key (so a reader can say whose bundle it is and that
//! a key is needed); only facts are confidential. Frame sizes, and so
//! roughly the number of facts and how well they compressed, are visible
//! too.
//!
//! # Compression
//!
//! *Bounded.* A reader checks `D` against [`MAX_FRAME_BYTES`] before it
//! allocates anything, checks that the zstd frame is one frame of the
//! current format recording `D` as its size, then decompresses into a
//! buffer of capacity `D` that zstd never writes past: a frame that would
//! decompress to more (a decompression bomb) costs at most `D` bytes and is
//! refused in one line ([`BundleError::TooLarge`] "decompressed frame", or
//! [`BundleError::Decode`] "frame"), like every other malformed compressed
//! frame; nothing in it can panic or run out of memory.
//!
//! *Canonical bytes.* The strict rule (a reader refuses non-canonical
//! bytes) applies to the decompressed plaintext, which must be canonical
//! bincode as before, and to the stored form around the zstd data (`D`
//! exact, one frame, its size recorded, nothing after it). The compressed
//! bytes themselves need not be what this writer would make: zstd has many
//! valid encodings of one input, and which one it makes changes with its
//! version and level, so requiring one would tie the format to one build
//! of one library. That lets no one else change a bundle: the trailer
//! signature covers every stored byte (and the tag, when encrypted), so only
//! the sender chooses the encoding, as it already chooses the nonce seed
//! and the clock. The content hash ([`VerifiedBundle::content_hash`])
//! identifies a bundle's bytes, not its facts, as before.
//!
//! *Compress, then encrypt.* The known attacks on compressing before
//! encrypting (CRIME, BREACH) need an attacker who gets chosen data
//! compressed together with a secret, again and again, and watches the
//! sizes. A bundle is written once, offline, by its signer, from its own
//! store; nobody mixes data into it interactively and no oracle answers.
//! What is visible is each frame's compressed size, as frame sizes were
//! before.
//!
//! # Older formats
//!
//! Versions 3 and 4, which amos wrote before frames were compressed, have
//! the same layout except that each frame's stored form is the plaintext
//! itself (no declared length, no zstd), so the tag is counted in the
//! 16 MiB with the plaintext. They are read exactly as before and never
//! written; `protocol/tests/fixtures` holds bundles of both, written by the
//! format-3 writer, that the tests import.
//!
//! # Reading
//!
//! Import is two passes over the same bytes, so memory stays bounded by a
//! few frames whatever the bundle size:
//!
//! 1. [`verify_bundle`] checks everything — header, every frame's tag and
//!    compressed form, every fact's decoding, validation and signature, the
//!    trailer signature, the counts, and that nothing follows — and keeps
//!    only a BLAKE3 hash of each frame ([`VerifiedBundle`]).
//! 2. [`read_verified`] reads the bytes again and hands each frame's facts to
//!    the caller as [`Verified`] facts. Each frame must hash to what pass 1
//!    recorded (so signatures are not checked twice, and a file that changed
//!    between the passes is refused before the changed frame is applied);
//!    the header and trailer must match too. Frames before a change may have
//!    been applied by then; they are verified facts, and applying a fact
//!    twice is a no-op, so the caller's store stays consistent.
//!
//! Keys: an encrypted bundle needs the mesh key ([`BundleError::NeedsKey`],
//! [`BundleError::WrongKey`]). An unencrypted bundle is read whether or not a
//! key is given; callers that require encryption check
//! [`BundleHeader::encrypted`].
//!
//! # Signature checking
//!
//! Facts are checked by the one fact verifier, [`crate::verify`] (canonical
//! decoding, validation, ed25519 batch verification with `verify_strict`'s
//! extra conditions checked per fact — the same code live sync uses), half a
//! frame per batch, on scoped worker threads, one per available core, while
//! the calling thread reads, decrypts and decompresses the next frame.
//!
//! Boundary: no I/O besides the `Read`/`Write` values callers pass in; the
//! nonce seed comes from the caller.

use std::io::{self, Read, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use bincode::{Decode, Encode};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ed25519_dalek::{Signature, VerifyingKey};

use crate::codec::{self, MAX_FACT_BYTES, WireFact};
use crate::mesh::MeshKey;
use crate::verify::{self, KeyCache};
use crate::{Hlc, NodeId, NodeIdentity, ProtocolError, SignedFact, Verified};

/// The first 8 bytes of every bundle.
pub const MAGIC: [u8; 8] = *b"AMOSBNDL";
/// The format version this code writes: each frame's plaintext is
/// compressed (zstd) before it is encrypted. The header names its
/// [`Recipient`].
pub const FORMAT_VERSION: u16 = 5;
/// The same format with a [`PairingProof`] after the header (a joiner's
/// first bundle, `amos join --offline`). Written only when a proof is
/// carried, so every other bundle is version [`FORMAT_VERSION`].
pub const PAIRING_FORMAT_VERSION: u16 = 6;
/// The format amos wrote before frames were compressed: the same layout with
/// each frame's plaintext stored as it is. Still read, never written.
pub const UNCOMPRESSED_FORMAT_VERSION: u16 = 3;
/// [`UNCOMPRESSED_FORMAT_VERSION`] with a [`PairingProof`]. Still read.
pub const UNCOMPRESSED_PAIRING_FORMAT_VERSION: u16 = 4;
/// The versions older amos wrote, before bundles named their recipient.
const OLD_VERSIONS: [u16; 2] = [1, 2];
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
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The declared plaintext length that begins a compressed frame.
const DECLARED_LEN: usize = 4;
/// Largest trailer body.
pub const MAX_TRAILER_BYTES: u32 = 256;
/// [`BundleWriter::push_fact`] closes a frame at this many facts…
pub const FRAME_FACTS: usize = 4096;
/// …or at this many bytes of facts, whichever comes first.
pub const FRAME_TARGET_BYTES: usize = 4 * 1024 * 1024;

const PREFIX_LEN: usize = 8 + 2 + 4;
const TAG_LEN: usize = 16;
const KEY_CHECK_MSG: &[u8] = b"amos-bundle-key-check";
const FRAME_KEY_CONTEXT: &str = "amos bundle v1 frame encryption key";
const SIGN_DOMAIN: &[u8] = b"amos-bundle-v1\0";
/// Below this many facts a frame is verified on the calling thread.
const PARALLEL_MIN_FACTS: usize = 256;

/// What a bundle says about itself (readable without the mesh key).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct BundleHeader {
    /// The node that made and signed the bundle.
    pub sender: NodeId,
    /// Who may import it (signed with the rest of the header).
    pub recipient: Recipient,
    /// The sender's clock when the export began.
    pub created: Hlc,
    /// The scopes the export covered, as the sender named them.
    pub scopes: Vec<String>,
    /// Whether frames are encrypted under the mesh key.
    pub encrypted: bool,
    nonce_seed: [u8; 16],
    key_check: [u8; 16],
}

/// Who a bundle is for, as its sender signed it.
///
/// `amos bundle export --for PEER` addresses the bundle to that peer and no
/// other node will import it. An export by scope (`--scope`) or of
/// everything is not made for one peer: it says so explicitly
/// ([`Recipient::AnyPeer`]), and any node that has the sender registered as
/// a peer may import it (through its own policy for the sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub enum Recipient {
    /// Any node that has the sender as a peer.
    AnyPeer,
    /// This node only.
    Node(NodeId),
}

impl Recipient {
    /// Whether the node `me` may import a bundle addressed this way.
    pub fn admits(&self, me: &NodeId) -> bool {
        match self {
            Recipient::AnyPeer => true,
            Recipient::Node(n) => n == me,
        }
    }
}

impl std::fmt::Display for Recipient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recipient::AnyPeer => f.write_str("any peer"),
            Recipient::Node(n) => write!(f, "{n}"),
        }
    }
}

/// A joiner's proof that it holds a pairing code (docs/design.md §7, `amos join
/// --offline`): the invite's public id and a proof of its secret bound to
/// the joiner and the inviter (`pairing::join_proof` with
/// `ProofBinding::Offline`). It is covered by the bundle's signature, so it
/// speaks for the bundle's sender only; it lets the inviter accept that
/// sender as a new peer, once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct PairingProof {
    pub invite: [u8; 16],
    pub proof: [u8; 32],
}

/// Counts of a written or verified bundle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BundleSummary {
    pub frames: u64,
    pub facts: u64,
    /// Size of the whole file.
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
struct BundleTrailer {
    frames: u64,
    facts: u64,
    signature: [u8; 64],
}

/// Why a bundle was refused. Every variant displays as one line fit for a user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    #[error("not an amos bundle (bad magic bytes)")]
    NotABundle,
    #[error("bundle format version {0} is not supported")]
    UnsupportedVersion(u16),
    #[error(
        "bundle format version {0} was written by an older amos and names no recipient; export it again"
    )]
    OldVersion(u16),
    #[error("bundle is truncated")]
    Truncated,
    #[error("bundle {what} is too large: {size} bytes (limit {limit})")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("bundle is corrupt or was tampered with")]
    Tampered,
    #[error("bundle was encrypted with a different mesh key")]
    WrongKey,
    #[error("bundle is encrypted; set the mesh key")]
    NeedsKey,
    #[error("bundle frame {frame}, fact {index}: bad signature")]
    BadFactSignature { frame: u64, index: u64 },
    #[error("bundle frame {frame}, fact {index}: {error}")]
    BadFact {
        frame: u64,
        index: u64,
        error: ProtocolError,
    },
    #[error("bundle is corrupt or was tampered with: its signature does not verify")]
    BadSignature,
    #[error("bundle has unexpected bytes after its end")]
    TrailingBytes,
    #[error("bundle {what} does not decode: {reason}")]
    Decode { what: &'static str, reason: String },
    #[error("bundle i/o: {0}")]
    Io(#[from] io::Error),
}

/// The reason inside a codec error, without the codec's own "undecodable X"
/// wording (the bundle error names the part itself).
fn codec_reason(e: ProtocolError) -> String {
    match e {
        ProtocolError::Decode { reason, .. } => reason,
        e => e.to_string(),
    }
}

fn decode_err(what: &'static str, reason: impl Into<String>) -> BundleError {
    BundleError::Decode {
        what,
        reason: reason.into(),
    }
}

/// Pass 2 failed: either the bundle ([`ReadError::Bundle`]) or the caller's
/// `apply` ([`ReadError::Apply`]).
#[derive(Debug, thiserror::Error)]
pub enum ReadError<E> {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("{0}")]
    Apply(E),
}

// ---------------------------------------------------------------------------
// Shared pieces

fn key_check(key: &MeshKey) -> [u8; 16] {
    let h = blake3::keyed_hash(key.as_bytes(), KEY_CHECK_MSG);
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

fn frame_cipher(key: &MeshKey) -> XChaCha20Poly1305 {
    let k = blake3::derive_key(FRAME_KEY_CONTEXT, key.as_bytes());
    XChaCha20Poly1305::new(&k.into())
}

fn frame_nonce(seed: &[u8; 16], index: u64) -> XNonce {
    let mut n = [0u8; 24];
    n[..16].copy_from_slice(seed);
    n[16..].copy_from_slice(&index.to_be_bytes());
    n.into()
}

fn frame_aad(header_hash: &[u8; 32], index: u64) -> [u8; 40] {
    let mut a = [0u8; 40];
    a[..32].copy_from_slice(header_hash);
    a[32..].copy_from_slice(&index.to_be_bytes());
    a
}

fn signed_message(content_hash: &[u8; 32], frames: u64, facts: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(SIGN_DOMAIN.len() + 48);
    m.extend_from_slice(SIGN_DOMAIN);
    m.extend_from_slice(content_hash);
    m.extend_from_slice(&frames.to_be_bytes());
    m.extend_from_slice(&facts.to_be_bytes());
    m
}

fn varint_len(v: u64) -> usize {
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

fn put_varint(out: &mut Vec<u8>, v: u64) {
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
fn encode_frame(facts: &[Vec<u8>], out: &mut Vec<u8>) {
    put_varint(out, facts.len() as u64);
    for f in facts {
        put_varint(out, f.len() as u64);
        out.extend_from_slice(f);
    }
}

fn frame_plain_len(facts: &[Vec<u8>]) -> usize {
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
fn compress_frame(
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
fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
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
fn frame_items(plain: &[u8]) -> Result<Vec<Range<usize>>, BundleError> {
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

// ---------------------------------------------------------------------------
// Writing

/// Streams a bundle: header on creation, one frame per [`write_frame`]
/// (or per [`FRAME_FACTS`] facts with [`push_fact`]), trailer on [`finish`].
/// Memory use is bounded by one frame (its plaintext and its compressed
/// form).
///
/// The writer trusts its input: feed it wire bytes of facts from the store
/// (which holds only verified facts). A bad fact makes the whole bundle
/// unreadable.
///
/// [`write_frame`]: BundleWriter::write_frame
/// [`push_fact`]: BundleWriter::push_fact
/// [`finish`]: BundleWriter::finish
pub struct BundleWriter<W: Write> {
    out: W,
    identity: NodeIdentity,
    cipher: Option<XChaCha20Poly1305>,
    nonce_seed: [u8; 16],
    header_hash: [u8; 32],
    hasher: blake3::Hasher,
    summary: BundleSummary,
    pending: Vec<Vec<u8>>,
    pending_bytes: usize,
    /// `None` writes the uncompressed format 3/4 (tests only).
    compressor: Option<zstd::bulk::Compressor<'static>>,
    buf: Vec<u8>,
    zbuf: Vec<u8>,
    failed: bool,
}

impl<W: Write> std::fmt::Debug for BundleWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BundleWriter")
            .field("sender", &self.identity.node_id())
            .field("encrypted", &self.cipher.is_some())
            .field("compressed", &self.compressor.is_some())
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

impl<W: Write> BundleWriter<W> {
    /// Write the header. `key` = encrypt under the mesh key; `nonce_seed`
    /// must be fresh randomness (it must never repeat under one key).
    pub fn new(
        out: W,
        identity: &NodeIdentity,
        recipient: Recipient,
        created: Hlc,
        scopes: Vec<String>,
        key: Option<&MeshKey>,
        nonce_seed: [u8; 16],
    ) -> Result<Self, BundleError> {
        Self::with_pairing(
            out, identity, recipient, created, scopes, key, nonce_seed, None,
        )
    }

    /// [`BundleWriter::new`], carrying a joiner's [`PairingProof`] after the
    /// header (format version [`PAIRING_FORMAT_VERSION`]).
    #[allow(clippy::too_many_arguments)]
    pub fn with_pairing(
        out: W,
        identity: &NodeIdentity,
        recipient: Recipient,
        created: Hlc,
        scopes: Vec<String>,
        key: Option<&MeshKey>,
        nonce_seed: [u8; 16],
        pairing: Option<PairingProof>,
    ) -> Result<Self, BundleError> {
        let compressor = zstd::bulk::Compressor::new(COMPRESSION_LEVEL)
            .map_err(|e| io::Error::other(format!("frame compressor: {e}")))?;
        Self::start(
            out,
            identity,
            recipient,
            created,
            scopes,
            key,
            nonce_seed,
            pairing,
            Some(compressor),
        )
    }

    /// A writer of the uncompressed format (3, or 4 with a proof), which
    /// amos no longer writes: for the tests that prove it is still read.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    fn uncompressed(
        out: W,
        identity: &NodeIdentity,
        recipient: Recipient,
        created: Hlc,
        scopes: Vec<String>,
        key: Option<&MeshKey>,
        nonce_seed: [u8; 16],
        pairing: Option<PairingProof>,
    ) -> Result<Self, BundleError> {
        Self::start(
            out, identity, recipient, created, scopes, key, nonce_seed, pairing, None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        out: W,
        identity: &NodeIdentity,
        recipient: Recipient,
        created: Hlc,
        scopes: Vec<String>,
        key: Option<&MeshKey>,
        nonce_seed: [u8; 16],
        pairing: Option<PairingProof>,
        compressor: Option<zstd::bulk::Compressor<'static>>,
    ) -> Result<Self, BundleError> {
        let header = BundleHeader {
            sender: identity.node_id(),
            recipient,
            created,
            scopes,
            encrypted: key.is_some(),
            nonce_seed,
            key_check: key.map(key_check).unwrap_or([0; 16]),
        };
        let mut body = codec::encode(&header);
        let proof = match pairing {
            Some(p) if !body.is_empty() => {
                body.extend_from_slice(&codec::encode(&p));
                true
            }
            _ => false,
        };
        let version = match (compressor.is_some(), proof) {
            (true, false) => FORMAT_VERSION,
            (true, true) => PAIRING_FORMAT_VERSION,
            (false, false) => UNCOMPRESSED_FORMAT_VERSION,
            (false, true) => UNCOMPRESSED_PAIRING_FORMAT_VERSION,
        };
        if body.is_empty() || body.len() > MAX_HEADER_BYTES as usize {
            // An empty encoding means it passed the codec's own limit.
            let scopes: usize = header.scopes.iter().map(String::len).sum();
            return Err(BundleError::TooLarge {
                what: "header",
                size: body.len().max(scopes) as u64,
                limit: MAX_HEADER_BYTES.into(),
            });
        }
        let mut head = Vec::with_capacity(PREFIX_LEN + body.len());
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&version.to_le_bytes());
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        head.extend_from_slice(&body);
        let mut w = BundleWriter {
            out,
            identity: NodeIdentity::from_secret(identity.secret()),
            cipher: key.map(frame_cipher),
            nonce_seed,
            header_hash: *blake3::hash(&head).as_bytes(),
            hasher: blake3::Hasher::new(),
            summary: BundleSummary::default(),
            pending: Vec::new(),
            pending_bytes: 0,
            compressor,
            buf: Vec::new(),
            zbuf: Vec::new(),
            failed: false,
        };
        w.emit(&head, true)?;
        Ok(w)
    }

    fn emit(&mut self, bytes: &[u8], hashed: bool) -> Result<(), BundleError> {
        if let Err(e) = self.out.write_all(bytes) {
            self.failed = true;
            return Err(e.into());
        }
        if hashed {
            self.hasher.update(bytes);
        }
        self.summary.bytes += bytes.len() as u64;
        Ok(())
    }

    fn check_usable(&self) -> Result<(), BundleError> {
        if self.failed {
            Err(io::Error::other("bundle writer failed earlier; the bundle is incomplete").into())
        } else {
            Ok(())
        }
    }

    /// Write one frame holding `facts` (wire bytes of signed facts), in
    /// order. An empty slice writes nothing.
    pub fn write_frame(&mut self, facts: &[Vec<u8>]) -> Result<(), BundleError> {
        self.check_usable()?;
        if facts.is_empty() {
            return Ok(());
        }
        if let Some(f) = facts.iter().find(|f| f.len() > MAX_FACT_BYTES) {
            return Err(BundleError::TooLarge {
                what: "fact",
                size: f.len() as u64,
                limit: MAX_FACT_BYTES as u64,
            });
        }
        // Uncompressed, the tag is part of the frame; compressed, the
        // plaintext alone is bounded here and the stored frame below.
        let tag = if self.cipher.is_some() { TAG_LEN } else { 0 };
        let plain = frame_plain_len(facts);
        let size = plain + if self.compressor.is_some() { 0 } else { tag };
        if size > MAX_FRAME_BYTES as usize {
            return Err(BundleError::TooLarge {
                what: "frame",
                size: size as u64,
                limit: MAX_FRAME_BYTES.into(),
            });
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.reserve(plain);
        encode_frame(facts, &mut buf);
        self.write_plain(buf, facts.len() as u64)
    }

    /// Compress (unless writing format 3/4), encrypt (if keyed) and write
    /// one frame whose plaintext is `plain` (`plain.len()` ≤
    /// [`MAX_FRAME_BYTES`], checked by the caller).
    fn write_plain(&mut self, plain: Vec<u8>, facts: u64) -> Result<(), BundleError> {
        let Some(compressor) = &mut self.compressor else {
            return self.seal_and_emit(plain, facts);
        };
        let tag = if self.cipher.is_some() { TAG_LEN } else { 0 };
        let mut z = std::mem::take(&mut self.zbuf);
        z.clear();
        // Room for the tag too: encryption appends it in place.
        z.reserve(DECLARED_LEN + zstd::zstd_safe::compress_bound(plain.len()) + tag);
        let res = compress_frame(compressor, &plain, &mut z);
        let size = z.len() + tag;
        let res = match res {
            Err(e) => Err(io::Error::other(format!("frame compression failed: {e}")).into()),
            // Only a frame of nearly incompressible facts close to the limit.
            Ok(_) if size > MAX_FRAME_BYTES as usize => Err(BundleError::TooLarge {
                what: "frame",
                size: size as u64,
                limit: MAX_FRAME_BYTES.into(),
            }),
            Ok(_) => self.seal_and_emit(z, facts),
        };
        // Keep both buffers for the next frame (seal_and_emit keeps the one
        // it was given in `buf`).
        self.zbuf = std::mem::replace(&mut self.buf, plain);
        res
    }

    /// Encrypt (if keyed) and write one frame whose stored plaintext is
    /// `buf` (compressed already, in format 5/6).
    fn seal_and_emit(&mut self, mut buf: Vec<u8>, facts: u64) -> Result<(), BundleError> {
        let index = self.summary.frames;
        if let Some(cipher) = &self.cipher {
            let aad = frame_aad(&self.header_hash, index);
            if cipher
                .encrypt_in_place(&frame_nonce(&self.nonce_seed, index), &aad, &mut buf)
                .is_err()
            {
                self.failed = true;
                return Err(io::Error::other("frame encryption failed").into());
            }
        }
        let res = self
            .emit(&(buf.len() as u32).to_le_bytes(), true)
            .and_then(|()| self.emit(&buf, true));
        self.buf = buf;
        res?;
        self.summary.frames += 1;
        self.summary.facts += facts;
        Ok(())
    }

    /// Buffer one fact; a frame is written every [`FRAME_FACTS`] facts or
    /// [`FRAME_TARGET_BYTES`] bytes. [`BundleWriter::finish`] writes the rest.
    pub fn push_fact(&mut self, fact: Vec<u8>) -> Result<(), BundleError> {
        self.check_usable()?;
        if fact.len() > MAX_FACT_BYTES {
            return Err(BundleError::TooLarge {
                what: "fact",
                size: fact.len() as u64,
                limit: MAX_FACT_BYTES as u64,
            });
        }
        self.pending_bytes += fact.len();
        self.pending.push(fact);
        if self.pending.len() >= FRAME_FACTS || self.pending_bytes >= FRAME_TARGET_BYTES {
            self.flush_pending()?;
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<(), BundleError> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let res = self.write_frame(&pending);
        self.pending = pending;
        self.pending.clear();
        res
    }

    /// Counts so far (frames and facts written, bytes written).
    pub fn summary(&self) -> BundleSummary {
        self.summary
    }

    /// Write the terminator and the signed trailer, flush, and hand back the
    /// output with the final counts.
    pub fn finish(mut self) -> Result<(W, BundleSummary), BundleError> {
        self.check_usable()?;
        self.flush_pending()?;
        self.emit(&0u32.to_le_bytes(), true)?;
        let content_hash = *self.hasher.finalize().as_bytes();
        let trailer = BundleTrailer {
            frames: self.summary.frames,
            facts: self.summary.facts,
            signature: self.identity.sign_raw(&signed_message(
                &content_hash,
                self.summary.frames,
                self.summary.facts,
            )),
        };
        let body = codec::encode(&trailer);
        self.emit(&(body.len() as u32).to_le_bytes(), false)?;
        self.emit(&body, false)?;
        self.out.flush()?;
        Ok((self.out, self.summary))
    }
}

// ---------------------------------------------------------------------------
// Reading: the byte source

struct Input<R> {
    r: R,
    hasher: blake3::Hasher,
    hashing: bool,
    bytes: u64,
}

fn eof_is_truncated(e: io::Error) -> BundleError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        BundleError::Truncated
    } else {
        BundleError::Io(e)
    }
}

impl<R: Read> Input<R> {
    fn new(r: R) -> Self {
        Input {
            r,
            hasher: blake3::Hasher::new(),
            hashing: true,
            bytes: 0,
        }
    }

    fn account(&mut self, bytes: &[u8]) {
        if self.hashing {
            self.hasher.update(bytes);
        }
        self.bytes += bytes.len() as u64;
    }

    /// Read up to `buf.len()` bytes; returns how many (fewer only at end of input).
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, BundleError> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.account(&buf[..got]);
        Ok(got)
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), BundleError> {
        self.r.read_exact(buf).map_err(eof_is_truncated)?;
        self.account(buf);
        Ok(())
    }

    fn u32(&mut self) -> Result<u32, BundleError> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Read exactly `len` bytes, growing the buffer as data arrives (so a
    /// lying length on a short input does not allocate the full claim).
    fn vec(&mut self, len: usize) -> Result<Vec<u8>, BundleError> {
        let mut v = Vec::with_capacity(len.min(4 << 20));
        (&mut self.r)
            .take(len as u64)
            .read_to_end(&mut v)
            .map_err(eof_is_truncated)?;
        if v.len() != len {
            return Err(BundleError::Truncated);
        }
        self.account(&v);
        Ok(v)
    }

    fn at_end(&mut self) -> Result<bool, BundleError> {
        let mut b = [0u8; 1];
        Ok(self.read_some(&mut b)? == 0)
    }
}

/// A bundle's header as read.
struct ReadHeader {
    header: BundleHeader,
    /// The pairing proof it may carry (format 4 and 6).
    pairing: Option<PairingProof>,
    /// BLAKE3 of the header bytes (prefix, header body and proof).
    hash: [u8; 32],
    /// Whether frames are compressed (format 5 and 6).
    compressed: bool,
}

fn read_header<R: Read>(input: &mut Input<R>) -> Result<ReadHeader, BundleError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let got = input.read_some(&mut prefix[..8])?;
    if got == 0 || prefix[..got] != MAGIC[..got] {
        return Err(BundleError::NotABundle);
    }
    if got < 8 {
        return Err(BundleError::Truncated);
    }
    input.exact(&mut prefix[8..10])?;
    let version = u16::from_le_bytes([prefix[8], prefix[9]]);
    if OLD_VERSIONS.contains(&version) {
        return Err(BundleError::OldVersion(version));
    }
    let (compressed, proof) = match version {
        FORMAT_VERSION => (true, false),
        PAIRING_FORMAT_VERSION => (true, true),
        UNCOMPRESSED_FORMAT_VERSION => (false, false),
        UNCOMPRESSED_PAIRING_FORMAT_VERSION => (false, true),
        _ => return Err(BundleError::UnsupportedVersion(version)),
    };
    input.exact(&mut prefix[10..14])?;
    let len = u32::from_le_bytes([prefix[10], prefix[11], prefix[12], prefix[13]]);
    if len > MAX_HEADER_BYTES {
        return Err(BundleError::TooLarge {
            what: "header",
            size: len.into(),
            limit: MAX_HEADER_BYTES.into(),
        });
    }
    let body = input.vec(len as usize)?;
    let (header, pairing) = if proof {
        let (h, p): (BundleHeader, PairingProof) = codec::decode_canonical("bundle header", &body)
            .map_err(|e| decode_err("header", codec_reason(e)))?;
        (h, Some(p))
    } else {
        let h: BundleHeader = codec::decode_canonical("bundle header", &body)
            .map_err(|e| decode_err("header", codec_reason(e)))?;
        (h, None)
    };
    if !header.encrypted && header.key_check != [0; 16] {
        return Err(decode_err(
            "header",
            "an unencrypted bundle must have a zero key check",
        ));
    }
    let mut h = blake3::Hasher::new();
    h.update(&prefix);
    h.update(&body);
    Ok(ReadHeader {
        header,
        pairing,
        hash: *h.finalize().as_bytes(),
        compressed,
    })
}

/// The cipher for an encrypted bundle (checking the key), `None` for a plain one.
fn open_cipher(
    header: &BundleHeader,
    key: Option<&MeshKey>,
) -> Result<Option<XChaCha20Poly1305>, BundleError> {
    if !header.encrypted {
        return Ok(None);
    }
    let key = key.ok_or(BundleError::NeedsKey)?;
    if key_check(key) != header.key_check {
        return Err(BundleError::WrongKey);
    }
    Ok(Some(frame_cipher(key)))
}

fn read_frame_len<R: Read>(input: &mut Input<R>) -> Result<u32, BundleError> {
    let len = input.u32()?;
    if len > MAX_FRAME_BYTES {
        return Err(BundleError::TooLarge {
            what: "frame",
            size: len.into(),
            limit: MAX_FRAME_BYTES.into(),
        });
    }
    Ok(len)
}

/// Decrypt a frame in place (no-op for plain bundles). A bad tag is tampering.
fn open_frame(
    cipher: Option<&XChaCha20Poly1305>,
    header: &BundleHeader,
    header_hash: &[u8; 32],
    index: u64,
    frame: &mut Vec<u8>,
) -> Result<(), BundleError> {
    let Some(cipher) = cipher else {
        return Ok(());
    };
    if frame.len() < TAG_LEN {
        return Err(BundleError::Tampered);
    }
    cipher
        .decrypt_in_place(
            &frame_nonce(&header.nonce_seed, index),
            &frame_aad(header_hash, index),
            frame,
        )
        .map_err(|_| BundleError::Tampered)
}

/// The plaintext of a compressed frame (format 5/6) whose decrypted bytes
/// are `stored`: the declared length, then exactly one zstd frame that
/// records the same content size and decompresses to exactly that many
/// bytes. The output is allocated at the declared size (at most
/// [`MAX_FRAME_BYTES`], checked first) and decompression stops there, so a
/// decompression bomb costs at most that much memory and is refused.
fn decompress_frame(stored: &[u8]) -> Result<Vec<u8>, BundleError> {
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

fn read_trailer<R: Read>(input: &mut Input<R>) -> Result<(BundleTrailer, Vec<u8>), BundleError> {
    input.hashing = false;
    let len = input.u32()?;
    if len > MAX_TRAILER_BYTES {
        return Err(BundleError::TooLarge {
            what: "trailer",
            size: len.into(),
            limit: MAX_TRAILER_BYTES.into(),
        });
    }
    let body = input.vec(len as usize)?;
    let trailer: BundleTrailer = codec::decode_canonical("bundle trailer", &body)
        .map_err(|e| decode_err("trailer", codec_reason(e)))?;
    Ok((trailer, body))
}

// ---------------------------------------------------------------------------
// Reading: fact signatures

enum FactProblem {
    Invalid(ProtocolError),
    Signature,
}

/// Check `items` (facts `base..` of one frame) with the one fact verifier
/// ([`crate::verify`]), caching author keys in `keys`. Returns how many
/// facts there were, or the first bad one.
fn verify_chunk(
    items: &[&[u8]],
    base: usize,
    keys: &mut KeyCache,
) -> Result<u64, (usize, FactProblem)> {
    let results = verify::check_chunk(items, true, keys);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(_) => {}
            Err(ProtocolError::BadSignature) => return Err((base + i, FactProblem::Signature)),
            Err(e) => return Err((base + i, FactProblem::Invalid(e))),
        }
    }
    Ok(items.len() as u64)
}

/// Part of one frame for a worker: facts `start..end` of `items`.
struct Job {
    frame: u64,
    plain: Arc<Vec<u8>>,
    items: Arc<Vec<Range<usize>>>,
    start: usize,
    end: usize,
}

type JobResult = (u64, Result<u64, (usize, FactProblem)>);

fn run_job(job: &Job, keys: &mut KeyCache) -> JobResult {
    let items: Vec<&[u8]> = job.items[job.start..job.end]
        .iter()
        .map(|r| &job.plain[r.clone()])
        .collect();
    (job.frame, verify_chunk(&items, job.start, keys))
}

/// A worker: verifies jobs until the queue closes, with its own key cache.
fn worker(jobs: &Mutex<Receiver<Job>>, results: Sender<JobResult>, cancel: &AtomicBool) {
    let mut keys = KeyCache::default();
    loop {
        let job = match jobs.lock() {
            Ok(rx) => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        if cancel.load(Ordering::Relaxed) {
            continue;
        }
        if results.send(run_job(&job, &mut keys)).is_err() {
            return;
        }
    }
}

fn worker_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 16)
}

/// The first problem in reading order.
#[derive(Default)]
struct FirstProblem(Option<(u64, usize, BundleError)>);

impl FirstProblem {
    fn offer(&mut self, frame: u64, index: usize, e: BundleError) {
        if self
            .0
            .as_ref()
            .is_none_or(|(f, i, _)| (frame, index) < (*f, *i))
        {
            self.0 = Some((frame, index, e));
        }
    }

    fn offer_result(&mut self, (frame, r): JobResult, facts: &mut u64) {
        match r {
            Ok(n) => *facts += n,
            Err((index, FactProblem::Signature)) => self.offer(
                frame,
                index,
                BundleError::BadFactSignature {
                    frame,
                    index: index as u64,
                },
            ),
            Err((index, FactProblem::Invalid(error))) => self.offer(
                frame,
                index,
                BundleError::BadFact {
                    frame,
                    index: index as u64,
                    error,
                },
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Reading: the two passes

/// Proof that a bundle's bytes verified completely (pass 1). Only
/// [`verify_bundle`] makes one; [`read_verified`] needs it.
#[derive(Clone)]
pub struct VerifiedBundle {
    header: BundleHeader,
    pairing: Option<PairingProof>,
    summary: BundleSummary,
    header_hash: [u8; 32],
    content_hash: [u8; 32],
    frame_hashes: Vec<[u8; 32]>,
    trailer: Vec<u8>,
}

impl std::fmt::Debug for VerifiedBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedBundle")
            .field("header", &self.header)
            .field("summary", &self.summary)
            .field("content_hash", &blake3::Hash::from(self.content_hash))
            .finish_non_exhaustive()
    }
}

impl VerifiedBundle {
    pub fn header(&self) -> &BundleHeader {
        &self.header
    }

    pub fn sender(&self) -> NodeId {
        self.header.sender
    }

    /// Who the sender made the bundle for (covered by the verified signature).
    pub fn recipient(&self) -> Recipient {
        self.header.recipient
    }

    /// The sender's pairing proof, if this is a joiner's first bundle
    /// (covered by the verified signature).
    pub fn pairing(&self) -> Option<PairingProof> {
        self.pairing
    }

    pub fn summary(&self) -> BundleSummary {
        self.summary
    }

    /// BLAKE3 of everything the trailer signs: a stable identity for the
    /// bundle (e.g. to report "already imported").
    pub fn content_hash(&self) -> [u8; 32] {
        self.content_hash
    }
}

/// Pass 1: verify everything (header, every frame's tag, every fact's
/// decoding, validation and signature, the trailer signature against
/// `header.sender`, the counts, and that nothing follows) without keeping
/// facts in memory.
///
/// Errors come in reading order, except that a frame whose contents do not
/// decompress or decode or hold a bad fact is reported only after the trailer has been
/// checked: if the bundle signature fails, the file was damaged
/// ([`BundleError::BadSignature`]; likely for an unencrypted bundle, where no
/// tag protects the frames); if it holds, the sender really shipped the bad
/// fact ([`BundleError::BadFactSignature`], [`BundleError::BadFact`]), and
/// the first one in reading order is named.
pub fn verify_bundle<R: Read>(r: R, key: Option<&MeshKey>) -> Result<VerifiedBundle, BundleError> {
    let mut input = Input::new(r);
    let ReadHeader {
        header,
        pairing,
        hash: header_hash,
        compressed,
    } = read_header(&mut input)?;
    let cipher = open_cipher(&header, key)?;

    // Frames are read, decrypted and split on this thread; their facts are
    // checked by a pool of workers (one per core) fed through a short queue,
    // so reading overlaps checking and memory stays at a few frames.
    let workers = worker_count();
    let (job_tx, job_rx) = mpsc::sync_channel::<Job>(workers);
    let (result_tx, result_rx) = mpsc::channel::<JobResult>();
    let cancel = AtomicBool::new(false);
    let mut problem = FirstProblem::default();
    let mut facts = 0u64;
    let mut frame_hashes: Vec<[u8; 32]> = Vec::new();
    let read: Result<(), BundleError> = std::thread::scope(|s| {
        // Only the workers hold the queue's receiver: if none is running,
        // sending fails and this thread does the work itself.
        let mut job_rx = Some(Arc::new(Mutex::new(job_rx)));
        let job_tx: SyncSender<Job> = job_tx;
        let result_tx: Sender<JobResult> = result_tx;
        let mut inline_keys = KeyCache::default();
        let mut read_frames = || -> Result<(), BundleError> {
            loop {
                while let Ok(r) = result_rx.try_recv() {
                    problem.offer_result(r, &mut facts);
                }
                let len = read_frame_len(&mut input)?;
                if len == 0 {
                    return Ok(());
                }
                let index = frame_hashes.len() as u64;
                let mut frame = input.vec(len as usize)?;
                frame_hashes.push(*blake3::hash(&frame).as_bytes());
                if problem.0.is_some() {
                    continue; // only the content hash matters now
                }
                open_frame(cipher.as_ref(), &header, &header_hash, index, &mut frame)?;
                // Bad compressed data, like a bad plaintext, is reported
                // after the trailer signature (see above).
                if compressed {
                    frame = match decompress_frame(&frame) {
                        Ok(plain) => plain,
                        Err(e) => {
                            problem.offer(index, 0, e);
                            continue;
                        }
                    };
                }
                let items = match frame_items(&frame) {
                    Ok(items) => items,
                    Err(e) => {
                        problem.offer(index, 0, e);
                        continue;
                    }
                };
                let n = items.len();
                let (plain, items) = (Arc::new(frame), Arc::new(items));
                let parts = if n < PARALLEL_MIN_FACTS || workers < 2 {
                    1
                } else {
                    workers
                };
                if parts > 1
                    && let Some(rx) = job_rx.take()
                {
                    for _ in 0..workers {
                        let (rx, tx, cancel) = (Arc::clone(&rx), result_tx.clone(), &cancel);
                        // A thread that cannot be had leaves its share to
                        // the others (or to this thread, below).
                        let _ = std::thread::Builder::new()
                            .name("amos-bundle-verify".into())
                            .spawn_scoped(s, move || worker(&rx, tx, cancel));
                    }
                }
                let per = n.div_ceil(parts);
                for start in (0..n).step_by(per) {
                    let job = Job {
                        frame: index,
                        plain: Arc::clone(&plain),
                        items: Arc::clone(&items),
                        start,
                        end: (start + per).min(n),
                    };
                    let job = if parts > 1 {
                        match job_tx.send(job) {
                            Ok(()) => continue,
                            Err(mpsc::SendError(job)) => job, // no worker left
                        }
                    } else {
                        job
                    };
                    problem.offer_result(run_job(&job, &mut inline_keys), &mut facts);
                }
            }
        };
        let read = read_frames();
        if read.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        // Closing the queue lets the workers finish; the scope waits for them.
        drop(job_tx);
        drop(result_tx);
        read
    });
    for r in result_rx.try_iter() {
        problem.offer_result(r, &mut facts);
    }
    read?;
    let problem = problem.0.map(|(_, _, e)| e);
    let content_hash = *input.hasher.finalize().as_bytes();
    let (trailer, trailer_bytes) = read_trailer(&mut input)?;
    let sender =
        VerifyingKey::from_bytes(&header.sender.0).map_err(|_| BundleError::BadSignature)?;
    sender
        .verify_strict(
            &signed_message(&content_hash, trailer.frames, trailer.facts),
            &Signature::from_bytes(&trailer.signature),
        )
        .map_err(|_| BundleError::BadSignature)?;
    if let Some(p) = problem {
        return Err(p);
    }
    if trailer.frames != frame_hashes.len() as u64 || trailer.facts != facts {
        return Err(BundleError::Tampered);
    }
    if !input.at_end()? {
        return Err(BundleError::TrailingBytes);
    }
    let summary = BundleSummary {
        frames: trailer.frames,
        facts,
        bytes: input.bytes,
    };
    Ok(VerifiedBundle {
        pairing,
        header,
        summary,
        header_hash,
        content_hash,
        frame_hashes,
        trailer: trailer_bytes,
    })
}

/// Pass 2: read the bytes [`verify_bundle`] accepted again and hand each
/// frame's facts, in order, to `apply`. Every frame must hash to what pass 1
/// recorded (signatures are not checked again); a frame that differs is
/// refused with [`BundleError::Tampered`] before it (or the frame before it)
/// is applied, and so is a different header, frame count, trailer or
/// anything after the trailer (those after every frame was applied). An
/// error from `apply` stops the read ([`ReadError::Apply`]).
///
/// The next frame is decrypted, decompressed and decoded on a helper thread
/// while `apply` runs, so `apply` need not be `Send`.
pub fn read_verified<R: Read, E>(
    r: R,
    key: Option<&MeshKey>,
    verified: &VerifiedBundle,
    mut apply: impl FnMut(Vec<Verified<SignedFact>>) -> Result<(), E>,
) -> Result<BundleSummary, ReadError<E>> {
    let mut input = Input::new(r);
    let ReadHeader {
        header,
        hash: header_hash,
        compressed,
        ..
    } = read_header(&mut input)?;
    if header_hash != verified.header_hash {
        return Err(BundleError::Tampered.into());
    }
    let cipher = open_cipher(&header, key)?;
    let open = |frame_no: u64, mut frame: Vec<u8>| -> Opened {
        open_frame(cipher.as_ref(), &header, &header_hash, frame_no, &mut frame)?;
        if compressed {
            frame = decompress_frame(&frame)?;
        }
        decode_checked_frame(frame_no, &frame)
    };
    let stopped = || BundleError::Io(io::Error::other("bundle frame decoder stopped"));

    // This thread reads and hash-checks frames; a helper decrypts and decodes
    // frame k + 1 while `apply` works on frame k. Frame k is applied only
    // after frame k + 1 passed its hash check.
    std::thread::scope(|s| {
        let open = &open;
        let mut ahead: Option<(SyncSender<RawFrame>, Receiver<Opened>)> = None;
        let (raw_tx, raw_rx) = mpsc::sync_channel::<RawFrame>(1);
        let (opened_tx, opened_rx) = mpsc::sync_channel::<Opened>(1);
        let helper = std::thread::Builder::new()
            .name("amos-bundle-read".into())
            .spawn_scoped(s, move || {
                for (frame_no, frame) in raw_rx {
                    if opened_tx.send(open(frame_no, frame)).is_err() {
                        break;
                    }
                }
            });
        if helper.is_ok() {
            ahead = Some((raw_tx, opened_rx));
        }
        let mut read_all = || -> Result<(), ReadError<E>> {
            let mut index = 0usize;
            let mut in_flight = 0usize;
            loop {
                let len = read_frame_len(&mut input)?;
                if len == 0 {
                    break;
                }
                let expected = verified
                    .frame_hashes
                    .get(index)
                    .ok_or(BundleError::Tampered)?;
                let frame = input.vec(len as usize)?;
                if blake3::hash(&frame).as_bytes() != expected {
                    return Err(BundleError::Tampered.into());
                }
                let frame_no = index as u64;
                index += 1;
                match &ahead {
                    Some((tx, rx)) => {
                        tx.send((frame_no, frame)).map_err(|_| stopped())?;
                        in_flight += 1;
                        if in_flight > 1 {
                            apply(rx.recv().map_err(|_| stopped())??).map_err(ReadError::Apply)?;
                            in_flight -= 1;
                        }
                    }
                    None => apply(open(frame_no, frame)?).map_err(ReadError::Apply)?,
                }
            }
            if index != verified.frame_hashes.len() {
                return Err(BundleError::Tampered.into());
            }
            if let Some((_, rx)) = &ahead {
                for _ in 0..in_flight {
                    apply(rx.recv().map_err(|_| stopped())??).map_err(ReadError::Apply)?;
                }
            }
            Ok(())
        };
        let read = read_all();
        // Closing both channels ends the helper, whatever state it is in.
        drop(ahead);
        read
    })?;
    if *input.hasher.finalize().as_bytes() != verified.content_hash {
        return Err(BundleError::Tampered.into());
    }
    let (_, trailer) = read_trailer(&mut input)?;
    if trailer != verified.trailer {
        return Err(BundleError::Tampered.into());
    }
    if !input.at_end()? {
        return Err(BundleError::TrailingBytes.into());
    }
    Ok(verified.summary)
}

/// A frame's number and bytes as read, for pass 2's decoder.
type RawFrame = (u64, Vec<u8>);

/// A frame's facts, decrypted and decoded for pass 2.
type Opened = Result<Vec<Verified<SignedFact>>, BundleError>;

/// Decode a frame whose bytes pass 1 verified (same hash): its facts were
/// decoded, validated and signature-checked then, so they are wrapped as
/// [`Verified`] without checking again.
fn decode_checked_frame(frame_no: u64, plain: &[u8]) -> Opened {
    let items = frame_items(plain)?;
    let mut facts = Vec::with_capacity(items.len());
    for (i, range) in items.into_iter().enumerate() {
        let WireFact::V1(fact) =
            codec::decode::<WireFact>("fact", &plain[range]).map_err(|error| {
                BundleError::BadFact {
                    frame: frame_no,
                    index: i as u64,
                    error,
                }
            })?;
        facts.push(Verified::assume_verified(fact));
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        AgentId, Fact, FactBody, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryType,
        TeamFact, TeamId,
    };
    use proptest::prelude::*;
    use std::cell::Cell;

    fn ident(seed: u8) -> NodeIdentity {
        NodeIdentity::from_secret([seed; 32])
    }

    fn clock(node: NodeId, wall_ms: u64) -> Hlc {
        Hlc {
            wall_ms,
            logical: 0,
            node,
        }
    }

    fn memory_fact(id: &NodeIdentity, i: u64) -> Vec<u8> {
        let mut random = [0u8; 10];
        random[..8].copy_from_slice(&i.to_le_bytes());
        memory_with(
            id,
            1_700_000_000_000 + i,
            random,
            format!("memory {i}: the release build runs clippy with -D warnings first"),
            vec!["build".into(), "rust".into()],
            0.5,
        )
    }

    fn team_fact(id: &NodeIdentity, i: u64) -> Vec<u8> {
        let fact = Fact {
            clock: clock(id.node_id(), 1_000 + i),
            body: FactBody::Team(TeamFact {
                id: TeamId::parse(&format!("team-{i}")).unwrap(),
                origin: NodeId([7; 32]),
                name: format!("Team {i}"),
                present: true,
            }),
        };
        id.sign(fact).unwrap().to_bytes()
    }

    fn key() -> MeshKey {
        MeshKey::from_bytes([0x42; 32])
    }

    fn scopes() -> Vec<String> {
        vec!["team:apollo".into(), "global".into()]
    }

    fn build_with(
        id: &NodeIdentity,
        key: Option<&MeshKey>,
        seed: [u8; 16],
        frames: &[Vec<Vec<u8>>],
    ) -> Vec<u8> {
        build_format(Format::Compressed, id, key, seed, frames)
    }

    /// Which format a test bundle is written in.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Format {
        /// What amos writes (5, or 6 with a pairing proof).
        Compressed,
        /// What it wrote before and still reads (3, or 4).
        Uncompressed,
    }

    const FORMATS: [Format; 2] = [Format::Compressed, Format::Uncompressed];

    fn writer(
        format: Format,
        id: &NodeIdentity,
        recipient: Recipient,
        key: Option<&MeshKey>,
        seed: [u8; 16],
        pairing: Option<PairingProof>,
    ) -> BundleWriter<Vec<u8>> {
        let make = match format {
            Format::Compressed => BundleWriter::with_pairing,
            Format::Uncompressed => BundleWriter::uncompressed,
        };
        make(
            Vec::new(),
            id,
            recipient,
            clock(id.node_id(), 5_000),
            scopes(),
            key,
            seed,
            pairing,
        )
        .unwrap()
    }

    fn build_format(
        format: Format,
        id: &NodeIdentity,
        key: Option<&MeshKey>,
        seed: [u8; 16],
        frames: &[Vec<Vec<u8>>],
    ) -> Vec<u8> {
        let mut w = writer(format, id, Recipient::AnyPeer, key, seed, None);
        for f in frames {
            w.write_frame(f).unwrap();
        }
        let (bytes, summary) = w.finish().unwrap();
        assert_eq!(summary.bytes, bytes.len() as u64);
        assert_eq!(summary.frames, frames.len() as u64);
        bytes
    }

    /// Three frames of 2, 1 and 3 facts from two authors (the sender relays
    /// a fact written by another node).
    fn sample_frames() -> Vec<Vec<Vec<u8>>> {
        let a = ident(1);
        let b = ident(2);
        vec![
            vec![memory_fact(&a, 1), team_fact(&a, 2)],
            vec![memory_fact(&b, 3)],
            vec![team_fact(&b, 4), memory_fact(&a, 5), team_fact(&a, 6)],
        ]
    }

    fn sample(key: Option<&MeshKey>) -> Vec<u8> {
        build_with(&ident(1), key, [7; 16], &sample_frames())
    }

    fn sample_in(format: Format, key: Option<&MeshKey>) -> Vec<u8> {
        build_format(format, &ident(1), key, [7; 16], &sample_frames())
    }

    /// Both passes; returns the facts per frame as wire bytes.
    fn import(bytes: &[u8], key: Option<&MeshKey>) -> Result<Vec<Vec<Vec<u8>>>, BundleError> {
        let verified = verify_bundle(bytes, key)?;
        let mut frames = Vec::new();
        let summary = read_verified(bytes, key, &verified, |facts| {
            frames.push(facts.iter().map(|f| f.to_bytes()).collect::<Vec<_>>());
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(|e| match e {
            ReadError::Bundle(b) => b,
            ReadError::Apply(never) => match never {},
        })?;
        assert_eq!(summary, verified.summary());
        Ok(frames)
    }

    /// Byte ranges of the regions of a well-formed bundle.
    struct Layout {
        header_end: usize,
        frames: Vec<(usize, usize)>, // (start of length prefix, end of frame bytes)
        terminator: usize,
        trailer_len: usize,
    }

    fn layout(bytes: &[u8]) -> Layout {
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
        let header_end = PREFIX_LEN + u32_at(10);
        let mut at = header_end;
        let mut frames = Vec::new();
        loop {
            let len = u32_at(at);
            if len == 0 {
                break;
            }
            frames.push((at, at + 4 + len));
            at += 4 + len;
        }
        Layout {
            header_end,
            frames,
            terminator: at,
            trailer_len: at + 4,
        }
    }

    #[test]
    fn round_trip_plain_and_encrypted() {
        let frames = sample_frames();
        for (format, key) in FORMATS
            .into_iter()
            .flat_map(|f| [(f, None), (f, Some(key()))])
        {
            let bytes = build_format(format, &ident(1), key.as_ref(), [7; 16], &frames);
            let version = match format {
                Format::Compressed => FORMAT_VERSION,
                Format::Uncompressed => UNCOMPRESSED_FORMAT_VERSION,
            };
            assert_eq!(bytes[8..10], version.to_le_bytes());
            let verified = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            assert_eq!(
                verified.summary(),
                BundleSummary {
                    frames: 3,
                    facts: 6,
                    bytes: bytes.len() as u64
                }
            );
            let h = verified.header();
            assert_eq!(h.sender, ident(1).node_id());
            assert_eq!(h.created, clock(ident(1).node_id(), 5_000));
            assert_eq!(h.scopes, scopes());
            assert_eq!(h.encrypted, key.is_some());
            assert_eq!(import(&bytes, key.as_ref()).unwrap(), frames);
            // Verifying twice gives the same answer.
            let again = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            assert_eq!(again.summary(), verified.summary());
            assert_eq!(again.content_hash(), verified.content_hash());
        }
    }

    #[test]
    fn encrypted_frames_hide_the_facts() {
        let text = b"release build runs clippy";
        let has = |b: &[u8]| b.windows(text.len()).any(|w| w == text);
        // Unencrypted, format 3 carries the text as is and today's format
        // compressed (each frame decompresses to it).
        assert!(has(&sample_in(Format::Uncompressed, None)));
        let plain = sample(None);
        let (s, e) = layout(&plain).frames[0];
        assert!(plain[s + 4 + DECLARED_LEN..].starts_with(&ZSTD_MAGIC));
        assert!(has(&decompress_frame(&plain[s + 4..e]).unwrap()));
        // Encrypted, neither shows: not the text, not a zstd frame.
        for format in FORMATS {
            assert!(!has(&sample_in(format, Some(&key()))), "{format:?}");
        }
        let sealed = sample(Some(&key()));
        assert!(!sealed.windows(4).any(|w| w == ZSTD_MAGIC));
    }

    #[test]
    fn writing_is_deterministic_and_streams_frames() {
        assert_eq!(sample(Some(&key())), sample(Some(&key())));
        assert_ne!(
            sample(Some(&key())),
            build_with(&ident(1), Some(&key()), [8; 16], &sample_frames())
        );
        // push_fact closes a frame every FRAME_FACTS facts.
        let id = ident(3);
        let facts: Vec<Vec<u8>> = (0..FRAME_FACTS as u64 + 10)
            .map(|i| team_fact(&id, i))
            .collect();
        let mut w = BundleWriter::new(
            Vec::new(),
            &id,
            Recipient::AnyPeer,
            clock(id.node_id(), 1),
            vec![],
            None,
            [0; 16],
        )
        .unwrap();
        for f in &facts {
            w.push_fact(f.clone()).unwrap();
        }
        assert_eq!(w.summary().frames, 1);
        let (bytes, summary) = w.finish().unwrap();
        assert_eq!((summary.frames, summary.facts), (2, facts.len() as u64));
        let back = import(&bytes, None).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.concat(), facts);
    }

    #[test]
    fn empty_bundle_is_fine_and_applies_nothing() {
        let bytes = build_with(&ident(1), Some(&key()), [1; 16], &[]);
        let v = verify_bundle(&bytes[..], Some(&key())).unwrap();
        assert_eq!((v.summary().frames, v.summary().facts), (0, 0));
        assert!(import(&bytes, Some(&key())).unwrap().is_empty());
        // An empty write_frame is a no-op.
        let mut w = BundleWriter::new(
            Vec::new(),
            &ident(1),
            Recipient::AnyPeer,
            clock(ident(1).node_id(), 5_000),
            scopes(),
            Some(&key()),
            [1; 16],
        )
        .unwrap();
        w.write_frame(&[]).unwrap();
        assert_eq!(w.finish().unwrap().0, bytes);
    }

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

    #[test]
    fn non_canonical_and_empty_frames_are_refused() {
        let id = ident(1);
        let fact = team_fact(&id, 1);
        // count 1 written as a 3-byte varint: decodes, but is not canonical.
        let mut odd = vec![251, 1, 0];
        put_varint(&mut odd, fact.len() as u64);
        odd.extend_from_slice(&fact);
        for (plain, n) in [(odd, 1), (vec![0u8], 0), (vec![], 0)] {
            for (format, key) in FORMATS
                .into_iter()
                .flat_map(|f| [(f, None), (f, Some(key()))])
            {
                if plain.is_empty() && format == Format::Uncompressed && key.is_none() {
                    continue; // an empty frame there is the terminator
                }
                let mut w = writer(format, &id, Recipient::AnyPeer, key.as_ref(), [3; 16], None);
                w.write_plain(plain.clone(), n).unwrap();
                let (bytes, _) = w.finish().unwrap();
                let err = verify_bundle(&bytes[..], key.as_ref()).unwrap_err();
                assert!(
                    matches!(err, BundleError::Decode { what: "frame", .. }),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn every_single_bit_flip_is_refused_and_applies_nothing() {
        for (format, key) in FORMATS
            .into_iter()
            .flat_map(|f| [(f, None), (f, Some(key()))])
        {
            let key = key.as_ref();
            let bytes = sample_in(format, key);
            let l = layout(&bytes);
            let original = verify_bundle(&bytes[..], key).unwrap();
            for pos in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[pos] ^= 1 << (pos % 8);
                let err = verify_bundle(&bad[..], key).unwrap_err();
                // Pass 1 refusing means the whole flow applies nothing: there
                // is no VerifiedBundle to read with.
                // Pass 2 against the untouched file's proof stops before the
                // changed frame (and, reading one ahead, before the one
                // before it).
                let applied = Cell::new(0);
                let second = read_verified(&bad[..], key, &original, |_| {
                    applied.set(applied.get() + 1);
                    Ok::<(), ()>(())
                });
                assert!(second.is_err(), "pos {pos}");
                let frames_before = l.frames.iter().filter(|(_, end)| *end <= pos).count();
                let allowed = if pos < l.header_end { 0 } else { frames_before };
                assert!(applied.get() <= allowed, "pos {pos}");
                if pos >= l.trailer_len {
                    assert_eq!(applied.get(), l.frames.len(), "pos {pos}");
                }

                // The error names the region where it can.
                let region_ok = match pos {
                    0..8 => matches!(err, BundleError::NotABundle),
                    // Another version, or one that is valid (5 <-> 4, 3 <->
                    // 7...) but whose header or frames do not match.
                    8..10 => matches!(
                        err,
                        BundleError::UnsupportedVersion(_)
                            | BundleError::OldVersion(_)
                            | BundleError::Decode { what: "header", .. }
                    ),
                    _ if pos >= l.trailer_len => matches!(
                        err,
                        BundleError::BadSignature
                            | BundleError::Truncated
                            | BundleError::TooLarge { .. }
                            | BundleError::TrailingBytes
                            | BundleError::Decode { .. }
                            | BundleError::Tampered
                    ),
                    _ if key.is_some()
                        && l.frames.iter().any(|(s, e)| pos >= s + 4 && pos < *e) =>
                    {
                        matches!(err, BundleError::Tampered)
                    }
                    _ => true,
                };
                assert!(region_ok, "pos {pos}: {err}");
                assert!(!err.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn a_pairing_proof_travels_signed_and_only_in_its_own_version() {
        let id = ident(1);
        let proof = PairingProof {
            invite: [3; 16],
            proof: [4; 32],
        };
        let mut w = BundleWriter::with_pairing(
            Vec::new(),
            &id,
            Recipient::AnyPeer,
            clock(id.node_id(), 5_000),
            scopes(),
            None,
            [7; 16],
            Some(proof),
        )
        .unwrap();
        for f in sample_frames() {
            w.write_frame(&f).unwrap();
        }
        let (bytes, _) = w.finish().unwrap();
        assert_eq!(bytes[8..10], PAIRING_FORMAT_VERSION.to_le_bytes());
        let v = verify_bundle(&bytes[..], None).unwrap();
        assert_eq!(v.pairing(), Some(proof));
        assert_eq!(import(&bytes, None).unwrap(), sample_frames());
        // Without a proof the bundle is version 3 and carries none.
        let plain = sample(None);
        assert_eq!(plain[8..10], FORMAT_VERSION.to_le_bytes());
        assert_eq!(verify_bundle(&plain[..], None).unwrap().pairing(), None);
        // The proof is signed with everything else: changing it is refused.
        let l = layout(&bytes);
        let mut bad = bytes.clone();
        bad[l.header_end - 1] ^= 1;
        assert!(verify_bundle(&bad[..], None).is_err());
        // Relabelling either version as the other does not decode.
        let mut relabelled = plain.clone();
        relabelled[8..10].copy_from_slice(&PAIRING_FORMAT_VERSION.to_le_bytes());
        assert!(verify_bundle(&relabelled[..], None).is_err());
        let mut relabelled = bytes.clone();
        relabelled[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        assert!(verify_bundle(&relabelled[..], None).is_err());
    }

    #[test]
    fn truncation_anywhere_is_refused() {
        for (format, key) in FORMATS
            .into_iter()
            .flat_map(|f| [(f, None), (f, Some(key()))])
        {
            let bytes = sample_in(format, key.as_ref());
            for n in 0..bytes.len() {
                let err = verify_bundle(&bytes[..n], key.as_ref()).unwrap_err();
                if n == 0 {
                    assert!(matches!(err, BundleError::NotABundle), "{n}: {err}");
                } else {
                    assert!(matches!(err, BundleError::Truncated), "{n}: {err}");
                }
            }
            let v = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            for n in [0, 5, 20, bytes.len() / 2, bytes.len() - 1] {
                let r = read_verified(&bytes[..n], key.as_ref(), &v, |_| Ok::<(), ()>(()));
                assert!(r.is_err());
            }
        }
    }

    #[test]
    fn keys_wrong_missing_and_unneeded() {
        let sealed = sample(Some(&key()));
        let other = MeshKey::from_bytes([0x43; 32]);
        assert!(matches!(
            verify_bundle(&sealed[..], Some(&other)),
            Err(BundleError::WrongKey)
        ));
        assert!(matches!(
            verify_bundle(&sealed[..], None),
            Err(BundleError::NeedsKey)
        ));
        assert_eq!(
            BundleError::WrongKey.to_string(),
            "bundle was encrypted with a different mesh key"
        );
        assert_eq!(
            BundleError::NeedsKey.to_string(),
            "bundle is encrypted; set the mesh key"
        );
        // Pass 2 with another key is refused too.
        let v = verify_bundle(&sealed[..], Some(&key())).unwrap();
        let r = read_verified(&sealed[..], Some(&other), &v, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Err(ReadError::Bundle(BundleError::WrongKey))));
        // A plaintext bundle reads the same with or without a key.
        let plain = sample(None);
        assert_eq!(
            import(&plain, Some(&key())).unwrap(),
            import(&plain, None).unwrap()
        );
    }

    #[test]
    fn unknown_version_is_refused_before_reading_further() {
        let mut bytes = sample(Some(&key()));
        bytes[8..10].copy_from_slice(&7u16.to_le_bytes());
        let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
        assert!(matches!(err, BundleError::UnsupportedVersion(7)));
        assert_eq!(err.to_string(), "bundle format version 7 is not supported");
        // Versions 1 and 2 named no recipient: refused, saying what to do.
        for old in [1u16, 2] {
            let mut short = MAGIC.to_vec();
            short.extend_from_slice(&old.to_le_bytes());
            let err = verify_bundle(&short[..], None).unwrap_err();
            assert!(matches!(err, BundleError::OldVersion(v) if v == old));
            assert!(err.to_string().contains("export it again"), "{err}");
        }
        // Nothing after the version is needed to say so.
        for v in [0u16, 7, 0x0300, u16::MAX] {
            let mut short = MAGIC.to_vec();
            short.extend_from_slice(&v.to_le_bytes());
            assert!(matches!(
                verify_bundle(&short[..], None),
                Err(BundleError::UnsupportedVersion(n)) if n == v
            ));
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocating() {
        let mut huge_header = MAGIC.to_vec();
        huge_header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        huge_header.extend_from_slice(&(MAX_HEADER_BYTES + 1).to_le_bytes());
        assert!(matches!(
            verify_bundle(&huge_header[..], None),
            Err(BundleError::TooLarge { what: "header", .. })
        ));
        let bytes = sample(None);
        let l = layout(&bytes);
        let mut huge_frame = bytes[..l.header_end].to_vec();
        huge_frame.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            verify_bundle(&huge_frame[..], None),
            Err(BundleError::TooLarge { what: "frame", .. })
        ));
        // A frame claiming 16 MiB on a short input is merely truncated.
        let mut lying = bytes[..l.header_end].to_vec();
        lying.extend_from_slice(&MAX_FRAME_BYTES.to_le_bytes());
        lying.extend_from_slice(&[0; 100]);
        assert!(matches!(
            verify_bundle(&lying[..], None),
            Err(BundleError::Truncated)
        ));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        for key in [None, Some(key())] {
            let mut bytes = sample(key.as_ref());
            let v = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            bytes.push(0);
            assert!(matches!(
                verify_bundle(&bytes[..], key.as_ref()),
                Err(BundleError::TrailingBytes)
            ));
            let r = read_verified(&bytes[..], key.as_ref(), &v, |_| Ok::<(), ()>(()));
            assert!(matches!(
                r,
                Err(ReadError::Bundle(BundleError::TrailingBytes))
            ));
        }
    }

    /// Splice `frames` (ranges of `src`, in that order) between `base`'s
    /// header and its terminator + trailer.
    fn splice(base: &[u8], frames: &[(&[u8], (usize, usize))]) -> Vec<u8> {
        let l = layout(base);
        let mut out = base[..l.header_end].to_vec();
        for (src, (s, e)) in frames {
            out.extend_from_slice(&src[*s..*e]);
        }
        out.extend_from_slice(&base[l.terminator..]);
        out
    }

    #[test]
    fn frames_cannot_be_reordered_dropped_or_moved_between_bundles() {
        let id = ident(1);
        let f = sample_frames();
        let mut g = f.clone();
        g[1] = vec![team_fact(&id, 99)];
        for key in [Some(key()), None] {
            let key = key.as_ref();
            let a = build_with(&id, key, [1; 16], &f);
            let b = build_with(&id, key, [2; 16], &g);
            let (la, lb) = (layout(&a), layout(&b));
            let reordered = splice(
                &a,
                &[(&a, la.frames[1]), (&a, la.frames[0]), (&a, la.frames[2])],
            );
            let dropped = splice(&a, &[(&a, la.frames[0]), (&a, la.frames[2])]);
            let doubled = splice(
                &a,
                &[
                    (&a, la.frames[0]),
                    (&a, la.frames[1]),
                    (&a, la.frames[1]),
                    (&a, la.frames[2]),
                ],
            );
            let moved = splice(
                &a,
                &[(&a, la.frames[0]), (&b, lb.frames[1]), (&a, la.frames[2])],
            );
            for (what, bad) in [
                ("reordered", reordered),
                ("dropped", dropped),
                ("doubled", doubled),
                ("moved", moved),
            ] {
                let err = verify_bundle(&bad[..], key).unwrap_err();
                if key.is_some() && what != "dropped" {
                    // The frame tag catches it at once.
                    assert!(matches!(err, BundleError::Tampered), "{what}: {err}");
                } else {
                    assert!(
                        matches!(err, BundleError::Tampered | BundleError::BadSignature),
                        "{what}: {err}"
                    );
                }
                assert!(import(&bad, key).is_err());
            }
        }
        // Same header (same seed) but other facts: every tag is fine, the
        // trailer signature is not.
        let a = build_with(&id, Some(&key()), [1; 16], &f);
        let c = build_with(&id, Some(&key()), [1; 16], &g);
        let (la, lc) = (layout(&a), layout(&c));
        let mixed = splice(
            &a,
            &[(&a, la.frames[0]), (&c, lc.frames[1]), (&a, la.frames[2])],
        );
        assert!(matches!(
            verify_bundle(&mixed[..], Some(&key())),
            Err(BundleError::BadSignature)
        ));
    }

    #[test]
    fn a_file_changed_between_passes_is_refused_at_the_changed_frame() {
        let id = ident(1);
        let f = sample_frames();
        let a = build_with(&id, Some(&key()), [1; 16], &f);
        let mut g = f.clone();
        g[1] = vec![team_fact(&id, 99)];
        let c = build_with(&id, Some(&key()), [1; 16], &g); // a valid bundle in its own right
        verify_bundle(&c[..], Some(&key())).unwrap();
        let proof = verify_bundle(&a[..], Some(&key())).unwrap();
        let mut applied = Vec::new();
        let r = read_verified(&c[..], Some(&key()), &proof, |facts| {
            applied.push(facts.len());
            Ok::<(), ()>(())
        });
        assert!(matches!(r, Err(ReadError::Bundle(BundleError::Tampered))));
        assert!(
            applied.len() <= 1 && applied.iter().all(|n| *n == 2),
            "at most frame 0 (unchanged) was applied: {applied:?}"
        );
        // A proof for one bundle does not open another sender's.
        let other = build_with(&ident(9), Some(&key()), [1; 16], &f);
        let r = read_verified(&other[..], Some(&key()), &proof, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Err(ReadError::Bundle(BundleError::Tampered))));
    }

    #[test]
    fn apply_errors_stop_the_read() {
        let bytes = sample(None);
        let v = verify_bundle(&bytes[..], None).unwrap();
        let mut calls = 0;
        let r = read_verified(&bytes[..], None, &v, |_| {
            calls += 1;
            if calls == 2 { Err("disk full") } else { Ok(()) }
        });
        assert!(matches!(r, Err(ReadError::Apply("disk full"))));
        assert_eq!(calls, 2);
    }

    fn bad_signature(fact: &[u8]) -> Vec<u8> {
        let mut f = fact.to_vec();
        let n = f.len();
        f[n - 1] ^= 0x01; // last byte of the signature's s
        f
    }

    #[test]
    fn a_bad_fact_signature_inside_a_good_frame_is_named() {
        let id = ident(1);
        let good = memory_fact(&id, 1);
        let bad = bad_signature(&memory_fact(&id, 2));
        for key in [Some(key()), None] {
            let bytes = build_with(
                &id,
                key.as_ref(),
                [5; 16],
                &[
                    vec![team_fact(&id, 1)],
                    vec![good.clone(), bad.clone(), team_fact(&id, 3)],
                ],
            );
            let err = verify_bundle(&bytes[..], key.as_ref()).unwrap_err();
            assert!(
                matches!(err, BundleError::BadFactSignature { frame: 1, index: 1 }),
                "{err}"
            );
            assert_eq!(err.to_string(), "bundle frame 1, fact 1: bad signature");
        }
        // A big frame, verified in parallel chunks with batches: the first
        // bad fact is named even when a later chunk also has one.
        let mut many: Vec<Vec<u8>> = (0..700).map(|i| team_fact(&id, i)).collect();
        many[500] = bad_signature(&many[500]);
        many[650] = bad_signature(&many[650]);
        let bytes = build_with(&id, Some(&key()), [5; 16], &[many.clone()]);
        let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::BadFactSignature {
                    frame: 0,
                    index: 500
                }
            ),
            "{err}"
        );
        // An undecodable fact before a bad signature: the earlier one is named.
        many[100] = vec![0xff; 10];
        let bytes = build_with(&id, Some(&key()), [5; 16], &[many]);
        let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::BadFact {
                    frame: 0,
                    index: 100,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn many_big_frames_through_the_worker_pool() {
        let a = ident(1);
        let b = ident(2);
        let frames: Vec<Vec<Vec<u8>>> = (0..4u64)
            .map(|f| {
                (0..300u64)
                    .map(|i| {
                        let id = if i % 3 == 0 { &b } else { &a };
                        team_fact(id, f * 1000 + i)
                    })
                    .collect()
            })
            .collect();
        let bytes = build_with(&a, Some(&key()), [6; 16], &frames);
        let v = verify_bundle(&bytes[..], Some(&key())).unwrap();
        assert_eq!((v.summary().frames, v.summary().facts), (4, 1200));
        assert_eq!(import(&bytes, Some(&key())).unwrap(), frames);
        // Bad facts in frames 2 and 3: frame 2's is named, whichever worker
        // finishes first.
        let mut bad = frames.clone();
        bad[3][10] = bad_signature(&bad[3][10]);
        bad[2][290] = bad_signature(&bad[2][290]);
        let bytes = build_with(&a, Some(&key()), [6; 16], &bad);
        for _ in 0..5 {
            let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
            assert!(
                matches!(
                    err,
                    BundleError::BadFactSignature {
                        frame: 2,
                        index: 290
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn facts_that_break_the_data_model_are_refused() {
        // Signed correctly, then one byte of the fact changed and no
        // signature could match; also a fact that does not decode.
        let id = ident(1);
        let bytes = build_with(&id, None, [5; 16], &[vec![vec![0, 1, 2]]]);
        let err = verify_bundle(&bytes[..], None).unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::BadFact {
                    frame: 0,
                    index: 0,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn facts_by_small_order_or_mixed_order_keys_are_named() {
        // The key rules themselves are tested in `verify`; here: a bundle
        // holding a fact that claims such an author names that fact.
        let honest = VerifyingKey::from_bytes(&ident(1).node_id().0).unwrap();
        // A point of order 8, and the identity (order 1).
        let [_, identity, order_8, ..] = verify::SMALL_ORDER_Y;
        let small = VerifyingKey::from_bytes(&order_8).unwrap();
        let mixed = VerifyingKey::from(honest.to_edwards() + small.to_edwards());
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        for author in [mixed.to_bytes(), identity, order_8, not_a_point] {
            let fact = Fact {
                clock: clock(NodeId(author), 1),
                body: FactBody::Team(TeamFact {
                    id: TeamId::parse("x").unwrap(),
                    origin: NodeId([7; 32]),
                    name: String::new(),
                    present: true,
                }),
            };
            let forged = SignedFact {
                signature: ident(1).sign_raw(&crate::sign::signing_bytes(&fact)),
                fact,
            }
            .to_bytes();
            let bytes = build_with(
                &ident(1),
                None,
                [0; 16],
                &[vec![team_fact(&ident(1), 1), forged]],
            );
            let err = verify_bundle(&bytes[..], None).unwrap_err();
            assert!(
                matches!(err, BundleError::BadFactSignature { frame: 0, index: 1 }),
                "{err}"
            );
        }
    }

    #[test]
    fn the_recipient_is_covered_by_the_header_signature() {
        let id = ident(1);
        let (c, b) = (ident(3).node_id(), ident(2).node_id());
        for key in [None, Some(key())] {
            let mut w = BundleWriter::new(
                Vec::new(),
                &id,
                Recipient::Node(c),
                clock(id.node_id(), 5_000),
                scopes(),
                key.as_ref(),
                [7; 16],
            )
            .unwrap();
            for f in sample_frames() {
                w.write_frame(&f).unwrap();
            }
            let (bytes, _) = w.finish().unwrap();
            let v = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            assert_eq!(v.recipient(), Recipient::Node(c));
            assert!(v.recipient().admits(&c));
            assert!(!v.recipient().admits(&b));
            assert!(!v.recipient().admits(&id.node_id()));
            // The recipient sits right after the sender: variant 1, then C's id.
            let at = PREFIX_LEN + 32;
            assert_eq!(bytes[at], 1);
            assert_eq!(bytes[at + 1..at + 33], c.0);
            // Re-addressing it to B (same length, only the recipient
            // changed) breaks the signature; every byte of it does.
            let mut to_b = bytes.clone();
            to_b[at + 1..at + 33].copy_from_slice(&b.0);
            let err = verify_bundle(&to_b[..], key.as_ref()).unwrap_err();
            assert!(
                matches!(err, BundleError::BadSignature | BundleError::Tampered),
                "{err}"
            );
            if key.is_none() {
                assert!(matches!(err, BundleError::BadSignature), "{err}");
            }
            for i in at..at + 33 {
                let mut bad = bytes.clone();
                bad[i] ^= 0x01;
                assert!(verify_bundle(&bad[..], key.as_ref()).is_err(), "byte {i}");
            }
            // Making it "any peer" (dropping the id) fails as well.
            let mut any = bytes[..at].to_vec();
            any.push(0);
            any.extend_from_slice(&bytes[at + 33..]);
            let len = u32::from_le_bytes(any[10..14].try_into().unwrap()) - 32;
            any[10..14].copy_from_slice(&len.to_le_bytes());
            assert!(verify_bundle(&any[..], key.as_ref()).is_err());
        }
        // An export not made for one peer says so.
        let v = verify_bundle(&sample(None)[..], None).unwrap();
        assert_eq!(v.recipient(), Recipient::AnyPeer);
        assert!(v.recipient().admits(&b));
        assert_eq!(Recipient::AnyPeer.to_string(), "any peer");
        assert_eq!(Recipient::Node(c).to_string(), c.to_string());
    }

    #[test]
    fn header_rules() {
        // An unencrypted header with a key check is refused.
        let mut h = BundleHeader {
            sender: ident(1).node_id(),
            recipient: Recipient::AnyPeer,
            created: clock(ident(1).node_id(), 1),
            scopes: vec![],
            encrypted: false,
            nonce_seed: [0; 16],
            key_check: [1; 16],
        };
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let body = codec::encode(&h);
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&body);
        assert!(matches!(
            verify_bundle(&bytes[..], None),
            Err(BundleError::Decode { what: "header", .. })
        ));
        // Bad magic, and a file shorter than the magic.
        assert!(matches!(
            verify_bundle(&b"AMOSBNDX"[..], None),
            Err(BundleError::NotABundle)
        ));
        assert!(matches!(
            verify_bundle(&b"AMOS"[..], None),
            Err(BundleError::Truncated)
        ));
        assert!(matches!(
            verify_bundle(&b"PK\x03\x04"[..], None),
            Err(BundleError::NotABundle)
        ));
        // A header too large to write is refused by the writer.
        h.scopes = vec!["x".repeat(70_000)];
        let err = BundleWriter::new(
            Vec::new(),
            &ident(1),
            Recipient::AnyPeer,
            h.created,
            h.scopes,
            None,
            [0; 16],
        )
        .unwrap_err();
        assert!(matches!(err, BundleError::TooLarge { what: "header", .. }));
    }

    #[test]
    fn writer_refuses_oversized_facts_and_frames() {
        let id = ident(1);
        let mut w = BundleWriter::new(
            Vec::new(),
            &id,
            Recipient::AnyPeer,
            clock(id.node_id(), 1),
            vec![],
            None,
            [0; 16],
        )
        .unwrap();
        let big = vec![0u8; MAX_FACT_BYTES + 1];
        assert!(matches!(
            w.write_frame(std::slice::from_ref(&big)),
            Err(BundleError::TooLarge { what: "fact", .. })
        ));
        assert!(matches!(
            w.push_fact(big),
            Err(BundleError::TooLarge { what: "fact", .. })
        ));
        let many = vec![vec![0u8; MAX_FACT_BYTES]; 17];
        assert!(matches!(
            w.write_frame(&many),
            Err(BundleError::TooLarge { what: "frame", .. })
        ));
        // Nothing was written by the refused calls: the bundle is still fine.
        let (bytes, s) = w.finish().unwrap();
        assert_eq!((s.frames, s.facts), (0, 0));
        verify_bundle(&bytes[..], None).unwrap();
    }

    struct FailingWriter(usize);
    impl Write for FailingWriter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0 < buf.len() {
                return Err(io::Error::other("disk full"));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_poisons_the_writer() {
        let id = ident(1);
        let mut w = BundleWriter::new(
            FailingWriter(200),
            &id,
            Recipient::AnyPeer,
            clock(id.node_id(), 1),
            vec![],
            None,
            [0; 16],
        )
        .unwrap();
        let facts: Vec<Vec<u8>> = (0..5).map(|i| team_fact(&id, i)).collect();
        assert!(matches!(w.write_frame(&facts), Err(BundleError::Io(_))));
        assert!(w.write_frame(&facts[..1]).is_err());
        assert!(w.finish().is_err());
    }

    #[test]
    fn debug_output_shows_no_secrets() {
        let id = ident(1);
        let w = BundleWriter::new(
            Vec::new(),
            &id,
            Recipient::AnyPeer,
            clock(id.node_id(), 1),
            vec![],
            Some(&key()),
            [0; 16],
        )
        .unwrap();
        let dbg = format!("{w:?}");
        assert!(!dbg.contains("66, 66"), "{dbg}");
        let v = verify_bundle(&sample(Some(&key()))[..], Some(&key())).unwrap();
        assert!(format!("{v:?}").contains("VerifiedBundle"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes never panic the reader, with or without a key.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = verify_bundle(&bytes[..], None);
            let _ = verify_bundle(&bytes[..], Some(&key()));
        }

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

        /// Bytes after a valid magic and version reach the parser proper.
        #[test]
        fn arbitrary_bodies_never_panic(tail in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&1u16.to_le_bytes());
            bytes.extend_from_slice(&tail);
            prop_assert!(verify_bundle(&bytes[..], None).is_err());
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

        /// Any change to a valid bundle (several bytes, anywhere) is refused.
        #[test]
        fn random_damage_is_refused(
            edits in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
            encrypted in any::<bool>(),
        ) {
            let key = encrypted.then(key);
            let mut bytes = sample(key.as_ref());
            for (i, x) in &edits {
                let i = i.index(bytes.len());
                bytes[i] ^= x;
            }
            prop_assert!(verify_bundle(&bytes[..], key.as_ref()).is_err());
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
                include_bytes!("../tests/fixtures/bundle-v3-plain.bndl"),
                sample_in(Format::Uncompressed, None),
            ),
            (
                "bundle-v3-encrypted.bndl",
                include_bytes!("../tests/fixtures/bundle-v3-encrypted.bndl"),
                sample_in(Format::Uncompressed, Some(&key())),
            ),
            (
                "bundle-v4-pairing.bndl",
                include_bytes!("../tests/fixtures/bundle-v4-pairing.bndl"),
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

    /// A memory fact with the given text and tags, by `author`.
    fn memory_with(
        author: &NodeIdentity,
        ms: u64,
        random: [u8; 10],
        text: String,
        tags: Vec<String>,
        importance: f32,
    ) -> Vec<u8> {
        let node = author.node_id();
        let fact = Fact {
            clock: clock(node, ms),
            body: FactBody::MemoryContent(MemoryContent {
                id: MemoryId::new(ms, random),
                fixed: MemoryFixed {
                    owner: AgentId::parse("claude-1").unwrap(),
                    created_ms: ms,
                    origin: node,
                },
                kind: MemoryType::default(),
                text: MemoryText::Plain(text),
                tags,
                importance,
                confidence: 1.0,
                pinned: false,
                expires_ms: None,
                supersedes: None,
                validity: Default::default(),
            }),
        };
        author.sign(fact).unwrap().to_bytes()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Arbitrary facts (any text, tags, ids, authors), split into frames
        /// anyhow, come back from a bundle in today's format in order and
        /// byte for byte, keyed or not.
        #[test]
        fn arbitrary_facts_round_trip_through_compressed_bundles(
            memories in prop::collection::vec(
                (
                    1u8..5,
                    any::<u64>(),
                    any::<[u8; 10]>(),
                    "\\PC{0,300}",
                    prop::collection::vec("[a-z0-9 ._-]{1,12}", 0..4),
                    0.0f32..=1.0,
                ),
                1..40,
            ),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
            encrypted in any::<bool>(),
        ) {
            let facts: Vec<Vec<u8>> = memories
                .into_iter()
                .map(|(author, ms, random, text, tags, importance)| {
                    let ms = ms % (1 << 47);
                    memory_with(&ident(author), ms, random, format!("x{text}"), tags, importance)
                })
                .collect();
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(facts.len())).collect();
            bounds.extend([0, facts.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let frames: Vec<Vec<Vec<u8>>> = bounds
                .windows(2)
                .map(|w| facts[w[0]..w[1]].to_vec())
                .collect();
            let key = encrypted.then(key);
            let bytes = build_with(&ident(1), key.as_ref(), [3; 16], &frames);
            prop_assert_eq!(&bytes[8..10], &FORMAT_VERSION.to_le_bytes()[..]);
            prop_assert_eq!(import(&bytes, key.as_ref()).unwrap(), frames);
        }
    }

    /// CPU seconds this process has used (user + system), from /proc (Linux).
    fn cpu_seconds() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Wall and CPU time of `f`.
    fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
        let (t, c) = (std::time::Instant::now(), cpu_seconds());
        let out = f();
        println!(
            "{what}: wall {:.2} s, cpu {:.2} s",
            t.elapsed().as_secs_f64(),
            cpu_seconds() - c
        );
        out
    }

    /// `cargo test --release -p amos-protocol bundle::tests::bench -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn bench_300k_facts() {
        use std::time::Instant;
        const N: u64 = 300_000;
        let ids: Vec<NodeIdentity> = (1..=3).map(ident).collect();
        let t = Instant::now();
        let workers = 2u64;
        let facts: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..workers)
                .map(|w| {
                    let ids = &ids;
                    s.spawn(move || {
                        (w * N / workers..(w + 1) * N / workers)
                            .map(|i| memory_fact(&ids[(i % 3) as usize], i))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let avg = facts.iter().map(Vec::len).sum::<usize>() / facts.len();
        println!("generated {N} facts (avg {avg} bytes) in {:?}", t.elapsed());

        let key = key();
        let t = Instant::now();
        let mut w = BundleWriter::new(
            Vec::new(),
            &ids[0],
            Recipient::AnyPeer,
            clock(ids[0].node_id(), 1),
            scopes(),
            Some(&key),
            [9; 16],
        )
        .unwrap();
        for f in &facts {
            w.push_fact(f.clone()).unwrap();
        }
        let (bytes, s) = w.finish().unwrap();
        println!(
            "wrote {} frames, {} facts, {} MB in {:?}",
            s.frames,
            s.facts,
            s.bytes / 1_000_000,
            t.elapsed()
        );

        let workers = worker_count();
        let v = timed(
            &format!("pass 1, verify_bundle ({workers} workers)"),
            || verify_bundle(&bytes[..], Some(&key)).unwrap(),
        );
        assert_eq!(v.summary().facts, N);
        let n = timed("pass 2, read_verified", || {
            let mut n = 0usize;
            read_verified(&bytes[..], Some(&key), &v, |f| {
                n += f.len();
                Ok::<(), ()>(())
            })
            .unwrap();
            n
        });
        assert_eq!(n as u64, N);
        timed("decode + validate + signing_bytes, 1 thread", || {
            for f in &facts {
                let sf = codec::decode_signed(f).unwrap();
                sf.fact.validate().unwrap();
                std::hint::black_box(crate::sign::signing_bytes(&sf.fact));
            }
        });
        // The live-sync path: the same verifier over whole batches of 4096.
        timed(
            "verify::verify_all, batches of 4096 (live sync's path)",
            || {
                for batch in facts.chunks(FRAME_FACTS) {
                    assert_eq!(verify::verify_all(batch).unwrap().len(), batch.len());
                }
            },
        );
        // Baseline: the same facts one by one with SignedFact::decode_verified,
        // on as many threads.
        let per = facts.len().div_ceil(workers);
        timed(
            &format!("baseline: decode_verified one by one, {workers} threads"),
            || {
                std::thread::scope(|s| {
                    for chunk in facts.chunks(per) {
                        s.spawn(move || {
                            for f in chunk {
                                SignedFact::decode_verified(f).unwrap();
                            }
                        });
                    }
                })
            },
        );
    }
}
