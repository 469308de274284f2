#!/usr/bin/env python3
"""Realistic English distractor memories for `amos eval --distractors`:
WordNet 3.0 glosses (a definition plus its example sentences, as WordNet
writes them), picked deterministically.

    apt-get install wordnet-base
    scripts/wordnet-distractors.py [--wordnet /usr/share/wordnet] [--count 10000] [--seed 39] \
        [--min-words 8] [--out node/eval/distractors/wordnet-10k.jsonl]

Reads data.noun, data.verb, data.adj and data.adv (in that order) from
Debian's `wordnet-base`, skips the licence header (lines starting with two
spaces), takes the gloss after " | " on each synset line, keeps glosses of at
least --min-words whitespace-separated words, drops exact duplicates (first
occurrence wins), then picks --count of them with random.Random(--seed) and
writes them in source order, one {"content": GLOSS} a line. The same inputs
always give the same file. WordNet's licence (Debian's
/usr/share/doc/wordnet-base/copyright) is committed beside the output as
LICENSE-wordnet. No network.
"""
import argparse
import json
import os
import random
import sys

PARTS = ("noun", "verb", "adj", "adv")


def glosses(wordnet_dir):
    """Every gloss of the four data files, in file order."""
    for part in PARTS:
        path = os.path.join(wordnet_dir, "data." + part)
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue  # licence header
                _, sep, gloss = line.partition(" | ")
                if not sep:
                    continue
                gloss = " ".join(gloss.split())
                if gloss:
                    yield gloss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wordnet", default="/usr/share/wordnet")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--min-words", type=int, default=8)
    ap.add_argument("--out", default="node/eval/distractors/wordnet-10k.jsonl")
    args = ap.parse_args()

    seen = set()
    pool = []
    for gloss in glosses(args.wordnet):
        if len(gloss.split()) < args.min_words or gloss in seen:
            continue
        seen.add(gloss)
        pool.append(gloss)
    if len(pool) < args.count:
        sys.exit(f"only {len(pool)} glosses of at least {args.min_words} words, {args.count} asked")
    picked = sorted(random.Random(args.seed).sample(range(len(pool)), args.count))
    with open(args.out, "w", encoding="utf-8") as f:
        for i in picked:
            f.write(json.dumps({"content": pool[i]}, ensure_ascii=False) + "\n")
    print(f"{args.out}: {args.count} of {len(pool)} glosses with >= {args.min_words} words (seed {args.seed})")


if __name__ == "__main__":
    main()
