//! Arbitrary bytes as a bundle file: `verify_bundle` must refuse or accept
//! without panicking, with and without a mesh key, and whatever it accepts
//! must read back (pass 2) with the same counts.
#![no_main]

use amos_protocol::{MeshKey, read_verified, verify_bundle};
use libfuzzer_sys::fuzz_target;

/// The key the seed corpus's encrypted bundles use (see examples/seed_corpus.rs).
const FUZZ_KEY: [u8; 32] = [0x42; 32];

fn check(data: &[u8], key: Option<&MeshKey>) {
    let Ok(verified) = verify_bundle(data, key) else {
        return;
    };
    let mut facts = 0u64;
    let summary = read_verified(data, key, &verified, |batch| {
        facts += batch.len() as u64;
        Ok::<(), ()>(())
    })
    .expect("a verified bundle reads back");
    assert_eq!(summary, verified.summary());
    assert_eq!(summary.facts, facts);
    assert_eq!(summary.bytes, data.len() as u64);
}

fuzz_target!(|data: &[u8]| {
    check(data, None);
    check(data, Some(&MeshKey::from_bytes(FUZZ_KEY)));
});
