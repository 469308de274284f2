//! A user's model directory (`AMOS_MODEL` / `--model DIR`) as bytes: loading
//! must refuse or accept without panicking, and an accepted model must embed
//! any text into a vector of its dimension.
//!
//! The first byte picks what the rest is (seeds: `model_loader` in
//! examples/seed_corpus.rs): 0 = model.safetensors beside a small valid
//! tokenizer; 1 = tokenizer.json beside a small valid table; 2 = config.json;
//! 3 = a text for the small model; 4 = u16-LE-length-prefixed tensors, then
//! the tokenizer, then the config.
#![no_main]

use std::borrow::Cow;

use amos_embed::StaticModel;
use libfuzzer_sys::fuzz_target;

const TOKENIZER: &str = r###"{"normalizer":{"type":"BertNormalizer","lowercase":true},"pre_tokenizer":{"type":"BertPreTokenizer"},"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0,"red":1,"##dish":2,"blue":3}}}"###;

/// A valid safetensors file: 4 tokens × 2 dims of F32.
fn table() -> Vec<u8> {
    let header = r#"{"embeddings":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for x in [0.0f32, 0.0, 1.0, 0.0, 0.5, 0.5, 0.0, 1.0] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn exercise(model: &StaticModel, text: &str) {
    for t in [text, "Red, reddish BLUE!", "", "ünknown 中文"] {
        assert_eq!(model.embed(t).len(), model.dim());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let loaded = match mode % 5 {
        0 => StaticModel::from_parts(
            "fuzz",
            Cow::Owned(rest.to_vec()),
            TOKENIZER.as_bytes(),
            None,
        ),
        1 => StaticModel::from_parts("fuzz", Cow::Owned(table()), rest, None),
        2 => StaticModel::from_parts(
            "fuzz",
            Cow::Owned(table()),
            TOKENIZER.as_bytes(),
            Some(rest),
        ),
        3 => {
            let model =
                StaticModel::from_parts("fuzz", Cow::Owned(table()), TOKENIZER.as_bytes(), None)
                    .expect("the fixed model is valid");
            exercise(&model, &String::from_utf8_lossy(rest));
            return;
        }
        _ => {
            let mut parts = Vec::new();
            let mut at = rest;
            for _ in 0..2 {
                let Some((len, tail)) = at.split_first_chunk::<2>() else {
                    return;
                };
                let len = usize::from(u16::from_le_bytes(*len)).min(tail.len());
                parts.push(&tail[..len]);
                at = &tail[len..];
            }
            StaticModel::from_parts("fuzz", Cow::Owned(parts[0].to_vec()), parts[1], Some(at))
        }
    };
    if let Ok(model) = loaded {
        exercise(&model, "red blue reddish");
    }
});
