//! Splits the built-in model's tokenizer.json into its settings and its
//! vocabulary, the latter laid out as its own lookup table (tokens bucketed
//! by hash, `src/vocab_layout.rs`) for `include_bytes!`: smaller than the
//! JSON map and read in place, so no process builds one. The files in
//! models/minilm-l6-static stay model2vec's format.

use std::fs;
use std::path::PathBuf;

#[allow(dead_code)]
#[path = "src/vocab_layout.rs"]
mod vocab_layout;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let path = manifest.join("../models/minilm-l6-static/tokenizer.json");
    println!("cargo::rerun-if-changed={}", path.display());
    println!("cargo::rerun-if-changed=src/vocab_layout.rs");
    let bytes = fs::read(&path).expect("models/minilm-l6-static/tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&bytes).expect("tokenizer.json is JSON");
    let model = json["model"].as_object_mut().expect("a model object");
    let vocab = model.remove("vocab").expect("a vocabulary");
    let vocab = vocab.as_object().expect("a WordPiece vocabulary map");
    let mut tokens: Vec<Option<&str>> = vec![None; vocab.len()];
    for (token, id) in vocab {
        let id = id.as_u64().expect("an integer id") as usize;
        let slot = tokens.get_mut(id).expect("ids are 0..n");
        assert!(slot.replace(token).is_none(), "id {id} twice");
    }
    let list: Vec<&str> = tokens
        .into_iter()
        .map(|t| t.expect("ids are 0..n"))
        .collect();
    let table = vocab_layout::layout(&list, vocab_layout::buckets_for(list.len()));
    fs::write(out.join("vocab-table.bin"), table).expect("write vocab-table.bin");
    fs::write(out.join("tokenizer-settings.json"), json.to_string()).expect("write settings");
}
