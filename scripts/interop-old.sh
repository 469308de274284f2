#!/usr/bin/env bash
# Two-binary interop (docs/design.md §13): this checkout's `amos` against one
# built from a pinned older commit (default 545333a, the release before
# protocol negotiation). Builds the old binary once, from a `git worktree`,
# into a cache dir and reuses it; builds this checkout's with cargo. Then runs
# one `amos serve --no-mdns --listen 127.0.0.1:0` of each version in temp
# homes, pairs them (policy full), writes memories on each (valid time
# included), syncs both directions over QUIC and through a bundle each way,
# and checks that each side finds the other's memories and that the digests
# agree. Exits non-zero on the first failure. Not run by CI (the old build
# takes many minutes); `it versions` emulates the old peer there.
#
# Usage: scripts/interop-old.sh [--build-only]
#   AMOS_INTEROP_REV    the old commit (default 545333a)
#   AMOS_INTEROP_CACHE  where old builds are kept (default ~/.cache/amos-interop)
#   AMOS_NEW_BIN        this release's binary (default: cargo build, target/debug/amos)
set -euo pipefail
OLD_REV=${AMOS_INTEROP_REV:-545333a}
ROOT=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
CACHE=${AMOS_INTEROP_CACHE:-$HOME/.cache/amos-interop}/$OLD_REV
OLD_BIN=$CACHE/bin/amos

build_old() {
  if [ -x "$OLD_BIN" ]; then return; fi
  mkdir -p "$CACHE/bin"
  if [ ! -d "$CACHE/src" ]; then
    git -C "$ROOT" worktree add --detach "$CACHE/src" "$OLD_REV" >&2
  fi
  echo "building amos at $OLD_REV into $CACHE (once)" >&2
  (cd "$CACHE/src" && CARGO_TARGET_DIR="$CACHE/target" cargo build --locked -p amos-node --bin amos >&2)
  cp "$CACHE/target/debug/amos" "$OLD_BIN"
}

build_old
if [ "${1:-}" = "--build-only" ]; then exit 0; fi

if [ -n "${AMOS_NEW_BIN:-}" ]; then
  NEW_BIN=$AMOS_NEW_BIN
else
  (cd "$ROOT" && cargo build -q -p amos-node --bin amos >&2)
  NEW_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/amos
fi

T=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
ok() { echo "ok: $*"; }
# amos BIN HOME ARGS...
amos() { local bin=$1 home=$2; shift 2; AMOS_HOME=$home AMOS_LOG=warn "$bin" "$@" </dev/null; }
NEW() { amos "$NEW_BIN" "$T/new" "$@"; }
OLD() { amos "$OLD_BIN" "$T/old" "$@"; }
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

serve() { # serve NAME BIN: start (in this shell, so cleanup can stop it), wait
  # for "listening on", set ADDR to its address
  local name=$1 bin=$2
  : >"$T/$name.log"
  AMOS_HOME=$T/$name AMOS_LOG=info "$bin" serve --no-mdns --no-push --listen 127.0.0.1:0 \
    </dev/null >/dev/null 2>>"$T/$name.log" &
  PIDS+=($!)
  for _ in $(seq 1 300); do
    if grep -q "listening on" "$T/$name.log"; then
      ADDR=$(grep -o "listening on [^ ]*" "$T/$name.log" | head -1 | awk '{print $3}')
      return
    fi
    sleep 0.1
  done
  fail "$name did not start"
}

# search BIN HOME AGENT QUERY -> ids, one a line
search() { amos "$1" "$2" --json search "$4" --as "$3" --mode lexical | jget "'\n'.join(h['id'] for h in d['hits'])"; }
expect_found() { # expect_found SIDE ID QUERY
  local side=$1 id=$2 q=$3 bin home
  if [ "$side" = new ]; then bin=$NEW_BIN; else bin=$OLD_BIN; fi
  home=$T/$side
  local found
  found=$(search "$bin" "$home" alice "$q")
  grep -qx "$id" <<<"$found" || fail "$side does not find $id for \"$q\": $found"
  ok "$side finds \"$q\" ($id)"
}
sync_now() { # sync_now SIDE
  local out
  if [ "$1" = new ]; then out=$(NEW --json sync now); else out=$(OLD --json sync now); fi
  [ "$(jget "all(p['result']=='ok' for p in d['peers']) and len(d['peers'])==1" <<<"$out")" = True ] \
    || fail "$1 sync now: $out"
  ok "$1 dialled: $(echo "$out" | jget "', '.join('%s in %s out' % (p.get('facts_in'), p.get('facts_out')) for p in d['peers'])")"
}

echo "new: $("$NEW_BIN" --version) ($NEW_BIN, $(git -C "$ROOT" rev-parse --short HEAD))"
echo "old: $("$OLD_BIN" --version) ($OLD_REV)"
NEW init --name new >/dev/null; OLD init --name old >/dev/null
NEW agent add alice >/dev/null; OLD agent add alice >/dev/null
NEW_ID=$(NEW --json id | jget "d['node_id']"); OLD_ID=$(OLD --json id | jget "d['node_id']")
serve new "$NEW_BIN"; NEW_ADDR=$ADDR
serve old "$OLD_BIN"; OLD_ADDR=$ADDR
ok "new $NEW_ID serves at $NEW_ADDR; old $OLD_ID at $OLD_ADDR"
NEW peers add "$OLD_ID" "$OLD_ADDR" --policy full >/dev/null
OLD peers add "$NEW_ID" "$NEW_ADDR" --policy full >/dev/null

# Live sync, both directions, valid time included.
N1=$(NEW --json add --as alice "quasar deploy port is 8080" --share global \
  --valid-from 2026-03-01 --valid-to 2026-04-01 | jget "d['id']")
O1=$(OLD --json add --as alice "nebula staging host moved to rack nine" --share global \
  --valid-from 2026-02-01 | jget "d['id']")
sync_now old
expect_found old "$N1" "quasar deploy"
expect_found new "$O1" "nebula staging"
N2=$(NEW --json add --as alice "pulsar canteen opens at noon" --share global | jget "d['id']")
O2=$(OLD --json add --as alice "comet backups run at midnight" --share global | jget "d['id']")
sync_now new
expect_found old "$N2" "pulsar canteen"
expect_found new "$O2" "comet backups"
VT=$(OLD --json get "$N1" --as alice | jget "d['valid_to']")
[ "$VT" = "2026-04-01T00:00:00.000Z" ] || fail "old node has valid_to $VT for $N1"
ok "old node keeps the new node's valid time (valid_to $VT)"
VF=$(NEW --json get "$O1" --as alice | jget "d['valid_from']")
[ "$VF" = "2026-02-01T00:00:00.000Z" ] || fail "new node has valid_from $VF for $O1"
ok "new node keeps the old node's valid time (valid_from $VF)"
PROTO=$(NEW --json peers list | jget "[p.get('protocol') for p in d['peers']][0]")
[ "$PROTO" = 1 ] || fail "new node's row of the old one says protocol $PROTO"
ok "new node's peer row: protocol $PROTO, held back $(NEW --json peers list | jget "d['peers'][0].get('held_back')")"
# Idle sessions each way: the digests are exchanged and compared.
sync_now old; sync_now new
AGREE=$(NEW --json peers list | jget "(d['peers'][0].get('digest') or {}).get('agree')")
[ "$AGREE" = True ] || fail "the new node's digest comparison with the old: $AGREE"
ok "new node: digests agree with the old node after an idle session"
AGREE=$(OLD --json peers list | jget "(d['peers'][0].get('digest') or {}).get('agree')")
[ "$AGREE" = True ] || fail "the old node's digest comparison with the new: $AGREE"
ok "old node: digests agree with the new node after an idle session"

# Bundles, both directions.
N3=$(NEW --json add --as alice "meteor bundle from the new node" --share global \
  --valid-to 2027-01-01 | jget "d['id']")
O3=$(OLD --json add --as alice "aurora bundle from the old node" --share global | jget "d['id']")
# No mesh key here: --for would seal the new node's bundle (format 7,
# docs/design.md §8.1), which the old node does not read; --no-seal writes
# what it reads. The sealed one is refused there in one line, nothing changed.
NEW bundle export "$T/sealed.amosb" --for "$OLD_ID" --seal >/dev/null
DO0=$(OLD --json digest | jget "d['digest'], d['facts']")
if OLD bundle import "$T/sealed.amosb" >/dev/null 2>"$T/sealed.err"; then
  fail "the old node imported a sealed bundle"
fi
grep -q "bundle format version 7 is not supported" "$T/sealed.err" \
  || fail "the old node's refusal of a sealed bundle: $(cat "$T/sealed.err")"
[ "$(wc -l <"$T/sealed.err")" -eq 1 ] || fail "the old node's refusal is not one line"
[ "$(OLD --json digest | jget "d['digest'], d['facts']")" = "$DO0" ] \
  || fail "the old node changed on refusing a sealed bundle"
ok "old node refuses a sealed bundle in one line, unchanged"
NEW bundle export "$T/new-to-old.amosb" --for "$OLD_ID" --no-seal >/dev/null
OLD bundle export "$T/old-to-new.amosb" --for "$NEW_ID" >/dev/null
OLD bundle import "$T/new-to-old.amosb" >/dev/null || fail "the old node cannot import the new node's bundle"
NEW bundle import "$T/old-to-new.amosb" >/dev/null || fail "the new node cannot import the old node's bundle"
expect_found old "$N3" "meteor bundle"
expect_found new "$O3" "aurora bundle"

DN=$(NEW --json digest | jget "d['digest'], d['facts']"); DO=$(OLD --json digest | jget "d['digest'], d['facts']")
[ "$DN" = "$DO" ] || fail "digests differ: new $DN, old $DO"
ok "converged: both digests $DN"
echo "interop $OLD_REV <-> $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . && echo "" || echo "+changes"): all checks passed"
