//! The bundle's cryptography: the key check that tells a wrong key from a
//! corrupt file, frame encryption (XChaCha20-Poly1305 under a key derived
//! from the mesh key, or for a sealed bundle from an X25519 exchange
//! between a fresh ephemeral key and the recipient's identity; the nonce
//! the header's seed and the frame's index, the header's hash and the index
//! as associated data) and the sender's signature over the content hash
//! and the counts in the trailer.
//!
//! Invariant: a frame's tag binds it to its bundle's header and to its
//! place in it, so no frame can be altered, reordered, dropped, duplicated
//! or moved into another bundle; the trailer's signature covers every byte
//! before it, so nobody but the sender can re-address or change a bundle.
//! A sealed bundle's frame key is derived only from the X25519 secret the
//! ephemeral key shares with the recipient: no mesh key opens it, and no
//! node but the recipient can derive it.
//!
//! Boundary: no I/O and no randomness: the nonce seed comes from the
//! writer's caller.

use std::io;

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use curve25519_dalek::MontgomeryPoint;
use ed25519_dalek::{Signature, VerifyingKey};
use zeroize::Zeroize;

use super::format::TAG_LEN;
use super::{BundleError, BundleHeader, OpenWith, Recipient};
use crate::mesh::MeshKey;
use crate::{NodeId, NodeIdentity};

const KEY_CHECK_MSG: &[u8] = b"amos-bundle-key-check";
const FRAME_KEY_CONTEXT: &str = "amos bundle v1 frame encryption key";
const SIGN_DOMAIN: &[u8] = b"amos-bundle-v1\0";
/// HKDF-SHA256's `info` for a sealed bundle's frame key and key check.
const SEALED_INFO: &[u8] = b"amos bundle v7 sealed frame key";

/// What sealing gives a writer: the ephemeral public key for the header,
/// the frame cipher and the key check.
pub(super) struct Sealed {
    pub(super) ephemeral: [u8; 32],
    pub(super) cipher: XChaCha20Poly1305,
    pub(super) key_check: [u8; 16],
}

/// The frame key and key check of a sealed bundle: HKDF-SHA256 with the
/// X25519 shared secret as input key material, the ephemeral public key
/// and the recipient's node id as salt, [`SEALED_INFO`] as info; 48 bytes
/// out, the key then the check.
fn sealed_keys(
    mut shared: [u8; 32],
    ephemeral: &[u8; 32],
    recipient: &NodeId,
) -> (XChaCha20Poly1305, [u8; 16]) {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(ephemeral);
    salt[32..].copy_from_slice(&recipient.0);
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(&salt), &shared);
    shared.zeroize();
    let mut okm = [0u8; 48];
    // 48 bytes is far below HKDF-SHA256's limit (255 × 32).
    let _ = hk.expand(SEALED_INFO, &mut okm);
    let mut key = [0u8; 32];
    key.copy_from_slice(&okm[..32]);
    let mut check = [0u8; 16];
    check.copy_from_slice(&okm[32..]);
    let cipher = XChaCha20Poly1305::new(&key.into());
    key.zeroize();
    okm.zeroize();
    (cipher, check)
}

/// Seal a bundle to `recipient` with the ephemeral secret `ephemeral`
/// (32 bytes of fresh randomness, never reused): X25519 of it with the
/// Montgomery form of the recipient's ed25519 key.
pub(super) fn seal_to(recipient: &NodeId, ephemeral: [u8; 32]) -> Result<Sealed, BundleError> {
    let point = VerifyingKey::from_bytes(&recipient.0)
        .map_err(|_| io::Error::other(format!("cannot seal to {recipient}: not a node key")))?
        .to_montgomery();
    let public = MontgomeryPoint::mul_base_clamped(ephemeral).to_bytes();
    let shared = point.mul_clamped(ephemeral).to_bytes();
    if shared == [0; 32] {
        return Err(
            io::Error::other(format!("cannot seal to {recipient}: a low-order key")).into(),
        );
    }
    let (cipher, key_check) = sealed_keys(shared, &public, recipient);
    Ok(Sealed {
        ephemeral: public,
        cipher,
        key_check,
    })
}

/// The frame cipher of a bundle sealed to `me` with the ephemeral public
/// key `ephemeral`, once the key check in `header` matched. A low-order
/// ephemeral key or a key check that differs (only a changed header can
/// make one) is tampering.
fn open_sealed(
    me: &NodeIdentity,
    ephemeral: &[u8; 32],
    header: &BundleHeader,
) -> Result<XChaCha20Poly1305, BundleError> {
    let shared = me.x25519(ephemeral);
    if shared == [0; 32] {
        return Err(BundleError::Tampered);
    }
    let (cipher, check) = sealed_keys(shared, ephemeral, &me.node_id());
    if check != header.key_check {
        return Err(BundleError::Tampered);
    }
    Ok(cipher)
}

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

/// The cipher for an encrypted bundle (checking the key), `None` for a
/// plain one. `sealed`: the ephemeral key of a sealed bundle, which only
/// its recipient's identity opens (no mesh key does).
pub(super) fn open_cipher(
    header: &BundleHeader,
    sealed: Option<&[u8; 32]>,
    keys: OpenWith<'_>,
) -> Result<Option<XChaCha20Poly1305>, BundleError> {
    if let Some(ephemeral) = sealed {
        let Recipient::Node(to) = header.recipient else {
            return Err(BundleError::Tampered);
        };
        return match keys.identity {
            Some(me) if me.node_id() == to => open_sealed(me, ephemeral, header).map(Some),
            _ => Err(BundleError::SealedTo(to)),
        };
    }
    if !header.encrypted {
        return Ok(None);
    }
    let key = keys.mesh.ok_or(BundleError::NeedsKey)?;
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
    use crate::bundle::format::SEALED_FORMAT_VERSION;
    use crate::bundle::{
        BundleWriter, PairingProof, Postmark, ReadError, Recipient, SealTo, peek_header,
        read_verified, read_verified_with, verify_bundle, verify_bundle_with,
    };
    use crate::wire::Watermark;
    use proptest::prelude::*;

    #[test]
    fn a_sealed_bundle_opens_only_on_its_recipient() {
        let (sender, c, b) = (ident(1), ident(3), ident(2));
        let sealed = sealed_sample();
        assert_eq!(sealed[..8], *b"AMOSBNDL");
        assert_eq!(sealed[8..10], SEALED_FORMAT_VERSION.to_le_bytes());
        // The recipient opens it, with or without the mesh key.
        for mesh in [None, Some(key())] {
            assert_eq!(
                import_with(&sealed, keys(mesh.as_ref(), &c)).unwrap(),
                sample_frames()
            );
        }
        let v = verify_bundle_with(&sealed[..], keys(None, &c)).unwrap();
        assert!(v.sealed());
        assert!(v.header().encrypted);
        assert_eq!(v.recipient(), Recipient::Node(c.node_id()));
        assert_eq!(v.sender(), sender.node_id());
        assert_eq!((v.postmark(), v.pairing()), (None, None));
        // Nobody else: not a third node holding the same mesh key, not the
        // sender itself, not a reader with the mesh key and no identity.
        fn refused<T>(r: Result<T, BundleError>, to: NodeId) {
            match r {
                Err(BundleError::SealedTo(n)) => assert_eq!(n, to),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("opened"),
            }
        }
        let c_id = c.node_id();
        for other in [&b, &sender] {
            refused(
                verify_bundle_with(&sealed[..], keys(Some(&key()), other)),
                c_id,
            );
            refused(import_with(&sealed, keys(Some(&key()), other)), c_id);
        }
        refused(verify_bundle(&sealed[..], Some(&key())), c_id);
        refused(verify_bundle(&sealed[..], None), c_id);
        // Pass 2 with another identity is refused too.
        let r = read_verified_with(
            &sealed[..],
            keys(Some(&key()), &b),
            &v,
            |_| Ok::<(), ()>(()),
        );
        assert!(matches!(
            r,
            Err(ReadError::Bundle(BundleError::SealedTo(_)))
        ));
        let line = BundleError::SealedTo(c.node_id()).to_string();
        assert_eq!(
            line,
            format!(
                "bundle is sealed to node {}: only that node can open it",
                c.node_id()
            )
        );
        // Its frames show neither the text nor a zstd frame.
        let text = b"release build runs clippy";
        assert!(!sealed.windows(text.len()).any(|w| w == text));
        assert!(!sealed.windows(4).any(|w| w == ZSTD_MAGIC));
        // A fresh ephemeral key makes other bytes of the same facts.
        let again = sealed_with(&sender, &c, [6; 32], [7; 16], &sample_frames(), None, None);
        assert_ne!(again, sealed);
        assert_eq!(
            import_with(&again, keys(None, &c)).unwrap(),
            sample_frames()
        );
        // The header says who to and who from, without a key.
        let info = peek_header(&sealed[..]).unwrap();
        assert!(info.sealed);
        assert_eq!(info.header.recipient, Recipient::Node(c.node_id()));
        assert_eq!(info.header.sender, sender.node_id());
        assert!(!peek_header(&sample(Some(&key()))[..]).unwrap().sealed);
    }

    /// The recipient check is not what keeps others out: a reader that
    /// skipped it, holding any identity but the recipient's, derives
    /// another key (its key check fails) and cannot open a frame.
    #[test]
    fn only_the_recipients_secret_derives_the_frame_key() {
        let c = ident(3);
        let sealed = sealed_sample();
        let info = peek_header(&sealed[..]).unwrap();
        let l = layout(&sealed);
        let ephemeral: [u8; 32] = sealed[l.header_end - 34..l.header_end - 2]
            .try_into()
            .unwrap();
        assert!(open_sealed(&c, &ephemeral, &info.header).is_ok());
        for other in [ident(1), ident(2), ident(4)] {
            assert!(matches!(
                open_sealed(&other, &ephemeral, &info.header),
                Err(BundleError::Tampered)
            ));
            // Nor does its cipher, used anyway, open the first frame.
            let shared = other.x25519(&ephemeral);
            let (cipher, _) = sealed_keys(shared, &ephemeral, &c.node_id());
            let (s, e) = l.frames[0];
            let mut frame = sealed[s + 4..e].to_vec();
            let hash = *blake3::hash(&sealed[..l.header_end]).as_bytes();
            assert!(open_frame(Some(&cipher), &info.header, &hash, 0, &mut frame).is_err());
        }
    }

    #[test]
    fn every_byte_of_a_sealed_bundle_is_covered() {
        let c = ident(3);
        let sealed = sealed_sample();
        let l = layout(&sealed);
        assert_eq!(l.frames.len(), 3);
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x20;
            assert!(
                import_with(&bad, keys(Some(&key()), &c)).is_err(),
                "byte {i} of {}",
                sealed.len()
            );
        }
        for n in 0..sealed.len() {
            assert!(
                import_with(&sealed[..n], keys(None, &c)).is_err(),
                "truncated at {n}"
            );
        }
        let mut longer = sealed.clone();
        longer.push(0);
        assert!(matches!(
            import_with(&longer, keys(None, &c)),
            Err(BundleError::TrailingBytes)
        ));
        // A low-order ephemeral key in place of the real one: refused
        // before any frame (the key check cannot match), never opened.
        // The ephemeral key, then two empty options, end the header body.
        let at = l.header_end - 34;
        let mut low = sealed.clone();
        low[at..at + 32].fill(0);
        assert!(import_with(&low, keys(None, &c)).is_err());
    }

    #[test]
    fn a_sealed_header_carries_a_signed_pairing_proof_and_postmark() {
        let (sender, c) = (ident(1), ident(3));
        let pairing = PairingProof {
            invite: [3; 16],
            proof: [4; 32],
        };
        let postmark = Postmark {
            epoch: [9; 16],
            since: 12,
            upto: 40,
            have: Some(Watermark {
                epoch: [8; 16],
                seq: 7,
            }),
        };
        let bytes = sealed_with(
            &sender,
            &c,
            [1; 32],
            [2; 16],
            &sample_frames(),
            Some(pairing),
            Some(postmark),
        );
        let v = verify_bundle_with(&bytes[..], keys(None, &c)).unwrap();
        assert_eq!(v.pairing(), Some(pairing));
        assert_eq!(v.postmark(), Some(postmark));
        assert_eq!(peek_header(&bytes[..]).unwrap().postmark, Some(postmark));
        // The postmark is signed: its `upto` changed (the last bytes of
        // the header body) fails the bundle.
        let end = layout(&bytes).header_end;
        let mut bad = bytes.clone();
        bad[end - 1] ^= 1;
        assert!(import_with(&bad, keys(None, &c)).is_err());
    }

    #[test]
    fn sealing_to_a_key_that_is_not_a_node_or_of_low_order_fails() {
        // The identity point: its Montgomery form is 0, every product too.
        let mut identity_point = [0u8; 32];
        identity_point[0] = 1;
        let err = BundleWriter::sealed(
            Vec::new(),
            &ident(1),
            SealTo {
                recipient: NodeId(identity_point),
                ephemeral: [5; 32],
            },
            clock(ident(1).node_id(), 1),
            vec![],
            [0; 16],
            None,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("cannot seal"), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the facts, frames, keys and randomness: a sealed bundle
        /// reads back exactly on its recipient, on no other identity, and
        /// not at all once any byte of it changed.
        #[test]
        fn the_seal_codec_round_trips_and_admits_only_the_recipient(
            sender in 1u8..=8,
            recipient in 9u8..=16,
            other in 17u8..=24,
            ephemeral in any::<[u8; 32]>(),
            seed in any::<[u8; 16]>(),
            shape in prop::collection::vec(1usize..5, 0..4),
            postmark in prop::option::of((any::<[u8; 16]>(), 0i64..1000, 0i64..1000)),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let (s, c, b) = (ident(sender), ident(recipient), ident(other));
            let mut k = 0;
            let frames: Vec<Vec<Vec<u8>>> = shape
                .iter()
                .map(|n| (0..*n).map(|_| { k += 1; team_fact(&s, k) }).collect())
                .collect();
            let postmark = postmark.map(|(epoch, since, n)| Postmark {
                epoch,
                since,
                upto: since + n,
                have: None,
            });
            let bytes = sealed_with(&s, &c, ephemeral, seed, &frames, None, postmark);
            prop_assert_eq!(import_with(&bytes, keys(None, &c)).unwrap(), frames);
            let v = verify_bundle_with(&bytes[..], keys(None, &c)).unwrap();
            prop_assert_eq!(v.postmark(), postmark);
            prop_assert!(matches!(
                verify_bundle_with(&bytes[..], keys(Some(&key()), &b)),
                Err(BundleError::SealedTo(_))
            ));
            let mut bad = bytes.clone();
            let i = flip.index(bad.len());
            bad[i] ^= 1 << bit;
            prop_assert!(import_with(&bad, keys(None, &c)).is_err(), "byte {}", i);
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
