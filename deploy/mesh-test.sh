#!/usr/bin/env bash
# deploy/mesh-test.sh — three amos nodes in containers on a private bridge
# network: pair them (`amos team invite` on node1, `amos join` on node2 and
# node3), write on each, cut node3 off (`docker network disconnect`), write
# on both sides, reconnect, sync, and check that every node's
# `amos digest --scope team:apollo` agrees. Exits non-zero on any failure and
# removes the containers, network, image and homes it made.
#
#   bash deploy/mesh-test.sh                # builds the static release binary (minutes)
#   AMOS_BIN=path/to/amos bash deploy/mesh-test.sh   # use that binary instead
#
# A dynamic AMOS_BIN is copied with the shared libraries `ldd` names.
# Every node runs `amos serve --no-mdns`. Needs docker and docker-compose
# (v1) or the `docker compose` plugin; pulls nothing (the image is FROM scratch).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
id=$$
tag="amos-mesh-test:$id"
project="amosmesh$id"
# A /24 of our own per run; override with AMOS_MESH_NET=a.b.c.
net=${AMOS_MESH_NET:-172.30.$((id % 200 + 20))}
team=apollo
scope="team:$team"
work=$(mktemp -d /tmp/amos-mesh-test.XXXXXX)

log() { printf 'mesh-test: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose_cmd=(docker-compose)
else
  fail "neither 'docker compose' nor docker-compose is installed"
fi
compose() {
  AMOS_IMAGE="$tag" AMOS_MESH_DIR="$work/homes" AMOS_MESH_NET="$net" \
    "${compose_cmd[@]}" -p "$project" -f "$here/compose.yaml" "$@"
}

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    log "logs of the nodes (exit $rc):"
    compose logs --no-color 2>&1 | tail -n 80 >&2 || true
  fi
  compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  docker rmi -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

# --- the binary -------------------------------------------------------------
bin=${AMOS_BIN:-}
if [ -z "$bin" ]; then
  log "building the static release binary (RUSTFLAGS=-C target-feature=+crt-static)"
  (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked -p amos-node --bin amos --target x86_64-unknown-linux-gnu)
  bin="${CARGO_TARGET_DIR:-$root/target}/x86_64-unknown-linux-gnu/release/amos"
fi
[ -x "$bin" ] || fail "no executable amos at $bin"

# --- the image (FROM scratch) ------------------------------------------------
ctx="$work/context"
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/data" "$ctx/rootfs/tmp"
if command -v strip >/dev/null 2>&1; then
  strip -o "$ctx/rootfs/usr/local/bin/amos" "$bin"
else
  cp "$bin" "$ctx/rootfs/usr/local/bin/amos"
fi
libs=$(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' || true)
if [ -n "$libs" ]; then
  log "$bin is dynamic: copying its shared libraries into the image"
  for lib in $libs; do
    cp -L --parents "$lib" "$ctx/rootfs/"
  done
else
  log "$bin is static"
fi
cp "$here/docker/Dockerfile.scratch" "$ctx/Dockerfile"
docker build -q -t "$tag" "$ctx" >/dev/null
log "image $tag built ($(docker image inspect -f "{{.Size}}" "$tag") bytes); network $net.0/24"

# --- three homes, initialised by the image itself -----------------------------
for n in 1 2 3; do
  mkdir -p "$work/homes/node$n"
  docker run --rm --network none -v "$work/homes/node$n:/data" "$tag" init --name "node$n" >/dev/null
done

compose up -d >/dev/null 2>&1 || { compose up -d; fail "compose up"; }
cid() { compose ps -q "node$1"; }
c1=$(cid 1); c2=$(cid 2); c3=$(cid 3)
[ -n "$c1" ] && [ -n "$c2" ] && [ -n "$c3" ] || fail "containers did not start"

# amos N ARGS...: run amos inside node N (bounded).
amos() {
  local n=$1
  shift
  timeout 120 docker exec "$(cid "$n")" /usr/local/bin/amos "$@"
}

# Ready once each node logs that it listens.
for n in 1 2 3; do
  for _ in $(seq 1 150); do
    if docker logs "$(cid "$n")" 2>&1 | grep -q "listening on"; then continue 2; fi
    sleep 0.2
  done
  fail "node$n does not listen"
done

# --- org graph and pairing ---------------------------------------------------
amos 1 team create "$team" >/dev/null
for a in alice bob carol; do
  amos 1 agent add "$a" --team "$team" >/dev/null
  # Agents do not travel to scoped peers: the joiners register them; the
  # memberships come by sync.
  amos 2 agent add "$a" >/dev/null
  amos 3 agent add "$a" >/dev/null
done
for n in 2 3; do
  code=$(amos 1 team invite "$team" --addr "$net.11:4747" | sed -n 1p)
  case "$code" in amos1-*) ;; *) fail "no pairing code from node1: $code" ;; esac
  amos "$n" join "$code" >&2 || fail "node$n could not join"
done
log "node2 and node3 paired with node1"

digest() { amos "$1" --json digest --scope "$scope" | sed -n 's/.*"digest":"\([^"]*\)".*/\1/p'; }
round() {
  # Dial in an order that carries everything everywhere through node1.
  for n in 2 3 1 2 3; do
    amos "$n" sync auto >&2 || fail "sync on node$n"
  done
}
agree() {
  local d1 d2 d3
  d1=$(digest 1); d2=$(digest 2); d3=$(digest 3)
  log "digests: $d1 $d2 $d3"
  [ -n "$d1" ] && [ "$d1" = "$d2" ] && [ "$d2" = "$d3" ]
}

# --- write on each, converge ---------------------------------------------------
amos 1 add "mesh note from node1 by alice" --as alice --share "$scope" >/dev/null
amos 2 add "mesh note from node2 by bob" --as bob --share "$scope" >/dev/null
amos 3 add "mesh note from node3 by carol" --as carol --share "$scope" >/dev/null
round
agree || fail "digests differ after the first round"

# --- partition: node3 is cut off -------------------------------------------------
netname="${project}_mesh"
docker network disconnect -f "$netname" "$c3"
log "node3 disconnected from $netname"
amos 1 add "partition note on node1" --as alice --share "$scope" >/dev/null
amos 2 add "partition note on node2" --as bob --share "$scope" >/dev/null
amos 3 add "partition note on node3" --as carol --share "$scope" >/dev/null
amos 2 sync auto >&2 || fail "sync between node2 and node1 during the partition"
out=$(amos 3 --json sync auto) || fail "sync auto on node3 must not fail on unreachable peers"
case "$out" in *'"unreachable"'*) ;; *) fail "node3 should find node1 unreachable: $out" ;; esac
if agree; then fail "digests agree while node3 is cut off"; fi

# --- heal --------------------------------------------------------------------------
docker network connect --ip "$net.13" "$netname" "$c3"
log "node3 reconnected"
round
agree || fail "digests differ after the partition healed"
for n in 1 2 3; do
  hits=$(amos "$n" --json search "partition note" --as bob -k 10)
  for src in node1 node2 node3; do
    case "$hits" in *"partition note on $src"*) ;; *) fail "node$n: bob cannot find the note written on $src: $hits" ;; esac
  done
done

echo "mesh-test: PASS (3 nodes, digests agree after partition and heal)"
