//! Arbitrary bytes as what one end of a relay connection reads from the
//! other (docs/design.md §7.11, relay protocol 2): a request header, an
//! answer byte, a listing of held bundles. Decoding must not panic; what
//! decodes re-encodes to the same bytes (canonical), and a listing names at
//! most `MAX_LISTING` entries, its announced length matching its bytes.
#![no_main]

use amos_node::net::relay::{
    Answer, HEADER, MAX_LISTING, Request, decode_listing, encode_listing, listing_len,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(header) = data.get(..HEADER) {
        let header: [u8; HEADER] = header.try_into().expect("HEADER bytes");
        if let Some(r) = Request::decode(&header) {
            assert_eq!(r.encode(), header, "a header decodes canonically");
        }
    }
    if let Some(&b) = data.first()
        && let Some(a) = Answer::decode(b)
    {
        assert_eq!(a.encode(), b);
        assert!(!a.describe().is_empty());
    }
    if let Some(count) = data.get(..4) {
        let count: [u8; 4] = count.try_into().expect("4 bytes");
        if let Some(n) = listing_len(count) {
            assert!(n <= MAX_LISTING * 41);
        }
    }
    if let Some(entries) = decode_listing(data) {
        assert!(entries.len() <= MAX_LISTING);
        assert_eq!(encode_listing(&entries), data, "a listing decodes canonically");
    }
});
