#!/usr/bin/env bash
# serve_rank_fail_mpi.sh LIZARD - a failed pipeline rank ends the streams in progress with an error event,
# not a cut connection: under `mpirun -np 2 lizard serve`, with a stream running,
#   - rank 1 stopped (SIGSTOP): rank 0's watchdog ends the job after the rank timeout (4 s here) and the
#     stream's last events are an error naming the silent rank, then [DONE];
#   - rank 1 killed (SIGKILL): mpirun ends the job (SIGTERM to rank 0, SIGKILL a second later) and the
#     stream's last events are an error saying so, then [DONE].
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
require_mpirun
export LIZARD_STEP_TIMEOUT=4
LAUNCH="mpirun -np 2 -x LIZARD_STEP_TIMEOUT"
worker=
trap '[ -n "$worker" ] && kill -KILL "$worker" 2>/dev/null; [ -n "${SERVER_JOB:-}" ] && kill -KILL "$SERVER_JOB" 2>/dev/null; rm -rf "$TMP"' EXIT

M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init" >&2; exit 1; }

# fail_rank SIGNAL NEEDLE: a stream running, SIGNAL to rank 1; the stream ends with an error event holding
# NEEDLE, then [DONE]
fail_rank() {
    local sig=$1 needle=$2
    start_server "$TMP/$sig.log" --model "$M" --max-batch 2 --max-tokens 100000 ||
        { bad "$sig: server did not start"; return; }
    curl -sN -o "$TMP/$sig.stream" "$URL/v1/completions" \
        --data-binary '{"prompt": "x", "max_tokens": 100000, "ignore_eos": true, "stream": true}' &
    local client=$!
    wait_metric lizard_running_sequences 1 || bad "$sig: the stream did not start"
    worker=$(pgrep -P "$SERVER_JOB" | grep -vx "$SERVER_PID" | head -1)
    [ -n "$worker" ] || { bad "$sig: no worker rank under mpirun $SERVER_JOB"; return; }
    kill "-$sig" "$worker"
    wait "$client"
    wait "$SERVER_JOB" 2>/dev/null
    SERVER_JOB=
    kill -KILL "$worker" 2>/dev/null
    worker=
    python3 - "$TMP/$sig.stream" "$needle" <<'PY' && ok || bad "$sig: the stream's end: $(tail -c 600 "$TMP/$sig.stream")"
import json, sys
events = [e[len("data: "):] for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: ")]
assert len(events) >= 3 and events[-1] == "[DONE]", events[-3:]
tokens = [json.loads(e) for e in events[:-2]]
assert all("choices" in t and t["choices"][0]["finish_reason"] is None for t in tokens), "a token event"
err = json.loads(events[-2])["error"]
assert err["code"] == "pipeline_failed" and sys.argv[2] in err["message"], err
print(f"{len(tokens)} token events, then: {err['message']}")
PY
}
fail_rank STOP "the pipeline failed (rank 0 of 2"
fail_rank KILL "the pipeline's launcher (mpirun) is ending the job"

echo "serve_rank_fail_mpi: $pass passed, $fail failed"
[ $fail -eq 0 ]
