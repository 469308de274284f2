#!/usr/bin/env python3
"""Speak MCP to `amos mcp` as a client configured like README.md's line
would: spawn the command, the environment as given (AMOS_AGENT, AMOS_HOME),
JSON-RPC over stdio. Used by scripts/first-hour.sh; the standard library only.

    first-hour-mcp.py ID_FILE COMMAND...

Checks, each printed `ok  …` or `FAIL … — …` (exit 1 on the first failure):
initialize, tools/list names memory_add and memory_search, every tool
carries annotations (openWorldHint false; readOnlyHint on the reads) and an
outputSchema, memory_add stores a team memory (its id is written to ID_FILE)
and its structuredContent has what its outputSchema requires, memory_search
finds it, resources/read of amos://memory/ID answers it, a line
that is not JSON is answered with JSON-RPC's parse error (-32700, id null)
and the server keeps serving, and closing stdin ends it with exit 0. Every
wait is bounded (30 s).
"""

import json
import queue
import subprocess
import sys
import threading

WAIT = 30
STDERR = []


def fail(what, why, proc=None):
    print(f"FAIL {what} — {why}", flush=True)
    if proc is not None:
        proc.kill()
        proc.wait()
        if STDERR:
            print("  stderr of amos mcp:")
            for line in "".join(STDERR).splitlines():
                print(f"    {line}")
    sys.exit(1)


def ok(what):
    print(f"ok  {what}", flush=True)


def main():
    if len(sys.argv) < 3:
        print("usage: first-hour-mcp.py ID_FILE COMMAND...", file=sys.stderr)
        sys.exit(2)
    id_file, command = sys.argv[1], sys.argv[2:]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def drain():
        for line in proc.stderr:
            STDERR.append(line)

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=drain, daemon=True).start()

    def send_line(text):
        proc.stdin.write(text + "\n")
        proc.stdin.flush()

    def next_message(what):
        try:
            line = lines.get(timeout=WAIT)
        except queue.Empty:
            fail(what, f"no answer within {WAIT} s", proc)
        if line is None:
            fail(what, f"amos mcp closed stdout (exit {proc.wait()})", proc)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            fail(what, f"stdout carried a line that is not JSON: {line!r}", proc)

    next_id = [0]

    def request(what, method, params):
        next_id[0] += 1
        rid = next_id[0]
        send_line(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
        while True:
            msg = next_message(what)
            if msg.get("id") == rid:
                if "error" in msg:
                    fail(what, f"JSON-RPC error {msg['error']}", proc)
                return msg["result"]

    def call(what, tool, args):
        result = request(what, "tools/call", {"name": tool, "arguments": args})
        if result.get("isError"):
            fail(what, f"tool error: {result.get('content')}", proc)
        return result.get("structuredContent") or {}

    what = "mcp: initialize answers as amos with tools"
    init = request(
        what,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "first-hour", "version": "0"},
        },
    )
    if init.get("serverInfo", {}).get("name") != "amos" or "tools" not in init.get("capabilities", {}):
        fail(what, f"unexpected result {init}", proc)
    send_line(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    ok(what)

    what = "mcp: tools/list names memory_add, memory_search and memory_context_pack"
    tools = request(what, "tools/list", {}).get("tools", [])
    names = {t["name"] for t in tools}
    missing = {"memory_add", "memory_search", "memory_context_pack"} - names
    if missing:
        fail(what, f"missing {sorted(missing)} in {sorted(names)}", proc)
    ok(what)

    what = "mcp: every tool has annotations and an outputSchema"
    reads = {"memory_search", "memory_get", "memory_context_pack", "memory_timeline"}
    for t in tools:
        a = t.get("annotations") or {}
        if a.get("openWorldHint") is not False:
            fail(what, f"{t['name']}: openWorldHint is not false: {a}", proc)
        if t["name"] in reads and a.get("readOnlyHint") is not True:
            fail(what, f"{t['name']}: not readOnlyHint: {a}", proc)
        if t["name"] in {"memory_forget", "memory_unshare"} and a.get("destructiveHint") is not True:
            fail(what, f"{t['name']}: not destructiveHint: {a}", proc)
        if (t.get("outputSchema") or {}).get("type") != "object":
            fail(what, f"{t['name']}: no outputSchema of type object", proc)
    ok(what)
    schemas = {t["name"]: t["outputSchema"] for t in tools}

    what = "mcp: memory_add stores a team memory"
    added = call(
        what,
        "memory_add",
        {"content": "claude keeps pull requests under 400 lines", "share": ["team:apollo"]},
    )
    mid = added.get("id")
    if not mid:
        fail(what, f"no id in {added}", proc)
    lacking = [k for k in schemas["memory_add"].get("required", []) if k not in added]
    if lacking:
        fail(what, f"structuredContent {added} lacks {lacking}, which its outputSchema requires", proc)
    with open(id_file, "w") as f:
        f.write(mid + "\n")
    ok(what)

    what = "mcp: memory_search finds it"
    hits = call(what, "memory_search", {"query": "how long are pull requests", "k": 5}).get("hits", [])
    if mid not in [h.get("id") for h in hits]:
        fail(what, f"{mid} not among {[h.get('id') for h in hits]}", proc)
    ok(what)

    what = "mcp: resources/read of amos://memory/ID answers the memory"
    contents = request(what, "resources/read", {"uri": f"amos://memory/{mid}"}).get("contents", [])
    try:
        memory = json.loads(contents[0]["text"])
    except (IndexError, KeyError, json.JSONDecodeError) as e:
        fail(what, f"unreadable contents {contents}: {e}", proc)
    if memory.get("id") != mid:
        fail(what, f"answered {memory}", proc)
    ok(what)

    what = "mcp: a line that is not JSON gets -32700 (id null)"
    send_line("this is not json")
    msg = next_message(what)
    if msg.get("id", "absent") is not None or msg.get("error", {}).get("code") != -32700:
        fail(what, f"answered {msg}", proc)
    ok(what)

    what = "mcp: the server keeps serving after it"
    if not request(what, "tools/list", {}).get("tools"):
        fail(what, "tools/list came back empty", proc)
    ok(what)

    what = "mcp: closing stdin ends the server with exit 0"
    proc.stdin.close()
    try:
        code = proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        fail(what, f"still running {WAIT} s after stdin closed", proc)
    if code != 0:
        fail(what, f"exit {code}", proc)
    ok(what)


if __name__ == "__main__":
    main()
