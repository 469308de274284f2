//! Arbitrary text as a pairing code: decoding must not panic, and anything
//! that decodes must encode back to a code that decodes to the same value.
#![no_main]

use amos_protocol::pairing::PairingCode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for candidate in [text.to_owned(), format!("amos1-{text}")] {
        if let Ok(code) = PairingCode::decode(&candidate) {
            assert_eq!(PairingCode::decode(&code.encode()).ok(), Some(code));
        }
    }
});
