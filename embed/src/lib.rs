//! amos's text embeddings, two kinds. The static model: a model2vec-format
//! model — a table of token vectors (`model.safetensors`, tensor
//! `embeddings`), its WordPiece `tokenizer.json` and a small `config.json` —
//! turning a text into one L2-normalised vector: the mean of its tokens' rows.
//! The sentence encoder ([`Encoder`], module `encoder`): the transformer the
//! static model was distilled from, all-MiniLM-L6-v2, int8, run in process —
//! slower (milliseconds, not microseconds) and much better at paraphrases.
//!
//! Owns: both built-in models, compiled into the binary and parsed once on
//! first use (`StaticModel::default_model`, `Encoder::builtin`); loading any
//! other directory a user names (`StaticModel::from_dir`, `AMOS_MODEL`;
//! `Encoder::from_dir`), checked before use so a bad file is a one-line
//! error, never a panic; `embed` and `cosine`.
//! Never: network access (nothing is downloaded, ever), storage, ranking or
//! visibility — callers embed only what a requester may already see.
#![warn(missing_docs)]

mod encoder;
mod safetensors;
mod tokenizer;
mod vocab;
mod vocab_layout;

use std::borrow::Cow;
use std::path::Path;
use std::sync::OnceLock;

pub use encoder::{ENCODER_ENV, Encoder, WINDOW, WINDOW_OVERLAP};
use safetensors::{Dtype, Tensor, bf16_to_f32, f16_to_f32};
pub use tokenizer::WordPiece;

/// The environment variable naming a model directory to use instead of the
/// built-in one.
pub const MODEL_ENV: &str = "AMOS_MODEL";

/// At most this many tokens of a text are embedded (model2vec's default).
pub const MAX_TOKENS: usize = 512;

/// The built-in model: all-MiniLM-L6-v2 distilled to 384 int8 dimensions
/// (`models/minilm-l6-static`, made by `models/distill.py`).
mod builtin {
    pub const NAME: &str = "minilm-l6-static";
    pub const TENSORS: &[u8] = include_bytes!("../../models/minilm-l6-static/model.safetensors");
    /// tokenizer.json without its vocabulary, and the vocabulary laid out
    /// as its own lookup table (build.rs, `vocab::BuiltinVocab`): 160 KB
    /// less in the binary than the JSON map, and nothing to parse.
    pub const TOKENIZER: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/tokenizer-settings.json"));
    pub const VOCAB_TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/vocab-table.bin"));
    pub const CONFIG: &[u8] = include_bytes!("../../models/minilm-l6-static/config.json");
    /// The checksums of the built-in files: they name this model's version.
    pub const SUMS: &str = include_str!("../../models/minilm-l6-static/SHA256SUMS");
}

/// Why a model could not be loaded. Each renders as one line.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file of the model directory is missing or unreadable.
    #[error("model {dir}: {file}: {why}")]
    File {
        /// The model directory.
        dir: String,
        /// The file in it.
        file: &'static str,
        /// Why it could not be read.
        why: String,
    },
    /// `tokenizer.json` is not a WordPiece tokenizer this crate reads.
    #[error("tokenizer.json: {0}")]
    Tokenizer(String),
    /// `model.safetensors` is malformed or holds no usable `embeddings` table.
    #[error("model.safetensors: {0}")]
    Tensors(String),
    /// `config.json` is malformed or names an unusable value.
    #[error("config.json: {0}")]
    Config(String),
}

impl ModelError {
    fn in_dir(self, dir: &Path) -> Self {
        let (file, why) = match self {
            ModelError::Tokenizer(w) => ("tokenizer.json", w),
            ModelError::Tensors(w) => ("model.safetensors", w),
            ModelError::Config(w) => ("config.json", w),
            other => return other,
        };
        ModelError::File {
            dir: dir.display().to_string(),
            file,
            why,
        }
    }
}

/// A loaded static embedding model.
#[derive(Clone, Debug)]
pub struct StaticModel {
    name: String,
    /// What identifies this model's vectors (see [`StaticModel::fingerprint`]).
    fingerprint: String,
    tokenizer: WordPiece,
    /// The safetensors file, borrowed from the binary or owned when read.
    bytes: Cow<'static, [u8]>,
    table: Tensor,
    rows: usize,
    dim: usize,
    /// Optional per-token weights (model2vec's `weights` tensor).
    weights: Option<Vec<f32>>,
    /// Optional token id → table row (model2vec's `mapping` tensor).
    mapping: Option<Vec<u32>>,
    normalize: bool,
    /// The cosine under which the model's author holds two texts unrelated
    /// (`min_similarity` in `config.json`, amos's own key), if it names one.
    min_similarity: Option<f32>,
}

#[derive(serde::Deserialize)]
struct Config {
    #[serde(default = "yes")]
    normalize: bool,
    #[serde(default)]
    min_similarity: Option<f32>,
}

fn yes() -> bool {
    true
}

impl StaticModel {
    /// The built-in model, parsed on first use and shared after.
    pub fn default_model() -> &'static StaticModel {
        static MODEL: OnceLock<StaticModel> = OnceLock::new();
        MODEL.get_or_init(|| {
            // The built-in files are this crate's own, checked by its tests:
            // failing here is a build defect, not bad input.
            let vocab = vocab::BuiltinVocab::new(builtin::VOCAB_TABLE)
                .expect("the built-in vocabulary's table holds its shape");
            let tokenizer = WordPiece::from_json_with_vocab(builtin::TOKENIZER, Some(vocab))
                .expect("the built-in tokenizer is valid");
            // The built-in files are named by their checksums: no need to
            // hash 12 MB on every start.
            let sums = blake3::hash(builtin::SUMS.as_bytes()).to_hex();
            StaticModel::with_tokenizer(
                builtin::NAME,
                Cow::Borrowed(builtin::TENSORS),
                tokenizer,
                Some(builtin::CONFIG),
                Some(format!("builtin:{}:{}", builtin::NAME, &sums[..16])),
            )
            .expect("the built-in embedding model is valid")
        })
    }

    /// The model `AMOS_MODEL` names, else the built-in one.
    pub fn from_env() -> Result<Cow<'static, StaticModel>, ModelError> {
        match std::env::var_os(MODEL_ENV) {
            Some(dir) if !dir.is_empty() => Ok(Cow::Owned(Self::from_dir(Path::new(&dir))?)),
            _ => Ok(Cow::Borrowed(Self::default_model())),
        }
    }

    /// Loads a model2vec directory: `model.safetensors`, `tokenizer.json` and,
    /// optionally, `config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let read = |file: &'static str| {
            std::fs::read(dir.join(file)).map_err(|e| ModelError::File {
                dir: dir.display().to_string(),
                file,
                why: e.to_string(),
            })
        };
        let tensors = read("model.safetensors")?;
        let tokenizer = read("tokenizer.json")?;
        let config = match std::fs::read(dir.join("config.json")) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(ModelError::File {
                    dir: dir.display().to_string(),
                    file: "config.json",
                    why: e.to_string(),
                });
            }
        };
        let name = dir.display().to_string();
        Self::from_parts(&name, Cow::Owned(tensors), &tokenizer, config.as_deref())
            .map_err(|e| e.in_dir(dir))
    }

    /// Builds a model from the three files' bytes, checking every part.
    pub fn from_parts(
        name: &str,
        tensors: Cow<'static, [u8]>,
        tokenizer: &[u8],
        config: Option<&[u8]>,
    ) -> Result<Self, ModelError> {
        let tokenizer = WordPiece::from_json(tokenizer)?;
        Self::with_tokenizer(name, tensors, tokenizer, config, None)
    }

    /// `fingerprint`: known (the built-in model), else a hash of the table.
    fn with_tokenizer(
        name: &str,
        tensors: Cow<'static, [u8]>,
        tokenizer: WordPiece,
        config: Option<&[u8]>,
        fingerprint: Option<String>,
    ) -> Result<Self, ModelError> {
        let (normalize, min_similarity) = match config {
            None => (true, None),
            Some(bytes) => {
                let c = serde_json::from_slice::<Config>(bytes)
                    .map_err(|e| ModelError::Config(format!("not a model config ({e})")))?;
                (c.normalize, c.min_similarity)
            }
        };
        if min_similarity.is_some_and(|m| !(-1.0..1.0).contains(&m)) {
            return Err(ModelError::Config(
                "min_similarity must be a cosine in [-1, 1)".into(),
            ));
        }
        let mut toc = safetensors::parse(&tensors)?;
        let table = toc
            .remove("embeddings")
            .or_else(|| toc.remove("0"))
            .ok_or_else(|| ModelError::Tensors("no `embeddings` tensor".into()))?;
        let [rows, dim] = table.shape[..] else {
            return Err(ModelError::Tensors(format!(
                "`embeddings` has shape {:?}, not [tokens, dims]",
                table.shape
            )));
        };
        if rows == 0
            || dim == 0
            || !matches!(
                table.dtype,
                Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::I8
            )
        {
            return Err(ModelError::Tensors(format!(
                "`embeddings` is an empty or {:?} table",
                table.dtype
            )));
        }
        let vocab_rows = tokenizer.max_id().map_or(0, |m| m as usize + 1);
        let mapping = match toc.remove("mapping") {
            None => None,
            Some(t) => {
                let map = int_vector(&tensors, &t, "mapping")?;
                if map.iter().any(|&r| r as usize >= rows) {
                    return Err(ModelError::Tensors(
                        "`mapping` points past the table".into(),
                    ));
                }
                Some(map)
            }
        };
        let covered = mapping.as_ref().map_or(rows, Vec::len);
        if covered < vocab_rows {
            return Err(ModelError::Tensors(format!(
                "{covered} rows for a vocabulary of {vocab_rows} tokens"
            )));
        }
        let weights = match toc.remove("weights") {
            None => None,
            Some(t) => {
                let w = float_vector(&tensors, &t)?;
                if w.len() < vocab_rows {
                    return Err(ModelError::Tensors(format!(
                        "{} weights for {vocab_rows} tokens",
                        w.len()
                    )));
                }
                Some(w)
            }
        };
        let fingerprint = fingerprint.unwrap_or_else(|| {
            let mut h = blake3::Hasher::new();
            h.update(&tensors);
            h.update(&tokenizer.max_id().unwrap_or(0).to_le_bytes());
            h.update(&[u8::from(normalize)]);
            format!("blake3:{}", &h.finalize().to_hex()[..32])
        });
        Ok(StaticModel {
            name: name.to_string(),
            fingerprint,
            tokenizer,
            bytes: tensors,
            table,
            rows,
            dim,
            weights,
            mapping,
            normalize,
            min_similarity,
        })
    }

    /// The cosine floor the model's `config.json` names (`min_similarity`):
    /// below it, its author holds two texts unrelated. `None` when it names
    /// none; the caller then has its own default.
    pub fn min_similarity(&self) -> Option<f32> {
        self.min_similarity
    }

    /// Where the model came from: the built-in name or the directory.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What identifies the vectors this model makes: the built-in model's
    /// checksums, or a hash of a loaded model's table and vocabulary. A
    /// derived vector index built under another fingerprint is rebuilt.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Dimensions of a vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rows of the token table.
    pub fn vocab_size(&self) -> usize {
        self.rows
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// The ids `embed` averages: the text's tokens without `[UNK]`, at most
    /// [`MAX_TOKENS`].
    pub fn token_ids(&self, text: &str) -> Vec<u32> {
        let unk = self.tokenizer.unk_id();
        let mut ids = self.tokenizer.encode(text);
        ids.retain(|&id| Some(id) != unk);
        ids.truncate(MAX_TOKENS);
        ids
    }

    /// The text's vector: the mean of its tokens' rows (weighted when the
    /// model has weights), L2-normalised unless the model says otherwise. A
    /// text with no known token is the zero vector.
    pub fn embed(&self, text: &str) -> Vec<f32> {
        let mut sum = vec![0.0f32; self.dim];
        let ids = self.token_ids(text);
        for &id in &ids {
            self.add_row(id, &mut sum);
        }
        if !ids.is_empty() {
            let n = ids.len() as f32;
            sum.iter_mut().for_each(|x| *x /= n);
        }
        if self.normalize {
            let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 1e-12 {
                sum.iter_mut().for_each(|x| *x /= norm);
            }
        }
        sum
    }

    /// Adds token `id`'s row (times its weight) to `acc`.
    fn add_row(&self, id: u32, acc: &mut [f32]) {
        let id = id as usize;
        let row = match &self.mapping {
            Some(map) => map[id] as usize,
            None => id,
        };
        let w = self.weights.as_ref().map_or(1.0, |w| w[id]);
        let size = self.table.dtype.size();
        let start = self.table.start + row * self.dim * size;
        let bytes = &self.bytes[start..start + self.dim * size];
        match self.table.dtype {
            Dtype::F16 => {
                for (a, b) in acc.iter_mut().zip(bytes.chunks_exact(2)) {
                    *a += w * f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            Dtype::BF16 => {
                for (a, b) in acc.iter_mut().zip(bytes.chunks_exact(2)) {
                    *a += w * bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            Dtype::F32 => {
                for (a, b) in acc.iter_mut().zip(bytes.chunks_exact(4)) {
                    *a += w * f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Dtype::I8 => {
                for (a, &b) in acc.iter_mut().zip(bytes) {
                    *a += w * f32::from(b as i8);
                }
            }
            Dtype::I32 | Dtype::I64 => unreachable!("checked in from_parts"),
        }
    }
}

/// Cosine of two vectors (the dot product over the norms; 0 for a zero vector).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// A one-dimensional integer tensor as row numbers.
fn int_vector(bytes: &[u8], t: &Tensor, name: &str) -> Result<Vec<u32>, ModelError> {
    let data = &bytes[t.start..t.end];
    let values: Vec<i64> = match t.dtype {
        Dtype::I32 => data
            .chunks_exact(4)
            .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        Dtype::I64 => data
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect(),
        other => {
            return Err(ModelError::Tensors(format!(
                "`{name}` is {other:?}, not integers"
            )));
        }
    };
    values
        .into_iter()
        .map(|v| u32::try_from(v).map_err(|_| ModelError::Tensors(format!("`{name}` holds {v}"))))
        .collect()
}

/// A one-dimensional float tensor.
fn float_vector(bytes: &[u8], t: &Tensor) -> Result<Vec<f32>, ModelError> {
    let data = &bytes[t.start..t.end];
    Ok(match t.dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        other => {
            return Err(ModelError::Tensors(format!(
                "`weights` is {other:?}, not floats"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::builtin;

    /// The built-in model's share of the binary (issue 15: its growth must
    /// not exceed the model's size): what `builtin` compiles in, against the
    /// model's own files. The code that reads it is measured apart
    /// (docs/bench.md, "The binary's growth").
    #[test]
    fn the_builtin_data_is_no_larger_than_the_model_files() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/minilm-l6-static");
        let files: u64 = ["model.safetensors", "tokenizer.json", "config.json"]
            .iter()
            .map(|f| std::fs::metadata(dir.join(f)).unwrap().len())
            .sum();
        let compiled = [
            builtin::TENSORS,
            builtin::TOKENIZER,
            builtin::VOCAB_TABLE,
            builtin::CONFIG,
            builtin::SUMS.as_bytes(),
        ]
        .iter()
        .map(|b| b.len() as u64)
        .sum::<u64>();
        assert!(
            compiled <= files,
            "{compiled} bytes compiled in for {files} bytes of model files"
        );
    }
}
