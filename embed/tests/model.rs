//! The built-in model and the loader of a user's model directory.

use std::borrow::Cow;
use std::path::Path;

use amos_embed::{MAX_TOKENS, StaticModel, cosine};

fn builtin_dir() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/minilm-l6-static"
    ))
}

/// FNV-1a over the vector's bits: any change to tokenizer, table or pooling moves it.
fn checksum(v: &[f32]) -> u64 {
    v.iter()
        .flat_map(|x| x.to_bits().to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

#[test]
fn the_builtin_model_loads_without_network_and_embeds_deterministically() {
    let m = StaticModel::default_model();
    assert_eq!((m.vocab_size(), m.dim()), (29_528, 384));
    let v = m.embed("Secrets live in Vault; never put credentials in environment files");
    assert_eq!(v.len(), 384);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    assert_eq!(
        v,
        m.embed("Secrets live in Vault; never put credentials in environment files")
    );
    assert_eq!(checksum(&v), 17_866_412_788_687_634_613, "vector checksum");
}

/// Token ids and leading components as models/distill.py computes them with
/// its own (Python) tokenizer and pooling (`static_embed`) over the same files.
#[test]
fn embeddings_match_the_distiller() {
    let m = StaticModel::default_model();
    let cases: [(&str, &[u32], [f32; 4]); 3] = [
        (
            "hello world",
            &[6598, 1094],
            [-0.024212, 0.05129, 0.041839, -0.002446],
        ),
        (
            "Secrets live in Vault; never put credentials in environment files",
            &[
                6806, 1450, 1005, 10638, 31, 1202, 1410, 21502, 1005, 3050, 5770,
            ],
            [-0.021027, 0.031751, -0.070595, -0.039938],
        ),
        (
            "Héllo, WÖRLD! unaffable qzxqzxq",
            &[
                6598, 16, 1094, 5, 13483, 19967, 2474, 59, 1486, 1601, 3166, 1486, 1601, 3166,
            ],
            [-0.021274, -0.005666, -0.021676, 0.039477],
        ),
    ];
    for (text, ids, head) in cases {
        assert_eq!(m.token_ids(text), ids, "{text}");
        let v = m.embed(text);
        for (got, want) in v.iter().zip(head) {
            assert!(
                (got - want).abs() < 1e-5,
                "{text}: {:?} vs {head:?}",
                &v[..4]
            );
        }
    }
}

#[test]
fn a_question_is_nearer_its_answer_than_an_unrelated_memory() {
    let m = StaticModel::default_model();
    let cases = [
        (
            "where are passwords and keys stored",
            "Secrets live in Vault; never put credentials in environment files",
            "The frontend uses React with server-side rendering",
        ),
        (
            "how do we undo a bad release",
            "Rollback: redeploy the previous image tag with the deploy script",
            "Lunch is ordered every Friday from the Thai place",
        ),
        (
            "which database do we use",
            "We store everything in PostgreSQL 15 on a managed cluster",
            "The office plants are watered on Mondays",
        ),
        (
            "who should I ask about billing problems",
            "Invoices and payment failures are handled by the finance team, contact Maria",
            "Unit tests run in parallel on the CI runners",
        ),
        (
            "how are services monitored",
            "Prometheus scrapes metrics and Grafana dashboards alert the on-call engineer",
            "The logo colour is a dark shade of green",
        ),
        (
            "what is the coding style for python",
            "Format Python with black and lint with ruff before every commit",
            "Customer support answers tickets within one business day",
        ),
    ];
    for (query, answer, unrelated) in cases {
        let q = m.embed(query);
        let near = cosine(&q, &m.embed(answer));
        let far = cosine(&q, &m.embed(unrelated));
        assert!(near > far, "{query:?}: answer {near} <= unrelated {far}");
    }
}

#[test]
fn a_text_without_known_tokens_is_the_zero_vector() {
    let m = StaticModel::default_model();
    assert!(m.embed("").iter().all(|&x| x == 0.0));
    assert!(m.embed("   \u{0} \t").iter().all(|&x| x == 0.0));
    assert_eq!(cosine(&m.embed(""), &m.embed("hello")), 0.0);
    let long = "word ".repeat(2 * MAX_TOKENS);
    assert_eq!(m.token_ids(&long).len(), MAX_TOKENS);
}

#[test]
fn a_model_directory_loads_like_the_builtin() {
    let m = StaticModel::from_dir(builtin_dir()).unwrap();
    let builtin = StaticModel::default_model();
    // The binary carries the vocabulary as a list (build.rs): same tokenizer.
    for text in [
        "how do we undo a bad release",
        "Héllo, WÖRLD! unaffable qzxqzxq 中文 ##x [UNK] [CLS]",
        "naïve café — «quotes» and emoji 🙂",
    ] {
        assert_eq!(
            m.tokenizer().encode(text),
            builtin.tokenizer().encode(text),
            "{text}"
        );
        assert_eq!(m.embed(text), builtin.embed(text), "{text}");
    }
    assert_eq!(m.tokenizer().max_id(), builtin.tokenizer().max_id());
    assert_eq!(m.tokenizer().unk_id(), builtin.tokenizer().unk_id());
    assert_eq!(m.name(), builtin_dir().display().to_string());
    // Fingerprints name the vectors a model makes: the built-in one by its
    // checksums (no 12 MB hash per start), a directory by a hash of its
    // table, stable across loads.
    assert!(
        builtin
            .fingerprint()
            .starts_with("builtin:minilm-l6-static:")
    );
    assert!(m.fingerprint().starts_with("blake3:"));
    let again = StaticModel::from_dir(builtin_dir()).unwrap();
    assert_eq!(again.fingerprint(), m.fingerprint());
}

/// The built-in vocabulary is a table laid out at build time: every token of
/// the model's tokenizer.json finds its own id there, and nothing else is
/// found (a table hashed otherwise than it is probed would lose tokens).
#[test]
fn every_builtin_token_finds_its_id_and_no_other_text_does() {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(builtin_dir().join("tokenizer.json")).unwrap())
            .unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let t = StaticModel::default_model().tokenizer();
    assert!(vocab.len() > 25_000);
    for (token, id) in vocab {
        assert_eq!(t.id(token), Some(id.as_u64().unwrap() as u32), "{token:?}");
    }
    for absent in ["", "qzxqzxq", "##qzxq", "hello ", "the\n", "[unk]"] {
        assert!(!vocab.contains_key(absent));
        assert_eq!(t.id(absent), None, "{absent:?}");
    }
}

fn copy_builtin(to: &Path) {
    for f in ["model.safetensors", "tokenizer.json", "config.json"] {
        std::fs::copy(builtin_dir().join(f), to.join(f)).unwrap();
    }
}

/// Refused with one line naming the directory and the file.
fn refused(dir: &Path, file: &str) -> String {
    let err = StaticModel::from_dir(dir).unwrap_err().to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.contains(&dir.display().to_string()) && err.contains(file),
        "{err}"
    );
    err
}

#[test]
fn a_malformed_model_directory_is_refused_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    refused(&dir.join("nowhere"), "model.safetensors");

    copy_builtin(dir);
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    refused(dir, "tokenizer.json");

    copy_builtin(dir);
    std::fs::write(dir.join("tokenizer.json"), b"{\"model\": 3}").unwrap();
    refused(dir, "tokenizer.json");

    copy_builtin(dir);
    std::fs::write(dir.join("config.json"), b"[1, 2").unwrap();
    refused(dir, "config.json");

    // Truncated tensors: the header promises more bytes than there are.
    copy_builtin(dir);
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    let err = refused(dir, "model.safetensors");
    assert!(err.contains("outside the file"), "{err}");

    // A table with fewer rows than the vocabulary has tokens.
    std::fs::write(
        dir.join("model.safetensors"),
        tensors(&[("embeddings", "F32", &[2, 2], &[0; 16])]),
    )
    .unwrap();
    let err = refused(dir, "model.safetensors");
    assert!(err.contains("vocabulary"), "{err}");

    // No config.json is fine: model2vec's defaults.
    copy_builtin(dir);
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert!(StaticModel::from_dir(dir).is_ok());
}

/// A safetensors file from (name, dtype, shape, bytes).
fn tensors(list: &[(&str, &str, &[usize], &[u8])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in list {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape,
                "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

fn tiny_tokenizer() -> Vec<u8> {
    serde_json::json!({
        "normalizer": {"type": "BertNormalizer", "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {"type": "WordPiece", "unk_token": "[UNK]",
            "vocab": {"[UNK]": 0, "red": 1, "blue": 2}},
    })
    .to_string()
    .into_bytes()
}

#[test]
fn int8_tables_mapping_and_weights_are_honoured() {
    // Three tokens share two rows of an int8 table; "blue" weighs double.
    let table: Vec<u8> = [0i8, 0, 10, 0, 0, 20].iter().map(|&x| x as u8).collect();
    let mapping: Vec<u8> = [0i64, 1, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    let weights: Vec<u8> = [1.0f32, 1.0, 2.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let file = tensors(&[
        ("embeddings", "I8", &[3, 2], &table),
        ("mapping", "I64", &[3], &mapping),
        ("weights", "F32", &[3], &weights),
    ]);
    let config = br#"{"normalize": false}"#;
    let m =
        StaticModel::from_parts("tiny", Cow::Owned(file), &tiny_tokenizer(), Some(config)).unwrap();
    assert_eq!(m.embed("RED"), vec![10.0, 0.0]);
    assert_eq!(m.embed("red blue"), vec![5.0, 20.0]);
    assert_eq!(m.embed("green"), vec![0.0, 0.0]);
    assert_eq!(
        m.min_similarity(),
        None,
        "a config without the key names no floor"
    );

    // A mapping that points past the table is refused.
    let bad: Vec<u8> = [0i64, 1, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
    let file = tensors(&[
        ("embeddings", "I8", &[3, 2], &table),
        ("mapping", "I64", &[3], &bad),
    ]);
    let err =
        StaticModel::from_parts("tiny", Cow::Owned(file), &tiny_tokenizer(), None).unwrap_err();
    assert!(err.to_string().contains("mapping"), "{err}");
}

#[test]
fn a_model_names_its_cosine_floor_and_an_impossible_one_is_refused() {
    let table: Vec<u8> = [0i8, 10, 20, 0, 5, 5].iter().map(|&x| x as u8).collect();
    let file = || tensors(&[("embeddings", "I8", &[3, 2], &table)]);
    let load = |config: &[u8]| {
        StaticModel::from_parts("tiny", Cow::Owned(file()), &tiny_tokenizer(), Some(config))
    };
    let m = load(br#"{"min_similarity": 0.17}"#).unwrap();
    assert_eq!(m.min_similarity(), Some(0.17));
    for bad in [
        &br#"{"min_similarity": 1.5}"#[..],
        br#"{"min_similarity": -2}"#,
    ] {
        let err = load(bad).unwrap_err().to_string();
        assert!(err.contains("min_similarity"), "{err}");
    }
    // The built-in model names its own (models/tune.py calibrates it).
    let builtin = StaticModel::default_model().min_similarity();
    assert!(
        builtin.is_some_and(|f| (0.0..0.5).contains(&f)),
        "{builtin:?}"
    );
}
