#!/usr/bin/env bash
# serve_test.sh LIZARD - `lizard serve` across 3 emulated hosts (nodes_lib.sh): rank 0 on node-a
# listens on its link; curl in the root namespace reaches it through the bridge while the layers run
# on node-b and node-c; the answers equal one process's; SIGTERM to rank 0 during a request drains it
# (the request finishes) and the whole job exits 0.
set -u
LIZARD=$1
. "$(dirname "$0")/nodes_lib.sh" # TMP, ok, bad (test_lib.sh), nodes_start, nodes_mpirun
nodes_start 3 # the hosts, and the tiny model $M

BODY='{"prompt": [5, 6, 7], "max_tokens": 10, "temperature": 0, "ignore_eos": true}'
ids() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'])" "$1" 2>&1 | tail -1; }

# the reference: one process on this host's loopback
"$LIZARD" serve --model "$M" --port 0 >/dev/null 2>"$TMP/one.log" &
one=$!
for _ in $(seq 1 100); do grep -q "listening on" "$TMP/one.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/[0-9.]*:\([0-9]*\) .*/\1/p' "$TMP/one.log")
curl -s -m 30 -H 'Content-Type: application/json' -d "$BODY" "http://127.0.0.1:$port/v1/completions" >"$TMP/one.json"
kill -TERM $one; wait $one

NODES_TIMEOUT=200 nodes_mpirun 3 "$LIZARD" serve --model "$M" --host "$NODES_NET.1" --port 0 \
    --placement balanced --max-tokens 1000 >/dev/null 2>"$TMP/serve.log" &
job=$!
for _ in $(seq 1 300); do grep -q "listening on" "$TMP/serve.log" && break; sleep 0.1; done
url=http://$NODES_NET.1:$(sed -n 's/.*listening on http:\/\/[0-9.]*:\([0-9]*\) .*/\1/p' "$TMP/serve.log")
rank0=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$TMP/serve.log")
[ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && ok || bad "health through the bridge: $(cat "$TMP/serve.log")"
curl -s -m 30 -H 'Content-Type: application/json' -d "$BODY" "$url/v1/completions" >"$TMP/three.json"
[ -s "$TMP/three.json" ] && [ "$(ids "$TMP/three.json")" = "$(ids "$TMP/one.json")" ] && ok ||
    bad "3 hosts answer $(cat "$TMP/three.json") vs one process $(cat "$TMP/one.json")"
# rank 0 really is on node-a and the layers elsewhere: each host runs one lizard
for h in node-a node-b node-c; do
    n=$(nodes_lizards $h)
    [ "$n" = 1 ] && ok || bad "$h runs $n lizard processes"
done

# SIGTERM in the middle of a long request: it finishes, then every rank ends with 0
LONG='{"prompt": [5, 6, 7], "max_tokens": 600, "temperature": 0, "ignore_eos": true}'
curl -sS -m 60 -H "Content-Type: application/json" -d "$LONG" "$url/v1/completions" >"$TMP/long.json" 2>"$TMP/curl.err" &
client=$!
sleep 0.5
kill -TERM "$rank0"
wait $client
wait $job
rc=$?
n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['usage']['completion_tokens'])" "$TMP/long.json" 2>&1)
[ $rc -eq 0 ] && [ "$n" = 600 ] && ok || bad "drain: rc=$rc, $n tokens: $(tail -3 "$TMP/serve.log")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
