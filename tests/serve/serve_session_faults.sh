#!/usr/bin/env bash
# serve_session_faults.sh LIZARD - sessions through faults: a server killed
# (SIGKILL) while it continues a session leaves the session's last version in
# --session-dir, whole, and it loads; temp files of killed saves are removed
# at start (a live writer's stay), by `lizard serve` and by `lizard generate
# --session`; a session write that fails answers its own client with its own
# session name only (no path), and /metrics' session counts stay true;
# --session-per-key keeps each key's sessions apart and no key on disk.
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
LAUNCH=
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"

ids_of() { python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))" 2>/dev/null; }
count_lzs() { find "$1" -maxdepth 1 -name '*.lzs' | wc -l; }
dead_pid() { sh -c 'echo $$' ; } # a process that has exited

P1=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16
P2=7,8,9,10
M=$TMP/lizard
"$LIZARD" init --config tiny-lizard --out "$M" --seed 1 >/dev/null 2>&1 || { bad "init"; exit 1; }

# 1. stale temp files: a dead writer's go at start, a live one's ($$, this shell) stay
D=$TMP/disk
mkdir "$D"
dead=$(dead_pid)
touch "$D/s1.lzs.tmp.$dead" "$D/s1.lzs.tmp.$$" "$D/notes.tmp.$dead"
mkdir "$D/x.lzs.tmp.$dead" # a folder named like a dead writer's temp file: not one, left alone
start_server "$TMP/a.log" --model "$M" --session-memory 1 --session-dir "$D" --max-tokens 1000000 ||
    { bad "server A did not start: $(tail -2 "$TMP/a.log")"; exit 1; }
[ ! -e "$D/s1.lzs.tmp.$dead" ] && [ -e "$D/s1.lzs.tmp.$$" ] && [ -e "$D/notes.tmp.$dead" ] && [ -d "$D/x.lzs.tmp.$dead" ] &&
    ok || bad "serve start: stale temp files: $(ls "$D")"
rm -f "$D/s1.lzs.tmp.$$" "$D/notes.tmp.$dead"
rmdir "$D/x.lzs.tmp.$dead"

# 2. SIGKILL while a session is continued: its previous version stays and loads
A1=$(session_ids "$P1" 6 s1)
[ -f "$D/s1.lzs" ] && ok || bad "s1 not spilled: $(ls "$D")"
cp "$D/s1.lzs" "$TMP/s1-before.lzs"
curl -sN -o "$TMP/stream" -H 'Content-Type: application/json' "$URL/v1/completions" \
    -d "{\"prompt\": [$P2], \"max_tokens\": 1000000, \"ignore_eos\": true, \"stream\": true, \"session\": \"s1\"}" &
CURL_JOB=$!
wait_metric lizard_running_sequences 1 && ok || bad "the continuing request did not start"
kill -KILL "$SERVER_JOB"; wait "$SERVER_JOB" 2>/dev/null; SERVER_JOB=
wait "$CURL_JOB" 2>/dev/null
[ -f "$D/s1.lzs" ] && cmp -s "$D/s1.lzs" "$TMP/s1-before.lzs" && ok ||
    bad "after SIGKILL the session's last version is gone or changed: $(ls "$D")"
want=$(generate_ids "$P1,$A1,$P2" 6)
got=$("$LIZARD" generate --model "$M" --session "$D/s1.lzs" --ids "$P2" --max-tokens 6 --format json --ignore-eos \
    2>"$TMP/gen.err" | ids_of)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "the kept session does not continue: '$got' vs '$want' $(cat "$TMP/gen.err")"

# 3. lizard generate --session: a killed run leaves the file as it was; a dead writer's temp goes
cp "$TMP/s1-before.lzs" "$TMP/cli.lzs"
mkdir "$TMP/cli2.lzs.tmp.$dead" # a folder of a temp file's name does not stop generate
"$LIZARD" generate --model "$M" --session "$TMP/cli2.lzs" --ids "$P2" --max-tokens 2 >/dev/null 2>"$TMP/gen2.err" &&
    [ -f "$TMP/cli2.lzs" ] && [ -d "$TMP/cli2.lzs.tmp.$dead" ] && ok ||
    bad "generate --session beside a folder named like a temp file: $(cat "$TMP/gen2.err")"
touch "$TMP/cli.lzs.tmp.$dead" "$TMP/other.lzs.tmp.$dead"
"$LIZARD" generate --model "$M" --session "$TMP/cli.lzs" --ids "$P2" --max-tokens 1000000 --ignore-eos >/dev/null 2>&1 &
GEN_JOB=$!
for _ in $(seq 1 100); do [ ! -e "$TMP/cli.lzs.tmp.$dead" ] && break; sleep 0.05; done
sleep 0.3
kill -KILL "$GEN_JOB"; wait "$GEN_JOB" 2>/dev/null
[ ! -e "$TMP/cli.lzs.tmp.$dead" ] && [ -e "$TMP/other.lzs.tmp.$dead" ] && ok ||
    bad "generate --session: stale temps: $(ls "$TMP" | grep tmp)"
cmp -s "$TMP/cli.lzs" "$TMP/s1-before.lzs" && ok || bad "generate --session killed: the file changed"

# 4. a failed write: the client hears of its own session only; the counts stay true
S=$(stat -c %s "$TMP/s1-before.lzs")
D3=$TMP/fail
mkdir "$D3"
start_server "$TMP/c.log" --model "$M" --session-memory $((S * 3 / 2)) --session-dir "$D3" ||
    { bad "server C did not start"; exit 1; }
mkdir "$D3/alice.lzs.tmp.$SERVER_PID" # alice's save cannot be written
session_ids "$P1" 6 alice >/dev/null && ok || bad "alice (in memory) failed"
code=$(req POST /v1/completions "{\"prompt\": [$P1], \"max_tokens\": 6, \"session\": \"bob\"}")
msg=$(jget "$TMP/body" "d['error']['message']")
[ "$code" = 500 ] && [[ "$msg" == *bob* ]] && [[ "$msg" != *alice* ]] && [[ "$msg" != */* ]] && ok ||
    bad "failed write: $code '$msg'"
wait_metric lizard_sessions_in_memory 1 && wait_metric lizard_sessions_on_disk 0 && [ "$(count_lzs "$D3")" = 0 ] && ok ||
    bad "counts after a failed write: $(metric lizard_sessions_in_memory) in memory, $(metric lizard_sessions_on_disk) on disk, $(count_lzs "$D3") files"
rmdir "$D3/alice.lzs.tmp.$SERVER_PID"
session_ids "$P1" 6 carol >/dev/null && ok || bad "carol after the folder came back"
session_ids "$P1" 6 bob >/dev/null && ok || bad "bob after the folder came back"
wait_metric lizard_sessions_in_memory 1 && wait_metric lizard_sessions_on_disk 2 && [ "$(count_lzs "$D3")" = 2 ] && ok ||
    bad "counts: $(metric lizard_sessions_in_memory) in memory, $(metric lizard_sessions_on_disk) on disk, $(count_lzs "$D3") files"
stop_server && ok || bad "server C exit"
[ "$(count_lzs "$D3")" = 3 ] && ok || bad "after shutdown: $(ls "$D3")"

# 5. --session-per-key: one key's session is not another's; no key on disk; a session needs a key
D4=$TMP/keyed
mkdir "$D4"
start_server "$TMP/d.log" --model "$M" --session-memory 1 --session-dir "$D4" --session-per-key ||
    { bad "server D did not start"; exit 1; }
K1=(-H "Authorization: Bearer sk-first-SECRET")
K2=(-H "Authorization: Bearer sk-second-SECRET")
B1=$(session_ids "$P1" 6 chat "${K1[@]}")
B2=$(session_ids "$P2" 6 chat "${K1[@]}")
C2=$(session_ids "$P2" 6 chat "${K2[@]}") # a fresh "chat" for the second key
[ -n "$B1" ] && [ "$B2" = "$want" ] && ok || bad "per-key session does not continue: $B2 vs $want"
fresh=$(generate_ids "$P2" 6)
[ -n "$C2" ] && [ "$C2" = "$fresh" ] && ok || bad "the second key continued the first key's session: $C2 vs $fresh"
[ "$(count_lzs "$D4")" = 2 ] && ! ls "$D4" | grep -q SECRET && ! grep -rq SECRET "$D4" && ok ||
    bad "keyed files: $(ls "$D4")"
code=$(req POST /v1/completions "{\"prompt\": [$P2], \"max_tokens\": 2, \"session\": \"chat\"}")
[ "$code" = 401 ] && [ "$(jget "$TMP/body" "d['error']['param']")" = session ] && ok || bad "session without a key: $code"
stop_server && ok || bad "server D exit"

echo "serve_session_faults: $pass passed, $fail failed"
[ $fail -eq 0 ]
