#!/usr/bin/env bash
# The first hour of a new user, walked end to end on fresh homes (issue 44):
# README.md's quickstart as written, two nodes by bundle (the air gap) and by
# QUIC (a pairing code), MCP configured as the README says, the web console,
# time travel, export and import, recall that does not pad, and bad input.
# Each check prints `ok  WHAT`, or `FAIL WHAT — WHY` with the command and its
# output, and the script stops there with exit 1.
#
#   scripts/first-hour.sh
#
# AMOS (default: `amos` on PATH) is the binary walked. Needs bash, python3
# and curl. Every node lives in its own `mktemp -d` home, removed on exit
# with every process the script started; servers listen on 127.0.0.1 with
# mDNS off, so nothing leaves loopback. The README lines it runs are looked
# up in the README.md beside this script (a line the page no longer has is
# a failure: the walk follows the page).
set -euo pipefail
exec 3>&1 # the report: ok/FAIL lines go here even from inside $(…)
AMOS=${AMOS:-amos}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readme=$here/../README.md

homes=()
pids=()
scratch=$(mktemp -d)
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "${homes[@]}" "$scratch"
}
trap cleanup EXIT

# fresh VAR: a new empty home (mktemp -d, mode 0700), its path in VAR.
fresh() {
  local d
  d=$(mktemp -d)
  homes+=("$d")
  printf -v "$1" %s "$d"
}

# step WHAT … ok: one line per check; fail WHY stops the walk.
step=""
cmd=""
rc=0
out=""
err=""
step() { step=$*; }
ok() { echo "ok  $step${1:+ ($1)}" >&3; }
fail() {
  {
    echo "FAIL $step — $*"
    if [ -n "$cmd" ]; then
      echo "  \$ $cmd    (exit $rc)"
      sed 's/^/  stdout| /' "$scratch/out"
      sed 's/^/  stderr| /' "$scratch/err"
    fi
  } >&3
  exit 1
}

amos() { "$AMOS" "$@"; }

# run CMD…: run it; exit code in $rc, stdout in $out, stderr in $err.
run() {
  cmd=$(printf '%q ' "$@")
  set +e
  "$@" >"$scratch/out" 2>"$scratch/err"
  rc=$?
  set -e
  out=$(<"$scratch/out")
  err=$(<"$scratch/err")
  cat "$scratch/err" >>"$scratch/stderr-all"
}

# at HOME LINE: run README.md's command LINE (as the page writes it, prompt
# and comment left out) with AMOS_HOME=HOME, its placeholders filled in.
at() {
  local home=$1 line=$2
  if ! grep -qF -- "$line" "$readme"; then
    cmd=""
    fail "README.md has no line \`$line\`: has the page changed?"
  fi
  line=${line//<id>/${id:-}}
  line=${line//<laptop-id>/${laptop_id:-}}
  line=${line//<server-id>/${server_id:-}}
  line=${line//<key>/${key:-}}
  line=${line//amos1-…/${code:-}}
  line=${line//\/media\/usb\//$scratch/usb/}
  cmd="AMOS_HOME=$home $line"
  set +e
  (
    export AMOS_HOME=$home
    eval "$line"
  ) >"$scratch/out" 2>"$scratch/err"
  rc=$?
  set -e
  out=$(<"$scratch/out")
  err=$(<"$scratch/err")
  cat "$scratch/err" >>"$scratch/stderr-all"
}

# Checks on the last command.
exits() { [ "$rc" = "$1" ] || fail "exit $rc, expected $1"; }
out_has() { grep -qF -- "$1" <<<"$out" || fail "stdout lacks \"$1\""; }
out_lacks() { ! grep -qF -- "$1" <<<"$out" || fail "stdout holds \"$1\""; }
err_has() { grep -qF -- "$1" <<<"$err" || fail "stderr lacks \"$1\""; }
# jv VAR EXPR: VAR set to EXPR (Python, the JSON on stdout as d): a string
# as it is, anything else as JSON.
jv() {
  python3 -c 'import json,sys
d=json.loads(sys.argv[2])
v=eval(sys.argv[1])
print(v if isinstance(v,str) else json.dumps(v))' "$2" "$out" >"$scratch/j" 2>&1 ||
    fail "stdout is not the JSON expected ($2): $(<"$scratch/j")"
  printf -v "$1" %s "$(<"$scratch/j")"
}
is() { [ "$1" = "$2" ] || fail "$3: got $1, expected $2"; }
is_uuid() { [[ $1 =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]] || fail "expected a memory id, got \"$1\""; }

# started FILE PID TEXT: poll (at most 30 s) until FILE's first line holds
# TEXT, the start line of a server we launched; fail if it exits first.
started() {
  local file=$1 pid=$2 text=$3 i
  cmd=""
  for i in $(seq 300); do
    if grep -qF -- "$text" "$file" 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || fail "it exited before printing its start line: $(cat "$file" "$file.err" 2>/dev/null)"
    sleep 0.1
  done
  fail "no start line within 30 s: $(cat "$file" "$file.err" 2>/dev/null)"
}

# stop PID: SIGTERM, then its exit code in $rc.
stop() {
  local pid=$1 p keep=()
  kill -TERM "$pid"
  set +e
  wait "$pid"
  rc=$?
  set -e
  for p in "${pids[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}

# What would show a change: the digest of the replicated facts and the counts.
snapshot() { "$AMOS" digest; "$AMOS" --json status | python3 -c 'import json,sys
d=json.load(sys.stdin); print(d["seq"], d["memories_live"], d["memories_archived"], d["memories_forgotten"], d["agents"])'; }

# bad WHAT HINT ARGS…: `amos ARGS…` is bad input: exit 2, one line on
# stderr starting `amos: ` and holding HINT (if not empty), nothing on
# stdout, nothing changed.
bad() {
  local what=$1 hint=$2 before after
  shift 2
  step "bad input: $what"
  before=$(snapshot)
  run amos "$@"
  exits 2
  [ -z "$out" ] || fail "stdout not empty"
  [ "$(wc -l <"$scratch/err")" = 1 ] || fail "stderr is not one line"
  [[ $err == "amos: "* ]] || fail "stderr does not start with \`amos: \`"
  [ -z "$hint" ] || err_has "$hint"
  after=$(snapshot)
  [ "$before" = "$after" ] || fail "the store changed: $before -> $after"
  ok "$err"
}

step "the tools are here: $AMOS, python3, curl, README.md"
cmd=""
command -v "$AMOS" >/dev/null || fail "no $AMOS on PATH (set AMOS=/path/to/amos)"
command -v python3 >/dev/null || fail "no python3"
command -v curl >/dev/null || fail "no curl"
[ -f "$readme" ] || fail "no README.md beside scripts/ ($readme)"
run amos --version
exits 0
ok "$out"

# ---------------------------------------------------------------- quickstart
fresh laptop
step "quickstart: AMOS_HOME names the home (here a fresh temp dir, not ~/.local/share/amos)"
grep -qF 'export AMOS_HOME=~/.local/share/amos' "$readme" || fail "README.md's quickstart no longer exports AMOS_HOME"
export AMOS_HOME=$laptop
ok

step "quickstart: init, team apollo, agents alice and bob, project apollo-ui"
at "$laptop" 'amos init --name laptop'
exits 0
at "$laptop" 'amos init --name laptop'
exits 0
at "$laptop" 'amos team create apollo'
exits 0
at "$laptop" 'amos agent add alice --team apollo'
exits 0
at "$laptop" 'amos agent add bob --team apollo'
exits 0
at "$laptop" 'amos project create apollo-ui --team apollo'
exits 0
at "$laptop" 'amos project add apollo-ui alice'
exits 0
ok "init twice: idempotent"

step "quickstart: alice adds a team memory and a private one"
at "$laptop" 'amos add "we deploy on Tuesdays" --as alice --share team:apollo --type procedure'
exits 0
id=$out
is_uuid "$id"
at "$laptop" 'amos add "my deploy token lives in the vault" --as alice'
exits 0
private=$out
is_uuid "$private"
ok

step "quickstart: bob's search finds the team memory, not alice's private one"
at "$laptop" 'amos search "when do we deploy" --as bob'
exits 0
out_has "$id"
out_lacks "$private"
ok

step "quickstart: bob's pack holds the team memory and its report says why"
at "$laptop" 'amos pack "deploy" --as bob --budget 400 --report'
exits 0
out_has "we deploy on Tuesdays"
out_has "+ $id"
out_lacks "vault"
ok

step "quickstart: get shows the memory shared with team apollo"
at "$laptop" 'amos --json get <id> --as alice'
exits 0
jv v 'd["visibility"]'
is "$v" '["team:apollo"]' visibility
jv v 'd["type"]'
is "$v" procedure type
ok

step "quickstart: update edits the text"
at "$laptop" 'amos update <id> "we deploy on Tuesdays and Thursdays" --as alice'
exits 0
run amos get "$id" --as bob
exits 0
out_has "we deploy on Tuesdays and Thursdays"
ok

step "quickstart: history lists the creation, then the edit"
at "$laptop" 'amos history <id> --as alice'
exits 0
out_has created
out_has edit
ok

step "quickstart: after unshare bob no longer finds it, and the empty answer says so"
at "$laptop" 'amos unshare <id> team:apollo --as alice'
exits 0
run amos search "when do we deploy" --as bob
exits 0
out_lacks "$id"
err_has 'no memories visible to bob match "when do we deploy"'
ok

step "quickstart: forget erases it (get: no such memory, exit 2)"
at "$laptop" 'amos forget <id> --as alice'
exits 0
run amos get "$id" --as alice
exits 2
err_has "no such memory"
ok

step "quickstart: check and doctor pass"
at "$laptop" 'amos check && amos doctor'
exits 0
ok

# ------------------------------------------------------------- the air gap
fresh server
run amos --home "$server" init --name server
step "air gap: a second node, and a team memory on the laptop to carry"
exits 0
run amos add "the release train leaves on Fridays" --as alice --share team:apollo
exits 0
release=$out
is_uuid "$release"
ok

step "air gap: each node is told who the other is and what it may see"
at "$laptop" 'amos id'
exits 0
laptop_id=$out
run amos --home "$server" id
exits 0
server_id=$out
at "$server" 'amos peers add <laptop-id> --policy team:apollo'
exits 0
at "$laptop" 'amos peers add <server-id> --policy team:apollo'
exits 0
ok

step "air gap: a mesh key generated on the laptop and set on the server"
at "$laptop" 'amos mesh key generate'
exits 0
key=$out
[[ $key == amosk1-* ]] || fail "not a mesh key: $key"
at "$server" 'amos mesh key set <key>'
exits 0
ok

step "air gap: the laptop's bundle for the server, encrypted, imported with nothing refused"
mkdir -p "$scratch/usb"
at "$laptop" 'amos bundle export /media/usb/laptop.bndl --for <server-id>'
exits 0
out_has encrypted
at "$server" 'amos bundle import /media/usb/laptop.bndl'
exits 0
out_has " 0 refused"
ok

step "air gap: team apollo's digests are equal on both"
at "$server" 'amos digest --scope team:apollo'
exits 0
server_digest=$out
run amos digest --scope team:apollo
exits 0
is "$server_digest" "$out" "digest (server vs laptop)"
ok

step "air gap: the server's audit says nothing was refused"
at "$server" 'amos audit'
exits 0
err_has "no facts refused"
ok

step "air gap: bob, on apollo's roster but not yet an agent of the server, is told the command"
run amos --home "$server" search release --as bob
exits 2
err_has "amos agent add bob"
ok

step "air gap: adding carol to apollo on the server is refused, naming the rule and where to do it"
run amos --home "$server" agent add carol --team apollo
exits 3
err_has "origin rule"
err_has "amos agent add carol --team apollo"
run amos --home "$server" agent list --json
exits 0
out_lacks carol
ok

step "air gap: registered on the server, bob reads what the laptop shared with apollo"
at "$server" 'amos agent add bob'
exits 0
at "$server" 'amos search "release" --as bob'
exits 0
out_has "$release"
ok

# ------------------------------------------------------- pairing over QUIC
fresh desk
run amos --home "$desk" init --name desk
step "pairing: the laptop serves on loopback and says so in one start line"
exits 0
grep -qF 'amos serve --listen [::]:4747 --no-mdns --sync-every 30s' "$readme" ||
  fail "README.md's serve line changed"
# The page listens on [::]:4747; here 127.0.0.1 on a free port.
"$AMOS" serve --listen 127.0.0.1:0 --no-mdns --sync-every 30s >"$scratch/serve" 2>"$scratch/serve.err" 3>&- &
serve_pid=$!
pids+=("$serve_pid")
started "$scratch/serve" "$serve_pid" "serving node"
line=$(head -1 "$scratch/serve")
[[ $line == "serving node $laptop_id on 127.0.0.1:"*"mDNS off"* ]] || fail "start line: $line"
ok "$line"

step "pairing: the laptop invites to apollo; a fresh node joins --as bob and syncs"
at "$laptop" 'amos team invite apollo --ttl 10m'
exits 0
code=$(head -1 <<<"$out")
[[ $code == amos1-* ]] || fail "no code: $code"
at "$desk" 'amos join amos1-… --as bob'
exits 0
out_has "first sync ok"
out_has "agent bob registered on this node"
run amos --home "$desk" search release --as bob
exits 0
out_has "$release"
ok

step "pairing: a used code is refused and says what to do"
run amos --home "$desk" join "$code" --as bob
exits 2
err_has "already used"
err_has "amos team invite"
ok

step "pairing: a new team memory on the laptop reaches bob on the desk by sync now"
run amos add "the staging database moved to eu-west" --as alice --share team:apollo
exits 0
staging=$out
at "$desk" 'amos sync now'
exits 0
out_has "$laptop_id  ok"
run amos --home "$desk" search "staging database" --as bob
exits 0
out_has "$staging"
ok

step "pairing: serve stops on SIGTERM with exit 0 and says stopped"
stop "$serve_pid"
exits 0
grep -qx stopped "$scratch/serve" || fail "no \`stopped\` line: $(cat "$scratch/serve")"
cat "$scratch/serve.err" >>"$scratch/stderr-all"
ok

step "pairing: sync now to the stopped laptop fails (exit 1) and says it once"
run amos --home "$desk" sync now
exits 1
out_has unreachable
[ "$(grep -c "$laptop_id" "$scratch/out" "$scratch/err" | awk -F: '{s+=$2} END {print s}')" = 1 ] ||
  fail "the peer is named more than once"
ok

# ---------------------------------------------------------------------- MCP
step "mcp: README's line starts \`amos mcp\` with AMOS_AGENT=claude; unregistered, it is refused with the command"
grep -qF 'claude mcp add amos --env AMOS_AGENT=claude -- amos mcp' "$readme" || fail "README.md's MCP line changed"
run env AMOS_AGENT=claude "$AMOS" mcp </dev/null
exits 2
err_has "amos agent add claude"
ok

step "mcp: claude registered as the README says"
at "$laptop" 'amos agent add claude --team apollo'
exits 0
ok

cmd=""
AMOS_AGENT=claude python3 "$here/first-hour-mcp.py" "$scratch/mcp-id" "$AMOS" mcp ||
  { step "mcp"; fail "the MCP walk failed (above)"; }

step "mcp: bob on the CLI finds claude's team memory"
mcp_id=$(<"$scratch/mcp-id")
run amos search "pull requests" --as bob
exits 0
out_has "$mcp_id"
ok

# ------------------------------------------------------------------ console
step "console: starts on 127.0.0.1 and prints its URL with the token"
"$AMOS" console --listen 127.0.0.1:0 >"$scratch/console" 2>"$scratch/console.err" 3>&- &
console_pid=$!
pids+=("$console_pid")
started "$scratch/console" "$console_pid" "?token="
url=$(head -1 "$scratch/console")
[[ $url == http://127.0.0.1:*/\?token=* ]] || fail "URL: $url"
base=${url%%/\?token=*}
ok "$base"

fetch() { run curl --noproxy '*' -sS -b "$scratch/jar" -c "$scratch/jar" -L -o "$scratch/page" -w '%{http_code}' "$@"; }
step "console: the URL opens a session; the node page names the node"
fetch "$url"
exits 0
is "$out" 200 "HTTP status"
grep -qF "$laptop_id" "$scratch/page" || fail "the page does not name $laptop_id"
ok

step "console: bob's memories page finds the release memory"
fetch "$base/memories?as=bob&q=release"
exits 0
is "$out" 200 "HTTP status"
grep -qF "the release train leaves on Fridays" "$scratch/page" || fail "not on the page"
ok

step "console: without the session it answers 401"
run curl --noproxy '*' -sS -o /dev/null -w '%{http_code}' "$base/"
is "$out" 401 "HTTP status"
ok

step "console: stops on SIGTERM with exit 0"
stop "$console_pid"
exits 0
cat "$scratch/console.err" >>"$scratch/stderr-all"
ok

# ------------------------------------------------------------- time travel
step "time: a memory valid from 30 days ago is found at -7d"
run amos add "the api gateway runs on nginx" --as alice --share team:apollo --valid-from -30d
exits 0
nginx=$out
run amos search "api gateway" --as bob --valid-at -7d
exits 0
out_has "$nginx"
ok

bad "--valid-at 7d (a bare duration) is refused with the sign it meant" "did you mean -7d" \
  search "api gateway" --as bob --valid-at 7d
bad "--valid-to 7d is refused with +7d" "did you mean +7d" add "a lease" --as alice --valid-to 7d

step "time: --expires 7d is a lifetime, and accepted"
run amos --json add "the demo tenant is deleted next week" --as alice --expires 7d
exits 0
jv v 'd["id"]'
run amos --json get "$v" --as alice
exits 0
jv v 'd["expires"] is not None'
is "$v" true "has an expiry"
ok

bad "supersede with a valid-from before the old memory's start is refused" "would end it before it starts" \
  supersede "$nginx" "the api gateway runs on envoy" --as alice --valid-from -40d

step "time: supersede from 2 days ago; -7d sees nginx, now sees envoy"
run amos supersede "$nginx" "the api gateway runs on envoy" --as alice --valid-from -2d
exits 0
envoy=$out
is_uuid "$envoy"
run amos search "api gateway" --as bob --valid-at -7d
exits 0
out_has "$nginx"
out_lacks "$envoy"
run amos search "api gateway" --as bob --valid-at now
exits 0
out_has "$envoy"
out_lacks "$nginx"
run amos timeline --as bob --since -60d
exits 0
out_has "superseded  $nginx"
ok

step "time: --valid-at before anything began finds nothing, and says why"
run amos search "api gateway" --as bob --valid-at -60d
exits 0
[ -z "$out" ] || fail "stdout not empty"
err_has "a memory is valid from its creation unless --valid-from says otherwise"
ok

# -------------------------------------------------------- export and import
step "export: alice's memories to a file"
run amos --json export --agent alice "$scratch/alice.jsonl"
exits 0
jv exported 'd["memories"]'
[ "$exported" -ge 5 ] || fail "only $exported memories"
ok "$exported memories"

step "import: the export read back into the node that made it writes nothing"
before=$(snapshot)
run amos --json import amos "$scratch/alice.jsonl" --as alice
exits 0
jv v 'd["memories"]'
is "$v" 0 "memories imported"
jv v 'd["facts"]'
is "$v" 0 "facts written"
jv v 'd["memories_held"]'
is "$v" "$exported" "memories held"
is "$(snapshot)" "$before" "digest and counts"
run amos --json import amos "$scratch/alice.jsonl" --as alice
exits 0
jv v 'd["facts"]'
is "$v" 0 "facts written the second time"
ok

step "import: into a fresh node, the supersession comes along (nginx superseded by envoy's copy)"
fresh elsewhere
run amos --home "$elsewhere" init --name elsewhere
exits 0
run amos --home "$elsewhere" --json import amos "$scratch/alice.jsonl"
exits 0
jv v 'd["memories"]'
is "$v" "$exported" "memories imported"
run amos --home "$elsewhere" --json list --as alice --limit 100
exits 0
jv copy_envoy '[m["id"] for m in d["memories"] if m["content"] == "the api gateway runs on envoy"]'
jv v '[m["superseded_by"] for m in d["memories"] if m["content"] == "the api gateway runs on nginx"]'
is "$v" "$copy_envoy" "nginx superseded_by"
ok

# -------------------------------------------------- recall that does not pad
step "recall: more team memories, on unrelated subjects"
for text in \
  "refunds over 500 euros go through Stripe and need a second approver" \
  "the office wifi password rotates every quarter" \
  "design reviews happen on Wednesday afternoons" \
  "the mobile app is built with Flutter" \
  "customer support answers within four business hours" \
  "the data warehouse is Snowflake, loaded nightly" \
  "new hires get a laptop from IT on their first day" \
  "the marketing site is hosted on Netlify"; do
  run amos add "$text" --as alice --share team:apollo
  exits 0
done
run amos --json list --as bob --limit 100
exits 0
jv visible 'len(d["memories"])'
[ "$visible" -ge 11 ] || fail "bob sees only $visible"
ok "bob sees $visible memories"

step "recall: a pack for an unrelated question does not return every memory bob can see"
run amos --json pack "what is the capital of mongolia" --as bob --report
exits 0
jv items 'len(d["items"])'
[ "$items" -lt "$visible" ] || fail "the pack holds all $items of $visible memories"
ok "$items of $visible"

step "recall: a pack for a related question holds the memory it asks about"
run amos --json pack "who approves a large refund" --as bob
exits 0
jv v 'any("Stripe" in i["content"] for i in d["items"])'
is "$v" true "the refund memory in the pack"
jv items 'len(d["items"])'
ok "$items items"

# ------------------------------------------------------------- bad input
bad "an empty text" "" add "" --as alice
bad "an unknown agent names the command that registers it" "amos agent add nobody" add "hello" --as nobody
bad "a malformed scope" "use private, global" add "hello" --as alice --share tema:apollo
bad "an unknown team" "nope" add "hello" --as alice --share team:nope
bad "--as before the command says where it goes" "goes after the command" --as alice search deploy
bad "-k that is not a number" "many" search deploy --as bob -k many
bad "an importance out of range" "between 0 and 1" add "hello" --as alice --importance 7
bad "a mistyped pairing code" "" join amos1-notacode --as bob
bad "a memory id that does not exist" "no such memory" get 01a24a24-0000-7000-8000-000000000000 --as alice

step "refused: bob sharing alice's memory exits 3, names the rule and who may"
before=$(snapshot)
run amos share "$release" global --as bob
exits 3
err_has "only the owner (alice)"
is "$(snapshot)" "$before" "digest and counts"
ok

# ----------------------------------------------------------------- logs
step "logs: no colour codes on any stderr seen here (not a terminal)"
cmd=""
! grep -q $'\x1b' "$scratch/stderr-all" || fail "an escape sequence on stderr"
ok

echo "the first hour: every check passed"
