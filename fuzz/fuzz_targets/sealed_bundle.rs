//! Arbitrary bytes as a sealed bundle (format 7, docs/design.md §8.1): its
//! envelope — the header's sealed extension (ephemeral key, pairing proof,
//! postmark), the X25519 + HKDF key derivation, the key check, the frames
//! under the derived key — must refuse or accept without panicking, for
//! the recipient's identity and for another's. Whatever the recipient
//! accepts reads back (pass 2) with the same counts; whatever it accepts,
//! no other identity holding the same mesh key opens; `peek_header` never
//! panics either.
#![no_main]

use amos_protocol::{
    BundleError, MeshKey, NodeIdentity, OpenWith, peek_header, read_verified_with,
    verify_bundle_with,
};
use libfuzzer_sys::fuzz_target;

/// The identities the seed corpus's sealed bundles are sealed to
/// (RECIPIENT) and not (OTHER); the mesh key both hold.
const RECIPIENT: [u8; 32] = [2; 32];
const OTHER: [u8; 32] = [3; 32];
const FUZZ_KEY: [u8; 32] = [0x42; 32];

fuzz_target!(|data: &[u8]| {
    let _ = peek_header(data);
    let key = MeshKey::from_bytes(FUZZ_KEY);
    let me = NodeIdentity::from_secret(RECIPIENT);
    let other = NodeIdentity::from_secret(OTHER);
    let keys = |identity| OpenWith {
        mesh: Some(&key),
        identity: Some(identity),
    };
    let Ok(verified) = verify_bundle_with(data, keys(&me)) else {
        let _ = verify_bundle_with(data, keys(&other));
        return;
    };
    let mut facts = 0u64;
    let summary = read_verified_with(data, keys(&me), &verified, |batch| {
        facts += batch.len() as u64;
        Ok::<(), ()>(())
    })
    .expect("a verified bundle reads back");
    assert_eq!(summary, verified.summary());
    assert_eq!(summary.facts, facts);
    assert_eq!(summary.bytes, data.len() as u64);
    if verified.sealed() {
        assert!(matches!(
            verify_bundle_with(data, keys(&other)),
            Err(BundleError::SealedTo(_))
        ));
    }
});
