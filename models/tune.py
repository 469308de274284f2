#!/usr/bin/env python3
"""Tune a distilled static model on definitions, so that a text's mean of token rows points where the teacher's sentence embedding does.

distill.py gives each token the teacher's view of that token alone; a text's vector is then the
mean of its tokens' rows. That mean knows words, not what a sentence of them means ("a portable
computer small enough to use in your lap" is far from "laptop"). This script fits the rows to the
teacher's sentence embeddings of real texts, the idea of model2vec's "tokenlearn", done as one
ridge regression in numpy/scipy (no torch, no GPU):

  1. texts: WordNet 3.0's definitions ("laptop, laptop computer: a portable computer small enough
     to use in your lap") and usage examples, from Debian's wordnet-base package: all 160,175 of
     them (--texts N takes the first N by the order of their SHA-256: deterministic, no seed);
  2. targets: the teacher's sentence embedding of each (all-MiniLM-L6-v2, its BERT forward pass
     from distill.py, mean pooling, L2 norm), centred (their common direction removed);
  3. the base model's rows (model.safetensors of distill.py's output: int8 rows times their
     weights, SIF included) turned onto the targets' axes (orthogonal Procrustes: cosines are
     unchanged), then the ridge regression
        minimise ||A F - S||^2 + lambda ||F - F0||^2
     where A holds each text's token shares (the mean, as the Rust loader pools), S the centred
     targets scaled to the norm the base model gives each text, and F0 the turned base rows; a
     token no text holds keeps its base row. Solved by conjugate gradients (150 steps);
  4. lambda: the best of --lambdas by the mean cosine between prediction and target on a tenth of
     the texts held out from the fit (nothing from amos's golden sets), then the fit on all texts;
  5. the cosine floor: amos drops semantic candidates below a cosine floor that belongs to the
     model (0.25 for the base model). The tuned model's floor is the cosine with the same share of
     random text pairs under it as 0.25 has under the base model (4,000 texts of the corpus, 2,000
     pairs); printed, and written into config.json as `min_similarity`;
  6. writes model.safetensors (int8 rows over their largest magnitude, `weights` = each row's
     scale), the base's tokenizer.json, config.json and SHA256SUMS, then prints distill.py's
     sanity table and fails unless every paraphrase beats its unrelated text.

Usage (see models/README.md): python3 models/tune.py --base DISTILLED --teacher DIR --wordnet DIR --out OUT
DISTILLED is distill.py's output; DIR the unpacked teacher; --wordnet the directory holding
data.noun, data.verb, data.adj and data.adv (wordnet-base: /usr/share/wordnet).
"""

import argparse
import hashlib
import json
import re
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.special
from safetensors.numpy import load_file, save_file

import distill
from distill import Bert, bert_words, sha256, static_embed, validate, wordpiece

BASE_FLOOR = 0.25


def wordnet_texts(wordnet):
    """Every synset's "lemma, lemma: definition" and each usage example of three words or more."""
    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (wordnet / f"data.{pos}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):  # the licence header
                continue
            head, _, gloss = line.partition(" | ")
            f = head.split()
            n = int(f[3], 16)
            words = [re.sub(r"\(.*\)$", "", f[4 + 2 * i].replace("_", " ")) for i in range(n)]
            parts = [p.strip() for p in gloss.strip().split(";")]
            definition = [p for p in parts if p and not p.startswith('"')]
            examples = [p.strip('"') for p in parts if p.startswith('"')]
            if definition:
                out.append(f"{', '.join(words)}: {'; '.join(definition)}")
            out.extend(e for e in examples if len(e.split()) >= 3)
    return out


def teacher_embeddings(bert, vocab, texts, batch=256):
    """sentence-transformers' encode of each text (at most 62 word pieces), batched by length."""
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    seqs = [wordpiece(bert_words(t), vocab)[:62] for t in texts]
    order = sorted(range(len(texts)), key=lambda i: len(seqs[i]))
    out = np.zeros((len(texts), bert.hidden), np.float32)
    t0 = time.time()
    for s in range(0, len(texts), batch):
        idx = order[s:s + batch]
        out[idx] = bert.encode([[cls] + seqs[i] + [sep] for i in idx])
        print(f"\rteacher {s + len(idx)}/{len(texts)}  {time.time() - t0:.0f}s", end="", flush=True)
    print()
    return out


def teacher_view(bert, vocab, ordered, n, cache=None, weights=None):
    """The teacher's embeddings of the first `n` of `ordered`. With `cache`, those of every text
    are made once and kept there, named by the teacher's `weights` file (its SHA-256) and the texts
    in order, and sliced: a later run with another --texts or --lambdas skips the teacher."""
    if cache is None:
        return teacher_embeddings(bert, vocab, ordered[:n])
    key = hashlib.sha256("\n".join([sha256(weights), *ordered]).encode()).hexdigest()[:16]
    path = cache / f"teacher-{key}.npy"
    if path.exists():
        print(f"teacher: {len(ordered)} embeddings from {path}")
        return np.load(path)[:n]
    out = teacher_embeddings(bert, vocab, ordered)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f"teacher-{key}.tmp.npy"
    np.save(tmp, out)
    tmp.rename(path)
    return out[:n]


def unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def ridge(A, S, F0, lam, steps=150):
    """Conjugate gradients on (A^T A + lam I) F = A^T S + lam F0, all columns at once, from F0."""
    def apply(x):
        return A.T @ (A @ x) + lam * x
    x = F0.copy()
    r = A.T @ S + lam * F0 - apply(x)
    p = r.copy()
    rs = (r * r).sum(0)
    for _ in range(steps):
        ap = apply(p)
        alpha = rs / np.maximum((p * ap).sum(0), 1e-30)
        x += p * alpha
        r -= ap * alpha
        rs_next = (r * r).sum(0)
        p = r + p * (rs_next / np.maximum(rs, 1e-30))
        rs = rs_next
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, type=Path, help="distill.py's output directory")
    ap.add_argument("--teacher", required=True, type=Path, help="unpacked all-MiniLM-L6-v2 directory")
    ap.add_argument("--wordnet", required=True, type=Path, help="directory with WordNet 3.0's data.* files")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--texts", type=int, default=None, help="the first N texts by SHA-256 (default: all)")
    ap.add_argument("--lambdas", default="0.01,0.1,1")
    ap.add_argument("--cache", type=Path, help="a directory to keep the teacher's embeddings in "
                    "(one .npy, named by the SHA-256 of the teacher's weights and the texts), so a second run "
                    "skips the teacher")
    args = ap.parse_args()
    t0 = time.time()
    distill.erf = scipy.special.erf  # the same function as distill.py's, in C: 3x faster

    config = json.loads((args.teacher / "config.json").read_text())
    teacher_vocab = json.loads((args.teacher / "tokenizer.json").read_text())["model"]["vocab"]
    bert = Bert(load_file(str(args.teacher / "model.safetensors")), config)
    base = load_file(str(args.base / "model.safetensors"))
    F0 = (base["embeddings"].astype(np.float32) * base["weights"][:, None]).astype(np.float64)
    tok = json.loads((args.base / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    unk = vocab["[UNK]"]

    # 1. The texts.
    corpus = wordnet_texts(args.wordnet)
    ordered = sorted(corpus, key=lambda t: hashlib.sha256(t.encode()).digest())
    texts = ordered[: args.texts]
    print(f"wordnet: {len(corpus)} texts, {len(texts)} used")

    # 2. The teacher's view of them, centred.
    T = teacher_view(bert, teacher_vocab, ordered, len(texts), args.cache,
                     args.teacher / "model.safetensors").astype(np.float64)
    Tc = T - T.mean(0)

    # 3. The base rows turned onto the targets' axes; the regression's matrices.
    rows, cols, vals = [], [], []
    for j, text in enumerate(texts):
        ids = [i for i in wordpiece(bert_words(text), vocab) if i != unk]
        rows.extend([j] * len(ids))
        cols.extend(ids)
        vals.extend([1.0 / len(ids)] * len(ids))
    A = sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), F0.shape[0]))
    A.sum_duplicates()
    P0 = A @ F0
    u, _, vt = np.linalg.svd(P0.T @ Tc)
    F0 = F0 @ (u @ vt)
    S = unit(Tc) * np.linalg.norm(A @ F0, axis=1, keepdims=True)

    # 4. Lambda by held-out texts, then the fit on all of them.
    perm = np.random.default_rng(0).permutation(len(texts))
    held, fit = perm[: len(texts) // 10], perm[len(texts) // 10:]

    def held_cos(F):
        return float((unit(A[held] @ F) * unit(Tc[held])).sum(1).mean())

    print(f"held-out cosine to the teacher: base {held_cos(F0):.4f}")
    best = None
    for lam in (float(x) for x in args.lambdas.split(",")):
        c = held_cos(ridge(A[fit], S[fit], F0, lam))
        print(f"  lambda {lam:g}: {c:.4f}")
        if best is None or c > best[1]:
            best = (lam, c)
    lam = best[0]
    F = ridge(A, S, F0, lam)

    # 5. The floor, by the share of random pairs under it.
    rng = np.random.default_rng(1)
    sample = [corpus[i] for i in rng.choice(len(corpus), 4000, replace=False)]
    before = static_embed(sample, base["embeddings"], vocab, base["weights"])
    share = float(((before[:2000] * before[2000:]).sum(1) < BASE_FLOOR).mean())
    scale = np.abs(F).max(1) / 127.0
    scale[scale == 0] = 1.0
    table = np.clip(np.round(F / scale[:, None]), -127, 127).astype(np.int8)
    weights = scale.astype(np.float32)
    after = static_embed(sample, table, vocab, weights)
    floor = round(float(np.quantile((after[:2000] * after[2000:]).sum(1), share)), 2)
    print(f"floor: {share:.1%} of random pairs under {BASE_FLOOR} before; the same under {floor} after")

    # 6. Write the model2vec directory.
    args.out.mkdir(parents=True, exist_ok=True)
    save_file({"embeddings": table, "weights": weights}, str(args.out / "model.safetensors"))
    (args.out / "model.safetensors").chmod(0o644)
    (args.out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, separators=(",", ":")))
    cfg = json.loads((args.base / "config.json").read_text())
    cfg.update({"tuned_on": f"WordNet 3.0 definitions and examples ({len(texts)} texts)",
                "ridge_lambda": lam, "min_similarity": floor})
    (args.out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    files = ["config.json", "model.safetensors", "tokenizer.json"]
    (args.out / "SHA256SUMS").write_text("".join(f"{sha256(args.out / f)}  {f}\n" for f in files))
    print(f"lambda {lam:g} (held-out cosine {best[1]:.4f}), floor {floor}, "
          f"{sum((args.out / f).stat().st_size for f in files)} bytes, {time.time() - t0:.0f}s")
    validate(bert, teacher_vocab, table, vocab, weights)


if __name__ == "__main__":
    main()
