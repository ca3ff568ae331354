# lib.sh - shared by the serve tests: start `lizard serve` on a free port,
# send requests with curl, read JSON with python3, stop with SIGTERM.
# Needs LIZARD, TMP and LAUNCH (empty, or an mpirun prefix) set by the caller.
# The counters come from tests/test_lib.sh; expect_error here is the HTTP one.

. "$(dirname "${BASH_SOURCE[0]}")/../test_lib.sh"
# at exit: a server still running is killed, then $TMP removed
trap '[ -n "${SERVER_JOB:-}" ] && kill -KILL "$SERVER_JOB" 2>/dev/null; rm -rf "$TMP"' EXIT


# start_server LOG ARGS...: waits for the "listening" line; sets PORT, URL, SERVER_PID (rank 0), SERVER_JOB
start_server() {
    local log=$1; shift
    $LAUNCH "$LIZARD" serve "$@" --port 0 >/dev/null 2>"$log" &
    SERVER_JOB=$!
    for _ in $(seq 1 600); do
        grep -q "listening on" "$log" 2>/dev/null && break
        kill -0 "$SERVER_JOB" 2>/dev/null || { echo "server exited: $(cat "$log")" >&2; return 1; }
        sleep 0.1
    done
    PORT=$(sed -n 's/.*listening on http:\/\/[0-9.]*:\([0-9]*\) (pid.*/\1/p' "$log")
    SERVER_PID=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$log")
    URL=http://127.0.0.1:$PORT
    [ -n "$PORT" ] && [ -n "$SERVER_PID" ]
}

# stop_server: SIGTERM to rank 0, then its exit code (124 when it has not ended within 120 s)
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 1200); do
        kill -0 "$SERVER_JOB" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVER_JOB" 2>/dev/null; then
        kill -KILL "$SERVER_JOB" 2>/dev/null
        wait "$SERVER_JOB" 2>/dev/null
        return 124
    fi
    wait "$SERVER_JOB"
}

# req METHOD PATH [BODY] [curl args...]: body to $TMP/body, prints the HTTP status
req() {
    local method=$1 path=$2 body=${3-}
    shift 2; [ $# -gt 0 ] && shift
    if [ -n "$body" ]; then
        curl -s -o "$TMP/body" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
            --data-binary "$body" "$@" "$URL$path"
    else
        curl -s -o "$TMP/body" -w '%{http_code}' -X "$method" "$@" "$URL$path"
    fi
}

# jget FILE EXPR: a python expression over the JSON document `d`
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# metric NAME: the value of one line of /metrics
metric() { curl -s "$URL/metrics" | awk -v n="$1" '$1 == n {print $2}'; }

# wait_metric NAME VALUE: up to 30 s
wait_metric() {
    for _ in $(seq 1 300); do
        [ "$(metric "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# generate_ids PROMPT_IDS MAX_TOKENS [generate args]: greedy ids of `lizard generate --model $M`
generate_ids() {
    local ids=$1 n=$2; shift 2
    "$LIZARD" generate --model "$M" --ids "$ids" --max-tokens "$n" --format json --ignore-eos "$@" 2>/dev/null |
        python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))" 2>/dev/null
}

# session_ids PROMPT_IDS MAX_TOKENS SESSION [curl args]: greedy ids through the server, kept under SESSION
session_ids() {
    local ids=$1 n=$2 name=$3; shift 3
    local code; code=$(req POST /v1/completions "{\"prompt\": [$ids], \"max_tokens\": $n, \"ignore_eos\": true,
        \"return_token_ids\": true, \"temperature\": 0, \"session\": \"$name\"}" "$@")
    [ "$code" = 200 ] || { echo "status $code: $(head -c 300 "$TMP/body")" >&2; return 1; }
    jget "$TMP/body" "','.join(map(str, d['choices'][0]['token_ids']))"
}

# wait_health STATUS SECONDS: polls /health until it answers STATUS (its body in $TMP/body); false if it never does
wait_health() {
    local code=
    for _ in $(seq 1 $(($2 * 10))); do
        code=$(req GET /health)
        [ "$code" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# expect_error STATUS PARAM_OR_DASH METHOD PATH BODY [curl args]: the status and an OpenAI error object
expect_error() {
    local want=$1 param=$2; shift 2
    local got; got=$(req "$@")
    local shape; shape=$(jget "$TMP/body" "sorted(d['error'].keys()) == ['code','message','param','type'] and (d['error']['param'] or '-')")
    if [ "$got" = "$want" ] && [ "$shape" = "$param" ]; then ok
    else bad "expected $want (param $param) from $1 $2 ${3:0:80}: got $got, $(head -c 300 "$TMP/body")"; fi
}
