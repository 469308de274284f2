//! The sentence encoder against the float32 teacher: models/minilm-l6-encoder's
//! reference.json holds the numpy forward pass's vectors (models/encoder.py).

use std::path::Path;

use amos_embed::{Encoder, WINDOW, cosine};

/// The int8 engine's vectors keep at least this cosine to the float32
/// teacher's (measured: see models/README.md).
const MIN_COSINE: f32 = 0.99;
/// The largest difference allowed from the teacher's published "hello world"
/// in any of its first five dimensions. The float32 numpy pass matches to
/// 5e-6; int8 weights move the third dimension by 6.1e-3 (the same in numpy
/// over the dequantised weights: the quantisation's error, not the engine's),
/// see models/README.md.
const HELLO_BOUND: f32 = 1e-2;

fn dir() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/minilm-l6-encoder"
    ))
}

struct Reference {
    published: Vec<f32>,
    long_fact: String,
    sentences: Vec<(String, usize, Vec<Vec<f32>>)>,
}

fn reference() -> Reference {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir().join("reference.json")).unwrap()).unwrap();
    let floats = |v: &serde_json::Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    Reference {
        published: floats(&json["hello_world_published"]),
        long_fact: json["long_fact"].as_str().unwrap().to_string(),
        sentences: json["sentences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["text"].as_str().unwrap().to_string(),
                    s["pieces"].as_u64().unwrap() as usize,
                    s["vectors"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(floats)
                        .collect(),
                )
            })
            .collect(),
    }
}

#[test]
fn hello_world_reproduces_the_teachers_published_embedding() {
    let e = Encoder::builtin().unwrap();
    let v = e.embed_query("hello world");
    let r = reference();
    let err = v[..5]
        .iter()
        .zip(&r.published)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(
        err <= HELLO_BOUND,
        "{:?} vs published {:?}: max error {err}",
        &v[..5],
        r.published
    );
}

#[test]
fn every_reference_text_is_within_the_bound_of_the_float32_teacher() {
    let e = Encoder::builtin().unwrap();
    let r = reference();
    assert!(r.sentences.iter().any(|(_, pieces, _)| *pieces > WINDOW));
    for (text, pieces, want) in &r.sentences {
        let got = e.embed_chunks(text);
        assert_eq!(got.len(), want.len(), "{text:?}: {pieces} pieces");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let norm = g.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "not normalised: {norm}");
            let c = cosine(g, w);
            assert!(
                c >= MIN_COSINE,
                "{text:?} window {i}: cosine {c} to the teacher"
            );
        }
        // A query is the first window.
        assert_eq!(e.embed_query(text), got[0]);
    }
}

#[test]
fn a_fact_near_the_end_of_a_long_text_is_in_its_last_chunk() {
    let e = Encoder::builtin().unwrap();
    let r = reference();
    let (long, pieces, _) = r.sentences.iter().find(|(_, p, _)| *p > WINDOW).unwrap();
    assert!(long.ends_with(&r.long_fact));
    let chunks = e.embed_chunks(long);
    assert!(
        chunks.len() >= 2,
        "{pieces} pieces in {} chunks",
        chunks.len()
    );
    let q = e.embed_query("where is the spare key to the server room kept?");
    let first = cosine(&q, &chunks[0]);
    let last = cosine(&q, chunks.last().unwrap());
    assert!(
        last > first + 0.1,
        "last chunk {last} vs first {first}: the fact is not found near the end"
    );
}

#[test]
fn the_tokenizer_gives_the_teachers_word_pieces() {
    // BERT uncased over the encoder's own 30,522 ids (the static model's
    // vocabulary drops [unusedN] and renumbers): accents, CJK, punctuation.
    let e = Encoder::builtin().unwrap();
    let loaded = Encoder::from_dir(dir()).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir().join("reference.json")).unwrap()).unwrap();
    for s in json["sentences"].as_array().unwrap() {
        let text = s["text"].as_str().unwrap();
        let want: Vec<u32> = s["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(e.tokenizer().encode(text), want, "{text:?}");
        assert_eq!(loaded.tokenizer().encode(text), want, "{text:?}");
    }
}

#[test]
fn windows_cover_the_text_and_overlap() {
    let e = Encoder::builtin().unwrap();
    let r = reference();
    let (long, pieces, _) = r.sentences.iter().find(|(_, p, _)| *p > WINDOW).unwrap();
    let all = e.tokenizer().encode(long);
    assert_eq!(all.len(), *pieces);
    let windows = e.windows(long);
    let inner: Vec<&[u32]> = windows.iter().map(|w| &w[1..w.len() - 1]).collect();
    assert!(windows.iter().all(|w| w.len() <= WINDOW));
    assert_eq!(inner[0], &all[..WINDOW - 2]);
    assert_eq!(*inner.last().unwrap(), &all[all.len() - (WINDOW - 2)..]);
    assert_eq!(e.windows("a short text").len(), 1);
    assert_eq!(e.embed_chunks("").len(), 1);
}

#[test]
fn a_batch_gives_what_each_text_gives_alone() {
    let e = Encoder::builtin().unwrap();
    let r = reference();
    let texts: Vec<&str> = r
        .sentences
        .iter()
        .map(|(t, _, _)| t.as_str())
        .chain(std::iter::repeat_n("the payroll team fixes paychecks", 40))
        .collect();
    let batch = e.embed_batch(&texts);
    assert_eq!(batch.len(), texts.len());
    for (text, got) in texts.iter().zip(&batch) {
        let alone = e.embed_chunks(text);
        assert_eq!(got.len(), alone.len());
        for (a, b) in got.iter().zip(&alone) {
            assert!(cosine(a, b) > 0.99999, "{text:?}");
        }
    }
}

#[test]
fn a_directory_loads_as_the_builtin_does() {
    let built = Encoder::builtin().unwrap();
    let loaded = Encoder::from_dir(dir()).unwrap();
    assert_eq!(loaded.name(), built.name());
    let text = "Café déjà vu: naïve façade — ÜBER straße! 東京";
    assert_eq!(loaded.embed_query(text), built.embed_query(text));
}

#[test]
fn paraphrases_are_closer_than_unrelated_texts() {
    let e = Encoder::builtin().unwrap();
    let q = e.embed_query("who can fix a mistake in my paycheck");
    let payroll = e.embed_query("Payroll corrections are handled by the finance team");
    let logo = e.embed_query("The logo colour is a dark shade of green");
    assert!(cosine(&q, &payroll) > cosine(&q, &logo) + 0.2);
}

#[test]
fn a_bad_directory_is_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let one_line = |what: &str| {
        let err = Encoder::from_dir(d).expect_err(what).to_string();
        assert!(!err.contains('\n') && !err.is_empty(), "{what}: {err}");
        err
    };
    one_line("empty dir");
    for f in ["model.safetensors", "tokenizer.json", "config.json"] {
        std::fs::copy(dir().join(f), d.join(f)).unwrap();
    }
    Encoder::from_dir(d).unwrap();
    let model = std::fs::read(dir().join("model.safetensors")).unwrap();
    std::fs::write(d.join("model.safetensors"), &model[..model.len() / 2]).unwrap();
    assert!(one_line("truncated tensors").contains("model.safetensors"));
    std::fs::write(d.join("model.safetensors"), b"garbage").unwrap();
    one_line("garbage tensors");
    std::fs::write(d.join("model.safetensors"), &model).unwrap();
    let config = std::fs::read_to_string(dir().join("config.json")).unwrap();
    std::fs::write(d.join("config.json"), config.replace("384", "380")).unwrap();
    assert!(one_line("wrong shape").contains("config.json"));
    std::fs::write(d.join("config.json"), "{").unwrap();
    one_line("bad config");
    let mut huge: serde_json::Value = serde_json::from_str(&config).unwrap();
    for key in [
        "num_hidden_layers",
        "max_position_embeddings",
        "intermediate_size",
        "window",
    ] {
        let mut c = huge.clone();
        c[key] = serde_json::json!(usize::MAX / 2);
        std::fs::write(d.join("config.json"), c.to_string()).unwrap();
        one_line(key);
    }
    huge["num_attention_heads"] = serde_json::json!(0);
    std::fs::write(d.join("config.json"), huge.to_string()).unwrap();
    one_line("no heads");
    std::fs::write(d.join("config.json"), &config).unwrap();
    std::fs::write(d.join("tokenizer.json"), b"{\"model\":{\"type\":\"BPE\"}}").unwrap();
    assert!(one_line("bad tokenizer").contains("tokenizer.json"));
}

#[test]
fn the_builtin_encoder_needs_no_file() {
    // Compiled in: it loads with the working directory somewhere empty and
    // AMOS_ENCODER (the node's business) ignored.
    let tmp = tempfile::tempdir().unwrap();
    std::env::set_current_dir(tmp.path()).unwrap();
    let e = Encoder::builtin().unwrap();
    assert_eq!(e.embed_query("hello world").len(), 384);
}
