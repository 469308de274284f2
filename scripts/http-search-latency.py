#!/usr/bin/env python3
"""Latency of `GET /v1/search` over loopback HTTP: one `amos serve --http`
on a kept home, one keep-alive connection per query's agent, each request
timed from sending to the last byte of the answer.

    scripts/http-search-latency.py AMOS HOME QUERIES [--mode fast|lexical|hybrid|semantic] [--runs N]

AMOS is the binary, HOME a node home (e.g. one kept by `amos bench --keep`),
QUERIES a workload's queries.jsonl (`{"as": AGENT, "query": TEXT}` a line).
It makes a token for each agent (`amos agent token create`), starts
`amos serve --no-mdns --no-push --listen 127.0.0.1:0 --http 127.0.0.1:0`,
warms up with every query once, then asks the queries in turn for --runs
requests and prints one JSON object: the mode, the runs, the median,
minimum, 90th and 99th percentile in milliseconds, and the mean hits.
The server is stopped (SIGTERM) at the end. Everything stays on 127.0.0.1.
"""
import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("amos")
    p.add_argument("home")
    p.add_argument("queries")
    p.add_argument("--mode", default="fast", choices=["fast", "lexical", "hybrid", "semantic"])
    p.add_argument("--runs", type=int, default=2000)
    a = p.parse_args()
    with open(a.queries) as f:
        queries = [json.loads(line) for line in f if line.strip()]
    if not queries:
        print("no queries in " + a.queries, file=sys.stderr)
        return 2
    env = dict(os.environ, AMOS_HOME=a.home, AMOS_LOG="warn")
    tokens = {}
    for agent in sorted({q["as"] for q in queries}):
        out = subprocess.run(
            [a.amos, "--json", "agent", "token", "create", agent, "--expires", "1h",
             "--name", "http-search-latency"],
            env=env, check=True, capture_output=True, text=True,
        ).stdout
        tokens[agent] = json.loads(out)["token"]
    serve = subprocess.Popen(
        [a.amos, "--json", "serve", "--no-mdns", "--no-push", "--listen", "127.0.0.1:0",
         "--http", "127.0.0.1:0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        base = json.loads(serve.stdout.readline())["serving"]["http"]
        host, port = urllib.parse.urlsplit(base).hostname, urllib.parse.urlsplit(base).port
        conns = {agent: http.client.HTTPConnection(host, port, timeout=60) for agent in tokens}

        def ask(q):
            path = "/v1/search?" + urllib.parse.urlencode(
                {"q": q["query"], "k": 10, "mode": a.mode})
            c = conns[q["as"]]
            t = time.perf_counter()
            c.request("GET", path, headers={"Authorization": "Bearer " + tokens[q["as"]]})
            r = c.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t) * 1000
            if r.status != 200:
                raise SystemExit(f"{r.status}: {body[:200]!r}")
            return ms, len(json.loads(body)["hits"])

        for q in queries:
            ask(q)
        timed = [ask(queries[i % len(queries)]) for i in range(a.runs)]
        ms = sorted(t for t, _ in timed)
        print(json.dumps({
            "mode": a.mode,
            "runs": a.runs,
            "queries": len(queries),
            "median_ms": round(statistics.median(ms), 3),
            "min_ms": round(ms[0], 3),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
            "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 3),
            "mean_hits": round(statistics.mean(h for _, h in timed), 2),
        }))
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
        for agent in tokens:
            subprocess.run([a.amos, "agent", "token", "revoke", "--agent", agent, "--all"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
