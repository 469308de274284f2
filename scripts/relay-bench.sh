#!/usr/bin/env bash
# A relayed initial sync against a direct one (issue 42's target: relayed
# within 2x of direct), in network namespaces this script makes: a relay
# r joined by veth pairs to a (10.79.1.0/24) and b (10.79.2.0/24); a and b
# let nothing in but replies (iptables), so b reaches a only through r.
# For the direct figure a second pair of homes syncs over a veth pair of
# its own (10.79.3.0/24), with no filter. Prints each sync's result line
# (ms, facts and frame bytes each way).
#
#   sudo scripts/relay-bench.sh [N]     (N memories, default 10000)
#
# AMOS (default: `amos` on PATH; use a release build for figures) is the
# binary to measure. Needs root, ip, iptables and python3. Nothing leaves
# the namespaces; they and the temp dir are removed afterwards.
set -euo pipefail
N=${1:-10000}
AMOS=${AMOS:-$(command -v amos)}
tag=rb$$
ns() { echo "${tag}$1"; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for n in r a b c d; do ip netns del "$(ns $n)" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for n in r a b c d; do ip netns add "$(ns $n)"; ip -n "$(ns $n)" link set lo up; done
veth() { # NS1 ADDR1 NS2 ADDR2 N
  ip link add "${tag}v$5x" netns "$(ns $1)" type veth peer name "${tag}v$5y" netns "$(ns $3)"
  ip -n "$(ns $1)" addr add "$2/24" dev "${tag}v$5x"; ip -n "$(ns $1)" link set "${tag}v$5x" up
  ip -n "$(ns $3)" addr add "$4/24" dev "${tag}v$5y"; ip -n "$(ns $3)" link set "${tag}v$5y" up
}
veth r 10.79.1.1 a 10.79.1.2 1
veth r 10.79.2.1 b 10.79.2.2 2
veth c 10.79.3.1 d 10.79.3.2 3
for n in a b; do
  ip netns exec "$(ns $n)" iptables -A INPUT -i lo -j ACCEPT
  ip netns exec "$(ns $n)" iptables -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
  ip netns exec "$(ns $n)" iptables -P INPUT DROP
done
run() { local n=$1; shift; AMOS_HOME=$work/$n AMOS_LOG=warn ip netns exec "$(ns $n)" "$AMOS" "$@"; }
id() { run "$1" --json id | python3 -c 'import json,sys; print(json.load(sys.stdin)["node_id"])'; }
serve() { local n=$1; shift; AMOS_HOME=$work/$n AMOS_LOG=info ip netns exec "$(ns $n)" "$AMOS" serve --no-mdns --sync-every 1h --no-push "$@" 2>"$work/$n.log" >/dev/null & pids+=($!); }
for n in r a b c d; do run $n init >/dev/null; done
python3 -c 'import json,sys
n = int(sys.argv[1])
json.dump({"results": [{"id": f"m-{i}", "memory": f"relay bench memory {i}: the launch checklist item {i} is done by the crew"} for i in range(n)]}, open(sys.argv[2], "w"))' "$N" "$work/m.json"
for n in a c; do
  run $n team create apollo >/dev/null
  run $n agent add alice --team apollo >/dev/null
  run $n import mem0 "$work/m.json" --as alice --share team:apollo >/dev/null
done
R=$(id r); A=$(id a); B=$(id b); C=$(id c); D=$(id d)
run r peers add "$A" --policy none --relay >/dev/null
run r peers add "$B" --policy none --relay >/dev/null
run a peers add "$R" 10.79.1.1:4747 --policy none --relay >/dev/null
run b peers add "$R" 10.79.2.1:4747 --policy none --relay >/dev/null
run a peers add "$B" --policy team:apollo --via "$R" >/dev/null
run b peers add "$A" --policy team:apollo --via "$R" >/dev/null
run c peers add "$D" --policy team:apollo >/dev/null
run d peers add "$C" 10.79.3.1:4747 --policy team:apollo >/dev/null
serve r --listen 0.0.0.0:4747
serve a --listen 10.79.1.2:4747
serve c --listen 10.79.3.1:4747
# Bounded wait for a to listen through the relay.
for _ in $(seq 1 300); do grep -q "relay: $A listens" "$work/r.log" 2>/dev/null && break; sleep 0.1; done
grep -q "relay: $A listens" "$work/r.log" || { echo "a never listened through the relay" >&2; exit 1; }
echo "direct  ($N memories):"; run d sync now "$C" --connect-timeout 10s
echo "relayed ($N memories):"; run b sync now "$A" --connect-timeout 10s
grep "relay: pipe" "$work/r.log" | tail -1
