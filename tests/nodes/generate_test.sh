#!/usr/bin/env bash
# generate_test.sh LIZARD - a pipeline across emulated hosts (nodes_lib.sh): `generate` on 2 and 3
# hosts, balanced and by-type, gives the ids of one process; a session saved on 3 hosts continues
# in one process with the ids of an uninterrupted run.
set -u
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun
require_mpirun
. "$(dirname "$0")/nodes_lib.sh"
nodes_up 3

M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" >/dev/null 2>&1 || { bad "init tiny-hybrid"; exit 1; }
GEN=(generate --model "$M" --prompt "lizards cross the network" --max-tokens 12 --ignore-eos --format json
     --temperature 0.8 --seed 11)
"$LIZARD" "${GEN[@]}" >"$TMP/one" 2>"$TMP/err" || bad "one process: $(head -2 "$TMP/err")"
for n in 2 3; do
    for pl in balanced by-type; do
        nodes_mpirun -np $n "$LIZARD" "${GEN[@]}" --placement $pl >"$TMP/$n-$pl" 2>"$TMP/err" &&
            cmp -s "$TMP/one" "$TMP/$n-$pl" && ok ||
            bad "$n hosts, $pl: $(cat "$TMP/$n-$pl") vs $(cat "$TMP/one"): $(grep -m2 error "$TMP/err")"
    done
done

# 6 tokens on 3 hosts into a session, 6 more in one process: the 12 of the uninterrupted run
ids() { python3 -c "import json,sys; print(sum((json.load(open(f))['ids'] for f in sys.argv[1:]), []))" "$@" 2>&1 | tail -1; }
HALF=(generate --model "$M" --max-tokens 6 --ignore-eos --format json --temperature 0.8 --seed 11 --session "$TMP/s.lzs")
nodes_mpirun -np 3 "$LIZARD" "${HALF[@]}" --prompt "lizards cross the network" >"$TMP/h1" 2>"$TMP/err1"
"$LIZARD" "${HALF[@]}" >"$TMP/h2" 2>"$TMP/err2"
[ "$(ids "$TMP/h1" "$TMP/h2")" = "$(ids "$TMP/one")" ] && ok ||
    bad "session from 3 hosts to one: $(ids "$TMP/h1" "$TMP/h2") vs $(ids "$TMP/one"): $(grep -hm2 error "$TMP/err1" "$TMP/err2")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
