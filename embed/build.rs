//! Splits each built-in tokenizer.json (the static model's and the sentence
//! encoder's) into its settings and its vocabulary, the latter laid out as its
//! own lookup table (tokens bucketed by hash, `src/vocab_layout.rs`) for
//! `include_bytes!`: smaller than the JSON map and read in place, so no
//! process builds one. The files in models/ stay in their own formats.

use std::fs;
use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "src/vocab_layout.rs"]
mod vocab_layout;

fn split(path: &Path, out: &Path, prefix: &str) {
    println!("cargo::rerun-if-changed={}", path.display());
    let bytes = fs::read(path).expect("a built-in tokenizer.json");
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
    fs::write(out.join(format!("{prefix}vocab-table.bin")), table).expect("write vocab-table.bin");
    fs::write(
        out.join(format!("{prefix}tokenizer-settings.json")),
        json.to_string(),
    )
    .expect("write settings");
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    println!("cargo::rerun-if-changed=src/vocab_layout.rs");
    split(
        &manifest.join("../models/minilm-l6-static/tokenizer.json"),
        &out,
        "",
    );
    split(
        &manifest.join("../models/minilm-l6-encoder/tokenizer.json"),
        &out,
        "encoder-",
    );
}
