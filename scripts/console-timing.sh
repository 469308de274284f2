#!/usr/bin/env bash
# Server time of every console page on a generated store: the median of
# RUNS requests per page, as the console reports it in `Server-Timing`
# (the time from the request reaching the console to the page being
# rendered; the network and the browser are not in it).
#
#   scripts/console-timing.sh [N [RUNS]]     (N memories, default 10000; RUNS default 7)
#
# AMOS (default: `amos` on PATH) is the binary to measure; use a release
# build for figures. The store is loaded with `amos bench --keep --encoder
# off` (encoding 100,000 memories takes long and no page needs it); set
# TIMING_HOME to a home kept earlier to time it instead (it is not
# removed). Needs curl and jq. Everything else lives in a temp dir that is
# removed afterwards; the console listens on 127.0.0.1 only.
set -euo pipefail
N=${1:-10000}
RUNS=${2:-7}
AMOS=${AMOS:-amos}
work=$(mktemp -d)
console_pid=
cleanup() {
  if [ -n "$console_pid" ]; then kill "$console_pid" 2>/dev/null || true; wait "$console_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$AMOS" -q bench --generate "$N" "$work/wl"
if [ -n "${TIMING_HOME:-}" ]; then
  home=$TIMING_HOME
else
  mkdir -p "$work/bench"
  "$AMOS" --json bench --corpus "$work/wl" --keep --no-sync --passes 1 --adds 0 \
    --encoder off --workdir "$work/bench" >"$work/report.json"
  home="$(jq -r .kept "$work/report.json")/home"
fi
export AMOS_HOME="$home"

agent=$(head -1 "$work/wl/queries.jsonl" | jq -r .as)
query=$(head -1 "$work/wl/queries.jsonl" | jq -r .query)
id=$("$AMOS" --json list --as "$agent" --limit 1 | jq -r '.memories[0].id')
# A memory with a link, for the graph (the workload links none): the newest
# visible one linked to the next.
other=$("$AMOS" --json list --as "$agent" --limit 2 | jq -r '.memories[1].id')
"$AMOS" -q link "$id" "$other" --as "$agent" >/dev/null
memories=$("$AMOS" --json status | jq -r .memories)

"$AMOS" console --listen 127.0.0.1:0 >"$work/url" &
console_pid=$!
for _ in $(seq 1 100); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(head -1 "$work/url")
base=${url%%/\?token=*}
# The printed URL opens a session: its redirect sets the session's cookie
# (the token itself is no cookie).
cookie=$(curl -sS -o /dev/null -D - "$url" | tr -d '\r' | sed -n 's/^set-cookie: \([^;]*\);.*/\1/Ip')
[ -n "$cookie" ] || { echo "no session cookie from $url" >&2; exit 1; }

enc() { jq -rn --arg v "$1" '$v|@uri'; }
pages=(
  "/"
  "/?as=$(enc "$agent")"
  "/api/dashboard?as=$(enc "$agent")"
  "/node"
  "/pack?as=$(enc "$agent")&q=$(enc "$query")"
  "/peers"
  "/memories?as=$(enc "$agent")"
  "/memories?as=$(enc "$agent")&q=$(enc "$query")"
  "/memories/$id?as=$(enc "$agent")"
  "/timeline?as=$(enc "$agent")"
  "/graph?as=$(enc "$agent")&around=$id"
  "/org"
  "/audit"
  "/?as=$(enc "$agent")&lang=ja"
  "/memories/$id?as=$(enc "$agent")&lang=ja"
)
echo "store: $memories memories; agent $agent; query \"$query\"; $RUNS requests per page (the first warms the index)"
printf '%-60s %10s %10s\n' page median_ms max_ms
for p in "${pages[@]}"; do
  times=()
  for _ in $(seq 1 "$RUNS"); do
    head=$(curl -sS -o /dev/null -D - -H "Cookie: $cookie" "$base$p" | tr -d '\r')
    status=$(echo "$head" | head -1 | cut -d' ' -f2)
    [ "$status" = 200 ] || { echo "$p answered $status, not 200" >&2; exit 1; }
    t=$(echo "$head" | sed -n 's/^server-timing: app;dur=//Ip')
    times+=("$t")
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  median=$(echo "$sorted" | sed -n "$(( (RUNS + 1) / 2 ))p")
  max=$(echo "$sorted" | tail -1)
  printf '%-60s %10s %10s\n' "${p:0:60}" "$median" "$max"
done
