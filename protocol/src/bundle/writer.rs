//! Writing a bundle: [`BundleWriter`] streams the header, one frame at a
//! time (its facts encoded, compressed, sealed) and the signed trailer, and
//! never seeks back.
//!
//! Invariant: memory is bounded by one frame; a writer whose output failed
//! once refuses every later call, so a partial bundle is never finished.
//!
//! Boundary: it trusts its input (wire bytes of facts from the store, which
//! holds only verified facts) and writes only to the `Write` it was given.

use std::io::{self, Write};

use chacha20poly1305::XChaCha20Poly1305;

use super::format::{
    BundleTrailer, COMPRESSION_LEVEL, DECLARED_LEN, FORMAT_VERSION, FRAME_FACTS,
    FRAME_TARGET_BYTES, MAGIC, MAX_FRAME_BYTES, MAX_HEADER_BYTES, PAIRING_FORMAT_VERSION,
    PREFIX_LEN, SEALED_FORMAT_VERSION, SealedExt, TAG_LEN, UNCOMPRESSED_FORMAT_VERSION,
    UNCOMPRESSED_PAIRING_FORMAT_VERSION, compress_frame, encode_frame, frame_plain_len,
};
use super::seal::{frame_cipher, key_check, seal_frame, seal_to, sign_trailer};
use super::{BundleError, BundleHeader, BundleSummary, PairingProof, Postmark, Recipient};
use crate::codec::{self, MAX_FACT_BYTES};
use crate::mesh::MeshKey;
use crate::{Hlc, NodeId, NodeIdentity};

/// Whom a sealed bundle is for, and the randomness that seals it
/// ([`BundleWriter::sealed`]).
#[derive(Clone, Copy)]
pub struct SealTo {
    /// The one node that can open the bundle (its recipient).
    pub recipient: NodeId,
    /// The ephemeral X25519 secret: 32 bytes of fresh randomness, never
    /// used for another bundle.
    pub ephemeral: [u8; 32],
}

impl std::fmt::Debug for SealTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealTo")
            .field("recipient", &self.recipient)
            .finish_non_exhaustive()
    }
}

/// How a writer encrypts its frames.
enum Keying<'a> {
    /// Under the mesh key, or not at all.
    Mesh(Option<&'a MeshKey>),
    /// Sealed to one node, with what a sealed header carries.
    Sealed(SealTo, Option<Postmark>),
}

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
    /// header (format version 6, `PAIRING_FORMAT_VERSION`).
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
            Keying::Mesh(key),
            nonce_seed,
            pairing,
            Some(compressor),
        )
    }

    /// A bundle sealed to `seal.recipient` (format 7,
    /// [`SEALED_FORMAT_VERSION`]): frames encrypted under a key that only
    /// the recipient's identity can derive, no mesh key involved. It may
    /// carry a joiner's [`PairingProof`] and a mailbox [`Postmark`], both
    /// signed with the header. `nonce_seed` must be fresh randomness.
    #[allow(clippy::too_many_arguments)]
    pub fn sealed(
        out: W,
        identity: &NodeIdentity,
        seal: SealTo,
        created: Hlc,
        scopes: Vec<String>,
        nonce_seed: [u8; 16],
        pairing: Option<PairingProof>,
        postmark: Option<Postmark>,
    ) -> Result<Self, BundleError> {
        let compressor = zstd::bulk::Compressor::new(COMPRESSION_LEVEL)
            .map_err(|e| io::Error::other(format!("frame compressor: {e}")))?;
        Self::start(
            out,
            identity,
            Recipient::Node(seal.recipient),
            created,
            scopes,
            Keying::Sealed(seal, postmark),
            nonce_seed,
            pairing,
            Some(compressor),
        )
    }

    /// A writer of the uncompressed format (3, or 4 with a proof), which
    /// amos no longer writes: for the tests that prove it is still read.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn uncompressed(
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
            out,
            identity,
            recipient,
            created,
            scopes,
            Keying::Mesh(key),
            nonce_seed,
            pairing,
            None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        out: W,
        identity: &NodeIdentity,
        recipient: Recipient,
        created: Hlc,
        scopes: Vec<String>,
        keying: Keying<'_>,
        nonce_seed: [u8; 16],
        pairing: Option<PairingProof>,
        compressor: Option<zstd::bulk::Compressor<'static>>,
    ) -> Result<Self, BundleError> {
        let (cipher, check, ext) = match keying {
            Keying::Mesh(key) => (key.map(frame_cipher), key.map(key_check), None),
            Keying::Sealed(seal, postmark) => {
                let sealed = seal_to(&seal.recipient, seal.ephemeral)?;
                let ext = SealedExt {
                    ephemeral: sealed.ephemeral,
                    pairing,
                    postmark,
                };
                (Some(sealed.cipher), Some(sealed.key_check), Some(ext))
            }
        };
        let header = BundleHeader {
            sender: identity.node_id(),
            recipient,
            created,
            scopes,
            encrypted: cipher.is_some(),
            nonce_seed,
            key_check: check.unwrap_or([0; 16]),
        };
        let mut body = codec::encode(&header);
        let sealed = ext.is_some();
        let proof = match (&ext, pairing) {
            (Some(ext), _) if !body.is_empty() => {
                body.extend_from_slice(&codec::encode(ext));
                false
            }
            (None, Some(p)) if !body.is_empty() => {
                body.extend_from_slice(&codec::encode(&p));
                true
            }
            _ => false,
        };
        let version = match (compressor.is_some(), proof) {
            _ if sealed => SEALED_FORMAT_VERSION,
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
            cipher,
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
    pub(super) fn write_plain(&mut self, plain: Vec<u8>, facts: u64) -> Result<(), BundleError> {
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
    pub(super) fn seal_and_emit(
        &mut self,
        mut buf: Vec<u8>,
        facts: u64,
    ) -> Result<(), BundleError> {
        let index = self.summary.frames;
        if let Some(cipher) = &self.cipher
            && let Err(e) = seal_frame(cipher, &self.nonce_seed, &self.header_hash, index, &mut buf)
        {
            self.failed = true;
            return Err(e);
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
    /// `FRAME_TARGET_BYTES` (4 MiB) bytes. [`BundleWriter::finish`] writes the rest.
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
            signature: sign_trailer(
                &self.identity,
                &content_hash,
                self.summary.frames,
                self.summary.facts,
            ),
        };
        let body = codec::encode(&trailer);
        self.emit(&(body.len() as u32).to_le_bytes(), false)?;
        self.emit(&body, false)?;
        self.out.flush()?;
        Ok((self.out, self.summary))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::bundle::verify_bundle;
    use proptest::prelude::*;

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
}
