//! The vector index's file (`<home>/vectors/index.amv`) as bytes: decoding
//! must refuse or accept without panicking; an accepted snapshot must load
//! into a table that searches, round-trips to the same bytes, and never
//! answers with a vector outside the allowed terms.
#![no_main]

use std::collections::HashSet;

use amos_node::index::vectors::{quantize, snapshot, table::VectorTable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = snapshot::decode_header(data);
    let Ok((provenance, parts)) = snapshot::decode(data) else {
        return;
    };
    // What it encodes to reads back the same (the bitmaps' own encoding
    // may differ from the bytes given).
    let again = snapshot::encode(&provenance, &parts);
    assert_eq!(snapshot::decode(&again).as_ref(), Ok(&(provenance, parts.clone())));
    let shown: HashSet<_> = parts
        .access
        .get("team:x")
        .map(|b| b.iter().map(|s| parts.ids[s as usize]).collect())
        .unwrap_or_default();
    let dim = parts.dim;
    let table = VectorTable::from_parts(parts);
    let v: Vec<f32> = (0..dim).map(|i| (i % 7) as f32 - 3.0).collect();
    let Some(q) = quantize::query(&v) else { return };
    let terms = ["team:x".to_string()];
    for (id, _) in table.nearest(&q, Some(&terms), 10) {
        assert!(shown.contains(&id), "a vector outside the allowed terms");
    }
    let _ = table.nearest(&q, None, 300);
});
