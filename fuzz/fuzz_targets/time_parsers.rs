//! Every parser of a time someone else wrote, and the one formatter of
//! times (issue 37): arbitrary text as a user's time (`parse_time`, at a
//! fixed and at a late `now`), expiry (`parse_expiry`), the time fields of
//! a new memory and of a recall (`front::request`, shared by CLI, MCP and
//! console) and an importer's timestamp (`api::import::parse_time`);
//! arbitrary u64s to `clock::rfc3339`. None may panic, and every time one
//! returns is at most `amos_protocol::MAX_TIME_MS` (docs/design.md §4).
#![no_main]

use amos_node::api::import;
use amos_node::api::{parse_expiry, parse_time};
use amos_node::clock::rfc3339;
use amos_node::front::{AddRequest, TimeRequest};
use amos_protocol::MAX_TIME_MS;
use libfuzzer_sys::fuzz_target;

fn bounded(ms: u64, what: &str, s: &str) {
    assert!(ms <= MAX_TIME_MS, "{what} {s:?} gave {ms}, past the bound");
}

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes, when there are, are also a time to format and a `now`.
    if let Some(head) = data.get(..8) {
        let ms = u64::from_le_bytes(head.try_into().expect("8 bytes"));
        let shown = rfc3339(ms);
        assert!(shown.len() == 24 && shown.ends_with('Z'), "{ms}: {shown}");
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // 2026-03-01, and the bound itself as `now`.
    for now in [1_772_323_200_000, MAX_TIME_MS] {
        if let Ok(ms) = parse_time(s, now) {
            bounded(ms, "parse_time", s);
        }
        if let Ok(ms) = parse_expiry(s, now) {
            bounded(ms, "parse_expiry", s);
        }
        let add = AddRequest {
            content: "x".into(),
            expires: Some(s.to_owned()),
            valid_from: Some(s.to_owned()),
            ..AddRequest::default()
        };
        if let Ok(m) = add.memory(now, str::to_owned) {
            for ms in [m.expires_ms, m.validity.from_ms, m.validity.to_ms]
                .into_iter()
                .flatten()
            {
                bounded(ms, "AddRequest", s);
            }
        }
        let q = TimeRequest {
            since: Some(s.to_owned()),
            valid_at: Some(s.to_owned()),
            ..TimeRequest::default()
        };
        if let Ok(q) = q.query(now, str::to_owned) {
            for ms in [q.since_ms, q.valid_at_ms].into_iter().flatten() {
                bounded(ms, "TimeRequest", s);
            }
        }
    }
    if let Some(ms) = import::parse_time(s) {
        bounded(ms, "import::parse_time", s);
    }
});
