#!/usr/bin/env bash
# serve_lifecycle.sh LIZARD - `lizard serve`'s life cycle and protocol edges on a
# tiny model: SIGTERM drains for --drain-timeout seconds, then the long stream
# ends with finish_reason "length", its session is written and the process exits
# 0 (within the deadline and a small slack); /health and new requests answer 503
# meanwhile; a second signal ends at once; clients that half-close
# (shutdown(SHUT_WR), as `nc -N` does) get their answers, whole and streamed; one
# access-log line per request (none with --no-access-log); --host takes a name.
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
LAUNCH=
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"

M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init" >&2; exit 1; }
mkdir "$TMP/sd"
SLACK=5 # seconds a drain may take beyond its deadline (one step, the session write, the exit; a busy machine)
# a stream far longer than any drain here (about 100 s in the release build); two slots keep the
# state small (a slot holds --max-tokens positions of KV cache)
LONG='{"prompt": "x", "max_tokens": 100000, "ignore_eos": true, "stream": true, "session": "SESSION"}'
SMALL=(--max-batch 2 --max-tokens 100000)

now() { date +%s.%N; }
# exit_within SECONDS: waits for the server; sets rc (124: killed past SECONDS) and took (seconds since $T0)
exit_within() {
    timeout "$1" tail --pid="$SERVER_JOB" -f /dev/null
    took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$T0" "$(now)")
    if kill -0 "$SERVER_JOB" 2>/dev/null; then
        kill -KILL "$SERVER_JOB"; wait "$SERVER_JOB" 2>/dev/null; rc=124
    else
        wait "$SERVER_JOB"; rc=$?
    fi
    SERVER_JOB=
}

# stream_end FILE: the finish_reason of its last chunk and its completion_tokens, "[DONE]" last
stream_end() {
    python3 - "$1" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert lines and lines[-1] == "data: [DONE]", lines[-1:]
last = json.loads(lines[-2][6:])
print(last["choices"][0]["finish_reason"], last["usage"]["completion_tokens"])
PY
}

# ---- SIGTERM: drain until --drain-timeout, then the stream ends with its finish_reason ----
DRAIN=8 # room for the checks below while it drains (python alone can take seconds on a loaded machine)
start_server "$TMP/a.log" --model "$M" "${SMALL[@]}" --drain-timeout $DRAIN --session-dir "$TMP/sd" ||
    { echo "FAIL: server A did not start" >&2; exit 1; }
curl -sN -o "$TMP/long1" "$URL/v1/completions" --data-binary "${LONG/SESSION/long1}" &
client=$!
wait_metric lizard_running_sequences 1 && ok || bad "long stream not running"
T0=$(now)
kill -TERM "$SERVER_PID"
wait_health 503 2 && grep -q '"status":"draining"' "$TMP/body" && ok || bad "/health while draining: $(cat "$TMP/body")"
code=$(req POST /v1/completions '{"prompt": "y", "max_tokens": 2}')
[ "$code" = 503 ] && grep -q '"code":"shutting_down"' "$TMP/body" && ok || bad "a request while draining: $code $(cat "$TMP/body")"
exit_within $((DRAIN + SLACK))
wait "$client"
echo "drain: SIGTERM with a 100000-token stream, --drain-timeout $DRAIN: exit $rc after $took s"
[ "$rc" = 0 ] && ok || bad "SIGTERM with a long stream: exit $rc after $took s (deadline $DRAIN + $SLACK)"
python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= float(sys.argv[2]) - 0.5)" "$took" $DRAIN && ok ||
    bad "the drain ended after $took s, before its deadline of $DRAIN s"
read -r reason tokens < <(stream_end "$TMP/long1" 2>/dev/null)
[ "${reason:-}" = length ] && [ "${tokens:-0}" -gt 0 ] && ok || bad "drained stream's end: '${reason:-}' ${tokens:-} $(tail -c 300 "$TMP/long1")"
[ -s "$TMP/sd/long1.lzs" ] && ok || bad "the drained stream's session was not written: $(ls "$TMP/sd")"
grep -q -- "--drain-timeout: 1 running sequences ended" "$TMP/a.log" && ok || bad "no drain line: $(cat "$TMP/a.log")"

# ---- a second signal ends the drain at once (sessions still written) ----
start_server "$TMP/b.log" --model "$M" "${SMALL[@]}" --drain-timeout 600 --session-dir "$TMP/sd" ||
    { echo "FAIL: server B did not start" >&2; exit 1; }
curl -sN -o "$TMP/long2" "$URL/v1/completions" --data-binary "${LONG/SESSION/long2}" &
client=$!
wait_metric lizard_running_sequences 1 && ok || bad "long stream not running"
kill -TERM "$SERVER_PID"
sleep 0.5
[ "$(req GET /health)" = 503 ] && ok || bad "/health while draining (B): $(cat "$TMP/body")"
T0=$(now)
kill -INT "$SERVER_PID"
exit_within $SLACK
wait "$client"
echo "drain: a second signal, --drain-timeout 600: exit $rc after $took s"
[ "$rc" = 0 ] && ok || bad "second signal: exit $rc after $took s (limit $SLACK)"
read -r reason tokens < <(stream_end "$TMP/long2" 2>/dev/null)
[ "${reason:-}" = length ] && ok || bad "stream ended by a second signal: '${reason:-}' $(tail -c 300 "$TMP/long2")"
[ -s "$TMP/sd/long2.lzs" ] && ok || bad "session not written after a second signal: $(ls "$TMP/sd")"

# ---- half-closed clients get their answers; the access log ----
start_server "$TMP/c.log" --model "$M" --max-tokens 4096 || { echo "FAIL: server C did not start" >&2; exit 1; }
python3 "$HERE/half_close.py" "$PORT" /v1/completions '{"prompt": "x", "max_tokens": 2000, "ignore_eos": true}' >"$TMP/hc1"
[ "$(head -1 "$TMP/hc1")" = "HTTP/1.1 200 OK" ] &&
    [ "$(tail -n +2 "$TMP/hc1" | python3 -c "import json,sys; print(json.load(sys.stdin)['usage']['completion_tokens'])" 2>/dev/null)" = 2000 ] &&
    ok || bad "half-closed client, whole answer: $(head -c 300 "$TMP/hc1")"
python3 "$HERE/half_close.py" "$PORT" /v1/completions \
    '{"prompt": "x", "max_tokens": 2000, "ignore_eos": true, "stream": true}' >"$TMP/hc2"
tail -n +2 "$TMP/hc2" >"$TMP/hc2.sse"
[ "$(head -1 "$TMP/hc2")" = "HTTP/1.1 200 OK" ] && [ "$(stream_end "$TMP/hc2.sse" 2>/dev/null)" = "length 2000" ] && ok ||
    bad "half-closed client, stream: $(head -c 300 "$TMP/hc2")"
req GET /health >/dev/null
stop_server && ok || bad "server C exit"
pat='^lizard serve: 127\.0\.0\.1 POST /v1/completions 200 cmpl-[0-9]+ prompt_tokens=2 completion_tokens=2000 [0-9.]+s$'
[ "$(grep -cE "$pat" "$TMP/c.log")" = 2 ] && ok || bad "access log lines: $(cat "$TMP/c.log")"
grep -qE '^lizard serve: 127\.0\.0\.1 GET /health 200 req-[0-9]+ ' "$TMP/c.log" && ok || bad "no access log line for /health"
grep -q ' 503 ' "$TMP/a.log" && ok || bad "the 503 refusals are not in the access log: $(cat "$TMP/a.log")"

start_server "$TMP/d.log" --model "$M" --no-access-log || { echo "FAIL: server D did not start" >&2; exit 1; }
req POST /v1/completions '{"prompt": "x", "max_tokens": 2}' >/dev/null
stop_server && ok || bad "server D exit"
grep -q 'POST /v1/completions' "$TMP/d.log" && bad "--no-access-log still logs: $(cat "$TMP/d.log")" || ok

# ---- --host takes a name; a name that does not resolve is refused in one line ----
"$LIZARD" serve --model "$M" --host localhost --port 0 2>"$TMP/e.log" &
SERVER_JOB=$!
for _ in $(seq 1 300); do grep -q "listening on" "$TMP/e.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/localhost:\([0-9]*\) (pid.*/\1/p' "$TMP/e.log")
[ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://localhost:$port/health")" = 200 ] && ok ||
    bad "--host localhost: $(cat "$TMP/e.log")"
kill -TERM "$SERVER_JOB"; wait "$SERVER_JOB"; SERVER_JOB=
"$LIZARD" serve --model "$M" --host no-such-host.invalid --port 0 2>"$TMP/f.log"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$TMP/f.log")" = 1 ] && grep -q -- "--host no-such-host.invalid" "$TMP/f.log" && ok ||
    bad "unresolvable --host: exit $rc, $(cat "$TMP/f.log")"

echo "serve_lifecycle: $pass passed, $fail failed"
[ $fail -eq 0 ]
