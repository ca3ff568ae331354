#!/usr/bin/env bash
# serve_health_mpi.sh LIZARD - /health tells a frozen pipeline: under
# `mpirun -np 2 lizard serve`, with a stream running, a stopped rank 1 (SIGSTOP)
# leaves rank 0's engine step unfinished; /health answers 503 ("stalled") once
# that step has run past --health-step-timeout, and 200 again after SIGCONT.
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
require_mpirun
LAUNCH="mpirun -np 2"
worker=
trap '[ -n "$worker" ] && kill -CONT "$worker" 2>/dev/null; [ -n "${SERVER_JOB:-}" ] && kill -KILL "$SERVER_JOB" 2>/dev/null; rm -rf "$TMP"' EXIT

M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init" >&2; exit 1; }
LIMIT=2
start_server "$TMP/a.log" --model "$M" --max-batch 2 --max-tokens 100000 --health-step-timeout $LIMIT ||
    { echo "FAIL: server did not start" >&2; exit 1; }
[ "$(req GET /health)" = 200 ] && ok || bad "/health at start: $(cat "$TMP/body")"
curl -sN -o "$TMP/long" "$URL/v1/completions" \
    --data-binary '{"prompt": "x", "max_tokens": 100000, "ignore_eos": true, "stream": true}' &
client=$!
wait_metric lizard_running_sequences 1 && ok || bad "long stream not running"
# the rank that is not rank 0, among mpirun's children
worker=$(pgrep -P "$SERVER_JOB" | grep -vx "$SERVER_PID" | head -1)
[ -n "$worker" ] || { bad "no worker rank under mpirun $SERVER_JOB"; exit 1; }
[ "$(req GET /health)" = 200 ] && ok || bad "/health while generating: $(cat "$TMP/body")"
t0=$(date +%s.%N)
kill -STOP "$worker"
wait_health 503 30
took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
echo "health: rank 1 stopped, --health-step-timeout $LIMIT: /health 503 after $took s"
grep -q '"status":"stalled"' "$TMP/body" && ok || bad "/health with rank 1 stopped: $(cat "$TMP/body")"
kill -CONT "$worker"
worker=
wait_health 200 10 && ok || bad "/health after SIGCONT: $(cat "$TMP/body")"
kill "$client" 2>/dev/null; wait "$client" 2>/dev/null
stop_server && ok || bad "SIGTERM: exit code $?"

echo "serve_health_mpi: $pass passed, $fail failed"
[ $fail -eq 0 ]
