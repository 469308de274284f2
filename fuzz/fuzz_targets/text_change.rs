//! Arbitrary bytes as the text change an edit fact carries, and as the saved
//! document a compaction carries (`amos_sync::text`): checking, applying to
//! a document and loading must return an error, never panic past the
//! boundary. automerge itself can panic on a change that decodes but does not
//! fit the document; `TextDoc::apply` catches that (and `TextDoc::build`
//! leaves such a change out), so the target restores
//! the default panic hook (libFuzzer's aborts even on a caught panic) and
//! any panic that still escapes is a crash.
#![no_main]

use std::sync::Once;

use amos_protocol::{MemoryId, MemoryText};
use amos_sync::text::{self, TextDoc};
use libfuzzer_sys::fuzz_target;

static HOOK: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    HOOK.call_once(|| {
        let _ = std::panic::take_hook();
    });
    let id = MemoryId([7; 16]);
    let edit = MemoryText::Edit(data.to_vec());
    if text::check(&edit).is_ok() {
        let base = "alpha beta gamma\n";
        let mut doc = TextDoc::build(id, Some(base), None, []).expect("seed");
        if doc.apply(data).is_err() {
            // The document is rebuilt without the change that does not fit.
            let again = TextDoc::build(id, Some(base), None, [data]).expect("rebuilt");
            assert_eq!(again.text(), base, "a change that does not fit is left out");
        }
    }
    if let Ok(mut doc) = TextDoc::load(id, data) {
        let _ = doc.text();
        let _ = doc.change_ids();
    }
});
