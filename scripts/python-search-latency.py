#!/usr/bin/env python3
"""Latency of a search through the Python package (python/, `import amos`),
to set beside the same searches in Rust (`amos bench`'s `search_fast_ms`).

    scripts/python-search-latency.py HOME QUERIES [--mode fast] [--passes N] [--k 10]

HOME is a node home kept by `amos bench --corpus C --keep --workdir W`
(`W/<tmp>/home`, the report's `kept`), QUERIES the corpus's queries.jsonl
(`{"as": AGENT, "query": TEXT}` a line). Each query runs once untimed
(warm), then N timed passes over all of them, as `amos bench` times its own:
one call each, its requester resolved inside the call (`as_`). Prints one
JSON object: the mode, the calls and the median, 90th and 99th percentile
in milliseconds of `Node.search`, the whole Python call (arguments in,
dicts out).
"""
import argparse
import json
import statistics
import time

import amos


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("home")
    ap.add_argument("queries")
    ap.add_argument("--mode", default="fast")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args()
    with open(a.queries) as f:
        queries = [json.loads(line) for line in f if line.strip()]
    node = amos.Node(a.home)
    for q in queries:
        node.search(q["query"], as_=q["as"], k=a.k, mode=a.mode)
    times = []
    for _ in range(a.passes):
        for q in queries:
            t0 = time.perf_counter()
            node.search(q["query"], as_=q["as"], k=a.k, mode=a.mode)
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    pick = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    print(json.dumps({
        "mode": a.mode,
        "calls": len(times),
        "p50_ms": round(statistics.median(times), 4),
        "p90_ms": round(pick(0.90), 4),
        "p99_ms": round(pick(0.99), 4),
    }))


if __name__ == "__main__":
    main()
