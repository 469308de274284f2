//! The bundle's cryptography: the key check that tells a wrong key from a
//! corrupt file, frame encryption (XChaCha20-Poly1305 under a key derived
//! from the mesh key, the nonce the header's seed and the frame's index,
//! the header's hash and the index as associated data) and the sender's
//! signature over the content hash and the counts in the trailer.
//!
//! Invariant: a frame's tag binds it to its bundle's header and to its
//! place in it, so no frame can be altered, reordered, dropped, duplicated
//! or moved into another bundle; the trailer's signature covers every byte
//! before it, so nobody but the sender can re-address or change a bundle.
//!
//! Boundary: no I/O and no randomness: the nonce seed comes from the
//! writer's caller.

use std::io;

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ed25519_dalek::{Signature, VerifyingKey};

use super::format::TAG_LEN;
use super::{BundleError, BundleHeader};
use crate::mesh::MeshKey;
use crate::{NodeId, NodeIdentity};

const KEY_CHECK_MSG: &[u8] = b"amos-bundle-key-check";
const FRAME_KEY_CONTEXT: &str = "amos bundle v1 frame encryption key";
const SIGN_DOMAIN: &[u8] = b"amos-bundle-v1\0";

pub(super) fn key_check(key: &MeshKey) -> [u8; 16] {
    let h = blake3::keyed_hash(key.as_bytes(), KEY_CHECK_MSG);
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

pub(super) fn frame_cipher(key: &MeshKey) -> XChaCha20Poly1305 {
    let k = blake3::derive_key(FRAME_KEY_CONTEXT, key.as_bytes());
    XChaCha20Poly1305::new(&k.into())
}

pub(super) fn frame_nonce(seed: &[u8; 16], index: u64) -> XNonce {
    let mut n = [0u8; 24];
    n[..16].copy_from_slice(seed);
    n[16..].copy_from_slice(&index.to_be_bytes());
    n.into()
}

pub(super) fn frame_aad(header_hash: &[u8; 32], index: u64) -> [u8; 40] {
    let mut a = [0u8; 40];
    a[..32].copy_from_slice(header_hash);
    a[32..].copy_from_slice(&index.to_be_bytes());
    a
}

pub(super) fn signed_message(content_hash: &[u8; 32], frames: u64, facts: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(SIGN_DOMAIN.len() + 48);
    m.extend_from_slice(SIGN_DOMAIN);
    m.extend_from_slice(content_hash);
    m.extend_from_slice(&frames.to_be_bytes());
    m.extend_from_slice(&facts.to_be_bytes());
    m
}

/// Encrypt frame `index`'s stored form in place, appending its tag, for the
/// bundle whose header bytes hash to `header_hash`.
pub(super) fn seal_frame(
    cipher: &XChaCha20Poly1305,
    nonce_seed: &[u8; 16],
    header_hash: &[u8; 32],
    index: u64,
    frame: &mut Vec<u8>,
) -> Result<(), BundleError> {
    cipher
        .encrypt_in_place(
            &frame_nonce(nonce_seed, index),
            &frame_aad(header_hash, index),
            frame,
        )
        .map_err(|_| io::Error::other("frame encryption failed").into())
}

/// The sender's signature for the trailer of a bundle whose content hashes
/// to `content_hash` and holds `frames` frames of `facts` facts.
pub(super) fn sign_trailer(
    identity: &NodeIdentity,
    content_hash: &[u8; 32],
    frames: u64,
    facts: u64,
) -> [u8; 64] {
    identity.sign_raw(&signed_message(content_hash, frames, facts))
}

/// Check a trailer's signature by `sender` (`verify_strict`).
pub(super) fn check_trailer(
    sender: &NodeId,
    content_hash: &[u8; 32],
    frames: u64,
    facts: u64,
    signature: &[u8; 64],
) -> Result<(), BundleError> {
    let sender = VerifyingKey::from_bytes(&sender.0).map_err(|_| BundleError::BadSignature)?;
    sender
        .verify_strict(
            &signed_message(content_hash, frames, facts),
            &Signature::from_bytes(signature),
        )
        .map_err(|_| BundleError::BadSignature)
}

/// The cipher for an encrypted bundle (checking the key), `None` for a plain one.
pub(super) fn open_cipher(
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

/// Decrypt a frame in place (no-op for plain bundles). A bad tag is tampering.
pub(super) fn open_frame(
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

#[cfg(test)]
mod tests {
    use super::super::format::{DECLARED_LEN, PREFIX_LEN, ZSTD_MAGIC, decompress_frame};
    use super::super::testkit::*;
    use super::*;
    use crate::bundle::{BundleWriter, ReadError, Recipient, read_verified, verify_bundle};

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
}
