//! Arbitrary bytes as a sync session frame: decoding must not panic,
//! anything that decodes must re-encode to the same bytes (canonical) and
//! keep its bounds (a hello's listen addresses parse, at most eight).
#![no_main]

use amos_protocol::wire::{MAX_LISTEN, SyncMessage, SyncV1, parse_listen};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = SyncMessage::decode(data) {
        assert_eq!(m.encode(), data, "decoding is canonical");
        let SyncMessage::V1(v1) = &m;
        if let SyncV1::Hello { listen, .. } = v1 {
            assert!(listen.len() <= MAX_LISTEN);
            assert!(listen.iter().all(|a| parse_listen(a).is_ok()));
        }
    }
});
