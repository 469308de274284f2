//! Arbitrary bytes split into a batch of wire-encoded facts, through the one
//! fact verifier (`amos_protocol::verify`): it must never panic; per-fact
//! and whole-batch answers must agree; whatever it accepts must re-encode to
//! the very bytes given and agree with `verify_one`.
//!
//! Input: one mode byte, then items, each a u16 LE length and that many
//! bytes (a short last item takes what is left). Mode bit 0 set: the batch
//! is repeated up to past `VERIFY_PARALLEL_MIN` facts, so the threaded path runs.
#![no_main]

use amos_protocol::{VERIFY_PARALLEL_MIN, verify_all, verify_each, verify_one};
use libfuzzer_sys::fuzz_target;

fn split(data: &[u8]) -> (bool, Vec<&[u8]>) {
    let Some((&mode, mut rest)) = data.split_first() else {
        return (false, Vec::new());
    };
    let mut items = Vec::new();
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let body = &rest[2..];
        let take = len.min(body.len());
        items.push(&body[..take]);
        rest = &body[take..];
    }
    (mode & 1 == 1, items)
}

fuzz_target!(|data: &[u8]| {
    let (repeat, mut batch) = split(data);
    if repeat && !batch.is_empty() {
        let one = batch.clone();
        while batch.len() <= VERIFY_PARALLEL_MIN {
            batch.extend_from_slice(&one);
        }
    }
    let each = verify_each(&batch);
    assert_eq!(each.len(), batch.len());
    match verify_all(&batch) {
        Ok(all) => {
            assert_eq!(all.len(), batch.len());
            for ((v, bytes), e) in all.iter().zip(&batch).zip(&each) {
                assert_eq!(v.to_bytes(), *bytes, "accepted bytes re-encode the same");
                assert!(e.is_ok());
            }
        }
        Err(e) => {
            assert!(e.index < batch.len());
            assert!(each[e.index].is_err(), "the named fact is bad");
            assert!(each[..e.index].iter().all(Result::is_ok), "it is the first");
        }
    }
    // Per fact, the batch answer is the single-fact answer (distinct items
    // only: a repeated batch checks the same bytes again).
    let distinct = if repeat { 0 } else { batch.len() };
    for (bytes, e) in batch.iter().zip(&each).take(distinct) {
        assert_eq!(verify_one(bytes).is_ok(), e.is_ok());
        if let Ok(v) = e {
            assert_eq!(v.to_bytes(), *bytes);
        }
    }
});
