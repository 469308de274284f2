//! Arbitrary bytes as a wire-encoded signed fact: decoding must not panic,
//! anything that decodes must be canonical (re-encode to the same bytes), and
//! anything that verifies must also decode.
#![no_main]

use amos_protocol::{SignedFact, codec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = codec::decode_signed(data);
    if let Ok(fact) = &decoded {
        assert_eq!(fact.to_bytes(), data, "decoding is canonical");
        let _ = fact.fact.validate();
    }
    if let Ok(verified) = SignedFact::decode_verified(data) {
        assert!(decoded.is_ok());
        assert_eq!(verified.to_bytes(), data);
    }
});
