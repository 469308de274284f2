//! Arbitrary bytes as a sync session frame: decoding must not panic, and
//! anything that decodes must re-encode to the same bytes (canonical).
#![no_main]

use amos_protocol::wire::SyncMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = SyncMessage::decode(data) {
        assert_eq!(m.encode(), data, "decoding is canonical");
    }
});
