//! The vector index's file (`<home>/vectors/index.amv`) as bytes: decoding
//! must refuse or accept without panicking; an accepted snapshot must load
//! into a table that searches, round-trips to the same bytes, and never
//! answers with a vector outside the allowed terms.
#![no_main]

use std::collections::HashSet;

use amos_node::index::vectors::{self, VectorTable};
use amos_protocol::MemoryId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vectors::decode_header(data);
    let Ok((provenance, parts)) = vectors::decode_bytes(data) else {
        return;
    };
    // The layout is canonical: what was accepted encodes to the same bytes.
    let again = vectors::encode(&provenance, &parts);
    assert_eq!(again, data, "an accepted snapshot re-encodes differently");
    let shown: HashSet<_> = parts
        .access
        .get("team:x")
        .map(|p| p.slots.iter().map(|s| MemoryId(parts.ids[*s as usize])).collect())
        .unwrap_or_default();
    let dim = parts.dim;
    let table = VectorTable::from_parts(parts);
    let v: Vec<f32> = (0..dim).map(|i| (i % 7) as f32 - 3.0).collect();
    let Some(q) = vectors::query(&v) else { return };
    let terms = ["team:x".to_string()];
    for (id, _) in table.nearest(&q, Some(&terms), &[], 10) {
        assert!(shown.contains(&id), "a vector outside the allowed terms");
    }
    let _ = table.nearest(&q, None, &[], 300);
});
