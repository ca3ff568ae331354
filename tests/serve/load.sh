#!/usr/bin/env bash
# load.sh LIZARD [NP] - 64 concurrent streaming clients (load_test.py, a second
# process) for LZ_SERVE_LOAD_SECONDS (default 30) against `lizard serve`: zero
# errors, every request answered, p50/p99 latency printed; then the server's
# queue is empty, no sequence holds a slot, and SIGTERM ends it with 0.
set -u
LIZARD=$1
NP=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
SECONDS_LOAD=${LZ_SERVE_LOAD_SECONDS:-30}
CLIENTS=${LZ_SERVE_LOAD_CLIENTS:-64}
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
TMP=$(mktemp -d)
LAUNCH=
if [ -n "$NP" ]; then
    command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export OMPI_MCA_orte_tmpdir_base="$TMP" # its own Open MPI session folders (suites run side by side)
    LAUNCH="mpirun -np $NP"
fi
. "$HERE/lib.sh"
"$LIZARD" init --config tiny-hybrid --out "$TMP/tiny" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init" >&2; exit 1; }
start_server "$TMP/server.log" --model "$TMP/tiny" --max-batch 16 --queue-size 128 ||
    { echo "FAIL: server did not start" >&2; exit 1; }
python3 "$HERE/load_test.py" "$PORT" "$SECONDS_LOAD" "$CLIENTS" && ok || bad "load test"
wait_metric lizard_running_sequences 0 && wait_metric lizard_queue_depth 0 && ok || bad "slots or queue not empty after the load"
curl -s "$URL/metrics" | grep -E '^lizard_(requests_total\{status="200"\}|generation_tokens_total|time_to_first_token_seconds_(sum|count)) '
stop_server && ok || bad "SIGTERM: exit code $?"
echo "load${NP:+ (mpirun -np $NP)}: $pass passed, $fail failed"
[ $fail -eq 0 ]
