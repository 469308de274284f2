#!/usr/bin/env python3
"""Whole-process latency of `amos search`: each run is a new process that
opens the home, loads the model and the indexes, searches and exits.

    scripts/cli-search-latency.py AMOS HOME QUERIES [--mode hybrid|lexical|semantic] [--runs N]

AMOS is the binary, HOME a node home (e.g. one kept by `amos bench --keep`),
QUERIES a workload's queries.jsonl (`{"as": AGENT, "query": TEXT}` a line;
the first five are cycled). Prints one JSON object: the mode, the runs and
the median, minimum and 90th percentile in milliseconds (wall clock around
the process, so it includes starting it). Five warm-up runs come first.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("amos")
    p.add_argument("home")
    p.add_argument("queries")
    p.add_argument("--mode", default="hybrid", choices=["hybrid", "lexical", "semantic"])
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    with open(a.queries) as f:
        queries = [json.loads(line) for line in f if line.strip()][:5]
    if not queries:
        print("no queries in " + a.queries, file=sys.stderr)
        return 2
    env = dict(os.environ, AMOS_HOME=a.home)

    def run(q) -> float:
        cmd = [a.amos, "search", q["query"], "--as", q["as"], "--mode", a.mode, "--json"]
        t = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return (time.perf_counter() - t) * 1000

    for q in queries:
        run(q)
    ms = sorted(run(queries[i % len(queries)]) for i in range(a.runs))
    print(json.dumps({
        "mode": a.mode,
        "runs": a.runs,
        "median_ms": round(statistics.median(ms), 2),
        "min_ms": round(ms[0], 2),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
