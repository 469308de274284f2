#!/usr/bin/env bash
# Range-based repair between two real nodes (docs/design.md §7.9): node a
# holds N memories shared with team:apollo (2 facts each), node b syncs
# them all (the full send), backs up, syncs N/100 more, and is restored
# from the backup (a new log epoch, the newest 1 % lost); b's next sync
# repairs. Prints the figures of each of b's sessions (its peer row's
# last session: ms, facts and frame bytes each way).
#
#   scripts/repair-figure.sh [N]     (N memories, default 50000)
#
# AMOS (default: `amos` on PATH) is the binary to measure. Needs python3.
# Everything lives in a temp dir that is removed afterwards; a serves on
# 127.0.0.1 only, without mDNS.
set -euo pipefail
N=${1:-50000}
AMOS=${AMOS:-amos}
work=$(mktemp -d)
serve_pid=
cleanup() {
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
A() { AMOS_HOME=$work/a AMOS_LOG=warn "$AMOS" "$@"; }
B() { AMOS_HOME=$work/b AMOS_LOG=warn "$AMOS" "$@"; }
memories() { # TAG COUNT FILE: a mem0 export
  python3 -c 'import json,sys
tag, n = sys.argv[1], int(sys.argv[2])
json.dump({"results": [{"id": f"{tag}-{i}", "memory": f"{tag} memory {i}: the launch checklist item {i} is done by the crew"} for i in range(n)]}, open(sys.argv[3], "w"))' "$@"
}
node_id() { "$@" --json id | python3 -c 'import json,sys; print(json.load(sys.stdin)["node_id"])'; }
figures() {
  B --json peers list | python3 -c 'import json,sys
s = json.load(sys.stdin)["peers"][0]["last_session"]
print(json.dumps({k: s[k] for k in ("ms", "facts_in", "facts_out", "bytes_in", "bytes_out")}))'
}

memories base "$N" "$work/base.json"
memories late "$((N / 100))" "$work/late.json"
A init --name a >/dev/null
B init --name b >/dev/null
A team create apollo >/dev/null
A agent add alice --team apollo >/dev/null
A import mem0 "$work/base.json" --as alice --share team:apollo >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
AMOS_HOME=$work/a AMOS_LOG=info "$AMOS" serve --listen "127.0.0.1:$port" --no-mdns 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 200); do grep -q "listening on" "$work/serve.log" && break; sleep 0.1; done
A peers add "$(node_id B)" --policy full >/dev/null
B peers add "$(node_id A)" "127.0.0.1:$port" --policy full >/dev/null

B sync now >/dev/null
echo "{\"session\": \"first (full) send\", \"figures\": $(figures)}"
B backup "$work/b.db" >/dev/null
A import mem0 "$work/late.json" --as alice --share team:apollo >/dev/null
B sync now >/dev/null
echo "{\"session\": \"incremental ($((N / 100)) memories)\", \"figures\": $(figures)}"
B restore "$work/b.db" --force >/dev/null
B sync now >/dev/null
echo "{\"session\": \"after the restore: repair\", \"figures\": $(figures)}"
[ "$(A --json digest)" = "$(B --json digest)" ] || { echo "not converged" >&2; exit 1; }
B sync now >/dev/null
echo "{\"session\": \"next (idle)\", \"figures\": $(figures)}"
