//! amos's sentence encoder: all-MiniLM-L6-v2 (6 BERT layers, 384 dims),
//! quantised by models/encoder.py into `models/minilm-l6-encoder`, run by a
//! hand-written forward pass over `matrixmultiply` (`math`).
//!
//! Owns: the built-in encoder, compiled into the binary and read in place
//! (the int8 tensors are never copied; only small float vectors such as
//! biases, LayerNorm parameters, position embeddings and row scales are);
//! loading another encoder directory, checked before use so a bad one is a
//! one-line error, never a panic; windowing a long text into chunks of at
//! most [`WINDOW`] word pieces; mean pooling and L2 normalisation exactly as
//! sentence-transformers does. Never: network access, storage, ranking or
//! visibility — callers embed only what a requester may already see.

mod math;

use std::borrow::Cow;
use std::path::Path;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::ModelError;
use crate::safetensors::{self, Dtype, Tensor, f16_to_f32};
use crate::tokenizer::WordPiece;
use crate::vocab::BuiltinVocab;

/// The environment variable naming an encoder directory to use instead of
/// the built-in one (read by the node, not here).
pub const ENCODER_ENV: &str = "AMOS_ENCODER";

/// At most this many word pieces, `[CLS]` and `[SEP]` included, are encoded
/// together: the teacher's `max_seq_length`.
pub const WINDOW: usize = 256;

/// Neighbouring windows of a long text share at least this many pieces.
pub const WINDOW_OVERLAP: usize = 32;

/// Tokens per group in [`Encoder::embed_batch`]: each group is one pass,
/// single-threaded, groups spread over rayon's threads.
const GROUP_TOKENS: usize = 512;

/// The built-in encoder's files (`models/minilm-l6-encoder`).
mod builtin {
    pub const TENSORS: &[u8] =
        include_bytes!("../../../models/minilm-l6-encoder/model.safetensors");
    /// tokenizer.json without its vocabulary, which build.rs lays out as a
    /// lookup table (as for the static model).
    pub const TOKENIZER: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/encoder-tokenizer-settings.json"));
    pub const VOCAB_TABLE: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/encoder-vocab-table.bin"));
    pub const CONFIG: &[u8] = include_bytes!("../../../models/minilm-l6-encoder/config.json");
    pub const SUMS: &str = include_str!("../../../models/minilm-l6-encoder/SHA256SUMS");
}

#[derive(serde::Deserialize)]
struct Config {
    name: Option<String>,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "eps")]
    layer_norm_eps: f32,
    #[serde(default = "window")]
    window: usize,
    #[serde(default = "mean")]
    pooling: String,
}

fn eps() -> f32 {
    1e-12
}
fn window() -> usize {
    WINDOW
}
fn mean() -> String {
    "mean".into()
}

/// How a weight matrix is stored.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// int8, one float32 scale per row.
    I8,
    F16,
    F32,
}

/// A weight matrix where it lies in the file's bytes.
#[derive(Debug)]
struct Matrix {
    kind: Kind,
    start: usize,
    rows: usize,
    cols: usize,
    /// Per-row scales (int8 only).
    scale: Vec<f32>,
}

impl Matrix {
    /// Row `r`, dequantised, into `out` (`cols` long).
    fn row(&self, bytes: &[u8], r: usize, out: &mut [f32]) {
        let c = self.cols;
        match self.kind {
            Kind::I8 => {
                let s = self.scale[r];
                math::dequantise_i8(&bytes[self.start + r * c..self.start + (r + 1) * c], s, out);
            }
            Kind::F16 => {
                let src = &bytes[self.start + r * c * 2..self.start + (r + 1) * c * 2];
                for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                    *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            Kind::F32 => {
                let src = &bytes[self.start + r * c * 4..self.start + (r + 1) * c * 4];
                for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
        }
    }
}

#[derive(Debug)]
struct Linear {
    w: Matrix,
    bias: Vec<f32>,
}

#[derive(Debug)]
struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

/// A loaded sentence encoder (BERT, mean pooling). `Send + Sync`: share one.
pub struct Encoder {
    name: String,
    tokenizer: WordPiece,
    bytes: Cow<'static, [u8]>,
    word: Matrix,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    inter: usize,
    eps: f32,
    window: usize,
    cls: u32,
    sep: u32,
}

/// Its name and shape, not its 23 MB of weights.
impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("name", &self.name)
            .field("dims", &self.hidden)
            .field("layers", &self.layers.len())
            .field("heads", &self.heads)
            .field("window", &self.window)
            .finish()
    }
}

/// The tensors of a file, taken out by name with their shapes checked.
struct Toc<'a> {
    bytes: &'a [u8],
    toc: std::collections::HashMap<String, Tensor>,
}

impl Toc<'_> {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, ModelError> {
        let t = self
            .toc
            .remove(name)
            .ok_or_else(|| ModelError::Tensors(format!("no `{name}` tensor")))?;
        if t.shape != shape {
            return Err(ModelError::Tensors(format!(
                "`{name}` has shape {:?}, not {shape:?}",
                t.shape
            )));
        }
        Ok(t)
    }

    /// A float vector (or matrix), copied: only for small tensors.
    fn floats(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let t = self.take(name, shape)?;
        let data = &self.bytes[t.start..t.end];
        match t.dtype {
            Dtype::F32 => Ok(data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()),
            Dtype::F16 => Ok(data
                .chunks_exact(2)
                .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                .collect()),
            other => Err(ModelError::Tensors(format!(
                "`{name}` is {other:?}, not floats"
            ))),
        }
    }

    /// A weight matrix, left in place: int8 with `<name>_scale`, f16 or f32.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        let t = self.take(name, &[rows, cols])?;
        let (kind, scale) = match t.dtype {
            Dtype::I8 => {
                let scale = self.floats(&format!("{name}_scale"), &[rows])?;
                if scale.iter().any(|s| !s.is_finite()) {
                    return Err(ModelError::Tensors(format!("`{name}_scale` is not finite")));
                }
                (Kind::I8, scale)
            }
            Dtype::F16 => (Kind::F16, Vec::new()),
            Dtype::F32 => (Kind::F32, Vec::new()),
            other => {
                return Err(ModelError::Tensors(format!(
                    "`{name}` is {other:?}, not int8 or floats"
                )));
            }
        };
        Ok(Matrix {
            kind,
            start: t.start,
            rows,
            cols,
            scale,
        })
    }

    fn linear(&mut self, name: &str, out: usize, inp: usize) -> Result<Linear, ModelError> {
        Ok(Linear {
            w: self.matrix(&format!("{name}.weight"), out, inp)?,
            bias: self.floats(&format!("{name}.bias"), &[out])?,
        })
    }

    fn norm(&mut self, name: &str, h: usize) -> Result<Norm, ModelError> {
        Ok(Norm {
            gamma: self.floats(&format!("{name}.weight"), &[h])?,
            beta: self.floats(&format!("{name}.bias"), &[h])?,
        })
    }
}

impl Encoder {
    /// The built-in encoder, compiled into the binary, parsed once on first
    /// use and read in place after.
    pub fn builtin() -> Result<&'static Encoder, ModelError> {
        static ENCODER: OnceLock<Result<Encoder, String>> = OnceLock::new();
        ENCODER
            .get_or_init(|| {
                let vocab = BuiltinVocab::new(builtin::VOCAB_TABLE)
                    .ok_or_else(|| "the built-in vocabulary table is malformed".to_string())?;
                let tokenizer = WordPiece::from_json_with_vocab(builtin::TOKENIZER, Some(vocab))
                    .map_err(|e| e.to_string())?;
                Encoder::with_parts(
                    Cow::Borrowed(builtin::TENSORS),
                    tokenizer,
                    builtin::CONFIG,
                    Some(builtin::SUMS.as_bytes()),
                )
                .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|why| ModelError::Tensors(format!("the built-in encoder: {why}")))
    }

    /// Loads an encoder directory of the built-in one's format:
    /// `model.safetensors`, `tokenizer.json`, `config.json` and, optionally,
    /// `SHA256SUMS` (which then names its version).
    pub fn from_dir(dir: &Path) -> Result<Encoder, ModelError> {
        let read = |file: &'static str| {
            std::fs::read(dir.join(file)).map_err(|e| ModelError::File {
                dir: dir.display().to_string(),
                file,
                why: e.to_string(),
            })
        };
        let tensors = read("model.safetensors")?;
        let tokenizer = read("tokenizer.json")?;
        let config = read("config.json")?;
        let sums = std::fs::read(dir.join("SHA256SUMS")).ok();
        let tokenizer = WordPiece::from_json(&tokenizer).map_err(|e| e.in_dir(dir))?;
        Encoder::with_parts(Cow::Owned(tensors), tokenizer, &config, sums.as_deref())
            .map_err(|e| e.in_dir(dir))
    }

    fn with_parts(
        bytes: Cow<'static, [u8]>,
        tokenizer: WordPiece,
        config: &[u8],
        sums: Option<&[u8]>,
    ) -> Result<Encoder, ModelError> {
        let c: Config = serde_json::from_slice(config)
            .map_err(|e| ModelError::Config(format!("not an encoder config ({e})")))?;
        let (h, heads, inter) = (c.hidden_size, c.num_attention_heads, c.intermediate_size);
        if h == 0 || heads == 0 || h % heads != 0 || inter == 0 || c.num_hidden_layers == 0 {
            return Err(ModelError::Config(format!(
                "hidden_size {h}, {heads} heads, intermediate_size {inter}, {} layers is not a BERT shape",
                c.num_hidden_layers
            )));
        }
        if c.pooling != "mean" {
            return Err(ModelError::Config(format!(
                "pooling {} is not supported (amos pools by mean)",
                c.pooling
            )));
        }
        if !(3..=c.max_position_embeddings).contains(&c.window) {
            return Err(ModelError::Config(format!(
                "window {} is not within 3..={}",
                c.window, c.max_position_embeddings
            )));
        }
        if !(c.layer_norm_eps > 0.0 && c.layer_norm_eps < 1.0) {
            return Err(ModelError::Config(
                "layer_norm_eps must be in (0, 1)".into(),
            ));
        }
        let vocab = tokenizer
            .max_id()
            .map_or(0, |m| m as usize + 1)
            .max(tokenizer.unk_id().map_or(0, |u| u as usize + 1));
        let special = |t: &str| {
            tokenizer
                .id(t)
                .ok_or_else(|| ModelError::Tokenizer(format!("no {t} token")))
        };
        let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
        let mut toc = Toc {
            bytes: &bytes,
            toc: safetensors::parse(&bytes)?,
        };
        let word_rows = toc
            .toc
            .get("embeddings.word_embeddings.weight")
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(0);
        if word_rows < vocab {
            return Err(ModelError::Tensors(format!(
                "{word_rows} word embeddings for a vocabulary of {vocab} tokens"
            )));
        }
        let word = toc.matrix("embeddings.word_embeddings.weight", word_rows, h)?;
        let position = toc.floats(
            "embeddings.position_embeddings.weight",
            &[c.max_position_embeddings, h],
        )?;
        let types = toc
            .toc
            .get("embeddings.token_type_embeddings.weight")
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(0);
        let mut token_type = toc.floats("embeddings.token_type_embeddings.weight", &[types, h])?;
        if token_type.is_empty() {
            return Err(ModelError::Tensors("no token type embedding".into()));
        }
        token_type.truncate(h);
        let embed_norm = toc.norm("embeddings.LayerNorm", h)?;
        // No capacity from the file: a huge layer count fails at the first
        // missing tensor, never in the allocator.
        let mut layers = Vec::new();
        for i in 0..c.num_hidden_layers {
            let p = format!("encoder.layer.{i}.");
            layers.push(Layer {
                query: toc.linear(&format!("{p}attention.self.query"), h, h)?,
                key: toc.linear(&format!("{p}attention.self.key"), h, h)?,
                value: toc.linear(&format!("{p}attention.self.value"), h, h)?,
                attn_out: toc.linear(&format!("{p}attention.output.dense"), h, h)?,
                attn_norm: toc.norm(&format!("{p}attention.output.LayerNorm"), h)?,
                up: toc.linear(&format!("{p}intermediate.dense"), inter, h)?,
                down: toc.linear(&format!("{p}output.dense"), h, inter)?,
                out_norm: toc.norm(&format!("{p}output.LayerNorm"), h)?,
            });
        }
        let version = match sums {
            Some(s) => blake3::hash(s).to_hex()[..12].to_string(),
            None => blake3::hash(&bytes).to_hex()[..12].to_string(),
        };
        let base = c.name.unwrap_or_else(|| "encoder".into());
        Ok(Encoder {
            name: format!("{base}@{version}"),
            tokenizer,
            word,
            position,
            token_type,
            embed_norm,
            layers,
            hidden: h,
            heads,
            inter,
            eps: c.layer_norm_eps,
            window: c.window,
            cls,
            sep,
            bytes,
        })
    }

    /// The encoder's name and version: its config's `name` (for the built-in
    /// one `minilm-l6-v2-int8`), `@`, and 12 hex digits of the BLAKE3 of its
    /// `SHA256SUMS` (of the tensors when it has none). Vectors made under
    /// another name are not comparable.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Dimensions of a vector (384).
    pub fn dims(&self) -> usize {
        self.hidden
    }

    /// The tokenizer (BERT uncased WordPiece over the encoder's own ids).
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// The word pieces of each window over `text`, each with `[CLS]` and
    /// `[SEP]`: one window when the text has at most `WINDOW - 2` pieces;
    /// else `w = ceil((n - 32) / (WINDOW - 2 - 32))` windows of `WINDOW - 2`
    /// pieces, window `i` starting at `i * (n - (WINDOW - 2)) / (w - 1)`
    /// (floored): the first at the start, the last at the end, neighbours
    /// sharing at least [`WINDOW_OVERLAP`] pieces. An empty text is one
    /// window of `[CLS] [SEP]`.
    pub fn windows(&self, text: &str) -> Vec<Vec<u32>> {
        let ids = self.tokenizer.encode(text);
        let inner = self.window - 2;
        let n = ids.len();
        let starts: Vec<usize> = if n <= inner {
            vec![0]
        } else {
            let overlap = WINDOW_OVERLAP.min(inner - 1);
            let w = (n - overlap).div_ceil(inner - overlap);
            (0..w).map(|i| i * (n - inner) / (w - 1)).collect()
        };
        starts
            .into_iter()
            .map(|s| {
                let end = (s + inner).min(n);
                let mut seq = Vec::with_capacity(end - s + 2);
                seq.push(self.cls);
                seq.extend_from_slice(&ids[s..end]);
                seq.push(self.sep);
                seq
            })
            .collect()
    }

    /// A query's vector: its first window only, mean-pooled over its tokens
    /// and L2-normalised, as sentence-transformers' `encode`.
    pub fn embed_query(&self, text: &str) -> Vec<f32> {
        let mut windows = self.windows(text);
        windows.truncate(1);
        self.forward(&windows, true)
            .pop()
            .unwrap_or_else(|| vec![0.0; self.hidden])
    }

    /// A memory's vectors: one per window (see [`Encoder::windows`]),
    /// covering the whole text. A short text gives one. A long text is
    /// encoded a group of windows at a time, so memory stays bounded (a few
    /// MB) however long it is.
    pub fn embed_chunks(&self, text: &str) -> Vec<Vec<f32>> {
        self.embed_batch(&[text]).pop().unwrap_or_default()
    }

    /// Many memories at once: `result[i] == embed_chunks(texts[i])`. Windows
    /// are grouped into passes of about 512 tokens, the groups spread over
    /// rayon's threads (one group alone uses them all). Memory grows with the
    /// number of groups running at once, not with `texts`' length, but the
    /// result holds every vector: callers catching up on many memories pass
    /// them a batch (say a few hundred) at a time.
    pub fn embed_batch(&self, texts: &[&str]) -> Vec<Vec<Vec<f32>>> {
        let windows: Vec<Vec<Vec<u32>>> = texts.par_iter().map(|t| self.windows(t)).collect();
        let flat: Vec<&Vec<u32>> = windows.iter().flatten().collect();
        let mut groups: Vec<Vec<Vec<u32>>> = Vec::new();
        let mut tokens = 0;
        for w in flat {
            if groups.is_empty() || tokens + w.len() > GROUP_TOKENS {
                groups.push(Vec::new());
                tokens = 0;
            }
            tokens += w.len();
            if let Some(g) = groups.last_mut() {
                g.push(w.clone());
            }
        }
        let one = groups.len() == 1;
        let vectors: Vec<Vec<f32>> = groups
            .par_iter()
            .map(|g| self.forward(g, one))
            .collect::<Vec<_>>()
            .into_iter()
            .flatten()
            .collect();
        let mut it = vectors.into_iter();
        windows
            .iter()
            .map(|ws| it.by_ref().take(ws.len()).collect())
            .collect()
    }

    /// One pass over whole sequences (each at most the window, with its
    /// `[CLS]` and `[SEP]`), stacked without padding: the linear layers run
    /// over all their tokens at once, attention within each sequence. So no
    /// token ever attends to padding and the mean is over real tokens only,
    /// which is what sentence-transformers' attention mask achieves.
    fn forward(&self, seqs: &[Vec<u32>], parallel: bool) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let total: usize = seqs.iter().map(Vec::len).sum();
        if total == 0 {
            return Vec::new();
        }
        let bytes: &[u8] = &self.bytes;
        let mut x = vec![0.0f32; total * h];
        let mut t = 0;
        for s in seqs {
            for (pos, &id) in s.iter().enumerate() {
                let row = &mut x[t * h..(t + 1) * h];
                // Ids come from the tokenizer, which only yields its own
                // (all < word.rows, checked at load).
                self.word.row(bytes, id as usize, row);
                let p = &self.position[pos * h..(pos + 1) * h];
                for ((v, p), ty) in row.iter_mut().zip(p).zip(&self.token_type) {
                    *v += p + ty;
                }
                t += 1;
            }
        }
        math::layer_norm(
            &mut x,
            &self.embed_norm.gamma,
            &self.embed_norm.beta,
            self.eps,
        );
        let mut q = vec![0.0f32; total * h];
        let mut k = vec![0.0f32; total * h];
        let mut v = vec![0.0f32; total * h];
        let mut ctx = vec![0.0f32; total * h];
        let mut tmp = vec![0.0f32; total * h];
        let mut up = vec![0.0f32; total * self.inter];
        let longest = seqs.iter().map(Vec::len).max().unwrap_or(0);
        let mut scores = vec![0.0f32; longest * longest];
        let d = h / self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        for layer in &self.layers {
            self.linear(&layer.query, &x, total, &mut q, parallel);
            self.linear(&layer.key, &x, total, &mut k, parallel);
            self.linear(&layer.value, &x, total, &mut v, parallel);
            let mut r0 = 0;
            for s in seqs {
                let l = s.len();
                let rows = r0 * h..(r0 + l) * h;
                for head in 0..self.heads {
                    let c0 = head * d;
                    let sc = &mut scores[..l * l];
                    math::matmul_abt(
                        l,
                        d,
                        l,
                        scale,
                        &q[rows.start + c0..rows.end],
                        h,
                        &k[rows.start + c0..rows.end],
                        h,
                        sc,
                        l,
                    );
                    math::softmax_rows(sc, l);
                    math::matmul_ab(
                        l,
                        l,
                        d,
                        sc,
                        l,
                        &v[rows.start + c0..rows.end],
                        h,
                        &mut ctx[rows.start + c0..rows.end],
                        h,
                    );
                }
                r0 += l;
            }
            self.linear(&layer.attn_out, &ctx, total, &mut tmp, parallel);
            for (t, x) in tmp.iter_mut().zip(&x) {
                *t += x;
            }
            math::layer_norm(
                &mut tmp,
                &layer.attn_norm.gamma,
                &layer.attn_norm.beta,
                self.eps,
            );
            std::mem::swap(&mut x, &mut tmp);
            self.linear(&layer.up, &x, total, &mut up, parallel);
            math::gelu(&mut up);
            self.linear(&layer.down, &up, total, &mut tmp, parallel);
            for (t, x) in tmp.iter_mut().zip(&x) {
                *t += x;
            }
            math::layer_norm(
                &mut tmp,
                &layer.out_norm.gamma,
                &layer.out_norm.beta,
                self.eps,
            );
            std::mem::swap(&mut x, &mut tmp);
        }
        let mut out = Vec::with_capacity(seqs.len());
        let mut r0 = 0;
        for s in seqs {
            let mut mean = vec![0.0f32; h];
            for row in x[r0 * h..(r0 + s.len()) * h].chunks_exact(h) {
                for (m, v) in mean.iter_mut().zip(row) {
                    *m += v;
                }
            }
            let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
            if norm > 1e-12 {
                mean.iter_mut().for_each(|v| *v /= norm);
            }
            out.push(mean);
            r0 += s.len();
        }
        out
    }

    fn linear(&self, lin: &Linear, x: &[f32], m: usize, out: &mut [f32], parallel: bool) {
        let bytes: &[u8] = &self.bytes;
        let w = &lin.w;
        math::linear(
            x,
            m,
            w.cols,
            w.rows,
            |r, buf| w.row(bytes, r, buf),
            &lin.bias,
            out,
            parallel,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoder's share of the binary: what `builtin` compiles in, no
    /// more than its files (the vocabulary as a table is smaller than
    /// tokenizer.json's map).
    #[test]
    fn the_builtin_data_is_no_larger_than_the_encoder_files() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/minilm-l6-encoder");
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
            "{compiled} bytes compiled in for {files} bytes of encoder files"
        );
        eprintln!("compiled in: {compiled} bytes (files {files})");
    }

    #[test]
    fn the_builtin_encoder_loads_and_is_named() {
        fn shared<T: Send + Sync>(_: &T) {}
        let e = Encoder::builtin().unwrap();
        shared(e);
        assert!(format!("{e:?}").len() < 200, "{e:?}");
        assert_eq!(e.dims(), 384);
        assert!(e.name().starts_with("minilm-l6-v2-int8@"), "{}", e.name());
    }
}
