//! Arbitrary bytes as a sync session frame: decoding must not panic,
//! anything that decodes must re-encode to the same bytes (canonical) and
//! keep its bounds (a hello's listen addresses parse, at most eight; a
//! digest's scopes are policy scopes, ascending, bounded; a repair's rounds
//! and ids are bounded, its ids ascending).
#![no_main]

use amos_protocol::wire::{
    MAX_DIGEST_SCOPES, MAX_LISTEN, MAX_REPAIR_IDS, MAX_REPAIR_ROUND, SyncMessage, SyncV1,
    check_digest_scopes, parse_listen,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = SyncMessage::decode(data) {
        assert_eq!(m.encode(), data, "decoding is canonical");
        let SyncMessage::V1(v1) = &m;
        match v1 {
            SyncV1::Hello { listen, .. } | SyncV1::Hello2 { listen, .. } => {
                assert!(listen.len() <= MAX_LISTEN);
                assert!(listen.iter().all(|a| parse_listen(a).is_ok()));
            }
            SyncV1::Digest { scopes, .. } => {
                assert!(scopes.len() <= MAX_DIGEST_SCOPES);
                assert!(check_digest_scopes(scopes).is_ok());
                assert!(scopes.windows(2).all(|w| w[0] < w[1]));
            }
            SyncV1::RepairOpen { round } | SyncV1::RepairRange { round } => {
                assert!(round.len() <= MAX_REPAIR_ROUND);
            }
            SyncV1::RepairNeed { ids } => {
                assert!(ids.len() <= MAX_REPAIR_IDS);
                assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
            _ => {}
        }
    }
});
