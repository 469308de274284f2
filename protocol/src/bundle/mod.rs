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
//! | 10 | 4 | header length `H`, u32, at most 64 KiB ([`MAX_HEADER_BYTES`](format::MAX_HEADER_BYTES)) |
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
//! | 4 | frame length `L`, u32, 1 ..= 16 MiB ([`MAX_FRAME_BYTES`](format::MAX_FRAME_BYTES)); checked before anything is allocated |
//! | `L` | the frame bytes |
//!
//! The *plaintext* of a frame is bincode of `Vec<Vec<u8>>`: a varint count
//! (at least 1), then for each fact a varint length and its wire encoding
//! ([`SignedFact::to_bytes`](crate::SignedFact::to_bytes), at most [`codec::MAX_FACT_BYTES`](crate::codec::MAX_FACT_BYTES)); it is at
//! most 16 MiB ([`MAX_FRAME_BYTES`](format::MAX_FRAME_BYTES)). It is stored compressed:
//!
//! | size | field |
//! |---|---|
//! | 4 | declared length `D`, u32: the plaintext's length, at most 16 MiB ([`MAX_FRAME_BYTES`](format::MAX_FRAME_BYTES)) |
//! | rest | exactly one zstd frame (RFC 8878) of the plaintext: it begins with zstd's magic `28 B5 2F FD` (so no skippable frame and no legacy zstd format), it records its content size, which equals `D`, and nothing follows it |
//!
//! amos compresses each frame in one shot at level [`COMPRESSION_LEVEL`](format::COMPRESSION_LEVEL)
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
//! *Bounded.* A reader checks `D` against [`MAX_FRAME_BYTES`](format::MAX_FRAME_BYTES) before it
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
//! # Sealed bundles (version 7)
//!
//! A bundle can be *sealed* to its recipient's identity instead of
//! encrypted under the mesh key: only the node holding the recipient's
//! ed25519 secret key can open it, and no mesh key is needed (so a scoped
//! peer, which is not given the mesh key, can use one). The layout is
//! version 5's, with format version 7 and, right after the header body,
//! bincode of `SealedExt` = `ephemeral` (32 bytes: the sender's fresh X25519
//! public key for this bundle), `pairing` (bincode `Option` of
//! [`PairingProof`]: 0, or 1 then the proof) and `postmark` (bincode
//! `Option` of [`Postmark`], a mailbox bundle's place in its sender's log).
//! The header must have `encrypted` = 1 and a recipient that is one node.
//! The frame key is not the mesh key's:
//!
//! * `shared` = X25519(ephemeral secret, the Montgomery form of the
//!   recipient's ed25519 public key) — the recipient computes it as
//!   X25519(its ed25519 secret scalar, `ephemeral`); an all-zero result
//!   (a low-order `ephemeral`) is refused;
//! * 48 bytes = HKDF-SHA256(salt = `ephemeral` ‖ recipient NodeId,
//!   ikm = `shared`, info = `b"amos bundle v7 sealed frame key"`);
//! * the first 32 are the XChaCha20-Poly1305 frame key (nonce and
//!   associated data as above), the last 16 are `key_check`.
//!
//! Everything else — the trailer signature by the sender, the recipient
//! check, the frame tags bound to the header hash and index — is as for
//! version 5. A reader refuses a sealed bundle not addressed to the identity
//! it was given before reading any frame ([`BundleError::SealedTo`]), and
//! a key check that does not match as tampering. A reader of the release
//! before this one does not know version 7 and refuses it in one line
//! ("bundle format version 7 is not supported"), changing nothing.
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
//!    the caller as [`Verified`](crate::Verified) facts. Each frame must hash to what pass 1
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
//!
//! # Where the code is
//!
//! `format` lays out the bytes (constants, the trailer, frame plaintexts
//! and their compressed form); `seal` is the cryptography over them (the
//! key check, frame encryption bound to the header and the frame's index,
//! the trailer signature); `writer` streams a bundle out
//! ([`BundleWriter`]); `reader` reads one in two passes ([`verify_bundle`],
//! [`read_verified`]), its facts checked by `fact_check`'s workers. This
//! file holds the types a caller sees.

mod fact_check;
mod format;
mod reader;
mod seal;
#[cfg(test)]
mod testkit;
mod writer;

use std::io;

use bincode::{Decode, Encode};

use crate::mesh::MeshKey;
use crate::wire::{Epoch, Watermark};
use crate::{Hlc, NodeId, NodeIdentity, ProtocolError};

pub use format::{FORMAT_VERSION, FRAME_FACTS, SEALED_FORMAT_VERSION};
pub use reader::{
    BundleInfo, VerifiedBundle, peek_header, read_verified, read_verified_with, verify_bundle,
    verify_bundle_with,
};
pub use writer::{BundleWriter, SealTo};

/// The keys a reader may open a bundle with: the mesh key (a bundle
/// encrypted under it) and this node's identity (a bundle sealed to it).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenWith<'a> {
    /// The mesh key, if one is set.
    pub mesh: Option<&'a MeshKey>,
    /// This node's identity: opens a bundle sealed to it.
    pub identity: Option<&'a NodeIdentity>,
}

/// A mailbox bundle's place in its sender's log (docs/design.md §8.2),
/// signed with the header of a sealed bundle: what a sync session's
/// `Hello` and `Done` say, for a bundle that has no session around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Postmark {
    /// The sender's log epoch.
    pub epoch: Epoch,
    /// The export covers the sender's rows changed after this `seq`.
    pub since: i64,
    /// …up to this `seq`: once every frame is applied, the recipient's
    /// watermark of the sender, if it held everything up to `since`.
    pub upto: i64,
    /// The sender's watermark of the recipient's log when it wrote the
    /// bundle (the acknowledgement of the bundles it imported).
    pub have: Option<Watermark>,
}

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
    /// Whether frames are encrypted: under the mesh key, or (format 7)
    /// sealed to the recipient.
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
    /// The invite's public id (`pairing::invite_id` of its secret), naming which code the joiner answers.
    pub invite: [u8; 16],
    /// The joiner's proof that it holds the invite's secret, bound to the joiner and the inviter.
    pub proof: [u8; 32],
}

/// Counts of a written or verified bundle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BundleSummary {
    /// Frames written or verified.
    pub frames: u64,
    /// Facts in those frames.
    pub facts: u64,
    /// Size of the whole file.
    pub bytes: u64,
}

/// Why a bundle was refused. Every variant displays as one line fit for a user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    /// The file does not begin with the bundle magic `AMOSBNDL`.
    #[error("not an amos bundle (bad magic bytes)")]
    NotABundle,
    /// A format version this amos does not read (a newer amos wrote it, or the file is damaged).
    #[error("bundle format version {0} is not supported")]
    UnsupportedVersion(u16),
    /// Format version 1 or 2: written before bundles named their recipient.
    #[error(
        "bundle format version {0} was written by an older amos and names no recipient; export it again"
    )]
    OldVersion(u16),
    /// The file ends before the bundle does.
    #[error("bundle is truncated")]
    Truncated,
    /// A length field or a written value is over its limit; nothing that size was allocated.
    #[error("bundle {what} is too large: {size} bytes (limit {limit})")]
    TooLarge {
        /// The part that was too large (`header`, `frame`, `fact`, `trailer`, `decompressed frame`).
        what: &'static str,
        /// Its size in bytes.
        size: u64,
        /// The limit it broke.
        limit: u64,
    },
    /// A frame's tag does not verify, or the bytes differ from what pass 1 verified or the trailer counts.
    #[error("bundle is corrupt or was tampered with")]
    Tampered,
    /// The mesh key given is not the one the bundle was encrypted under (its key check differs).
    #[error("bundle was encrypted with a different mesh key")]
    WrongKey,
    /// The bundle is encrypted and no mesh key was given.
    #[error("bundle is encrypted; set the mesh key")]
    NeedsKey,
    /// The bundle is sealed to another node's identity (or no identity was
    /// given): no mesh key opens it.
    #[error("bundle is sealed to node {0}: only that node can open it")]
    SealedTo(NodeId),
    /// A fact's signature does not verify although the bundle's does: the
    /// sender shipped a forged or damaged fact.
    #[error("bundle frame {frame}, fact {index}: bad signature")]
    BadFactSignature {
        /// The frame's index, from 0.
        frame: u64,
        /// The fact's index within the frame, from 0.
        index: u64,
    },
    /// A fact the sender signed breaks the data model or does not decode: the sender shipped it.
    #[error("bundle frame {frame}, fact {index}: {error}")]
    BadFact {
        /// The frame's index, from 0.
        frame: u64,
        /// The fact's index within the frame, from 0.
        index: u64,
        /// What is wrong with the fact.
        error: ProtocolError,
    },
    /// The trailer's signature does not verify for the header's sender: the file was changed.
    #[error("bundle is corrupt or was tampered with: its signature does not verify")]
    BadSignature,
    /// Bytes follow the trailer.
    #[error("bundle has unexpected bytes after its end")]
    TrailingBytes,
    /// A part of the bundle is not the canonical encoding it must be.
    #[error("bundle {what} does not decode: {reason}")]
    Decode {
        /// The part that did not decode (`header`, `frame`, `trailer`).
        what: &'static str,
        /// Why, in one line.
        reason: String,
    },
    /// Reading or writing the underlying stream failed.
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
    /// The bundle was refused.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The caller's `apply` failed; the read stopped there.
    #[error("{0}")]
    Apply(E),
}
