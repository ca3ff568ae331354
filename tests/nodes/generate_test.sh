#!/usr/bin/env bash
# generate_test.sh LIZARD - a pipeline across emulated hosts (nodes_lib.sh): `generate` on 2 and 3
# hosts, balanced and by-type, gives the ids of one process; a session saved on 3 hosts continues
# in one process with the ids of an uninterrupted run.
set -u
LIZARD=$1
. "$(dirname "$0")/nodes_lib.sh" # TMP, ok, bad (test_lib.sh), nodes_start, nodes_mpirun
nodes_start 3 # the hosts, and the tiny model $M

GEN=(generate --model "$M" --prompt "lizards cross the network" --max-tokens 12 --ignore-eos --format json
     --temperature 0.8 --seed 11)
"$LIZARD" "${GEN[@]}" >"$TMP/one" 2>"$TMP/err" || bad "one process: $(head -2 "$TMP/err")"
for n in 2 3; do
    for pl in balanced by-type; do
        nodes_mpirun $n "$LIZARD" "${GEN[@]}" --placement $pl >"$TMP/$n-$pl" 2>"$TMP/err" &&
            cmp -s "$TMP/one" "$TMP/$n-$pl" && ok ||
            bad "$n hosts, $pl: $(cat "$TMP/$n-$pl") vs $(cat "$TMP/one"): $(grep -m2 error "$TMP/err")"
    done
done

# 6 tokens on 3 hosts into a session, 6 more in one process: the 12 of the uninterrupted run
ids() { python3 -c "import json,sys; print(sum((json.load(open(f))['ids'] for f in sys.argv[1:]), []))" "$@" 2>&1 | tail -1; }
HALF=(generate --model "$M" --max-tokens 6 --ignore-eos --format json --temperature 0.8 --seed 11 --session "$TMP/s.lzs")
nodes_mpirun 3 "$LIZARD" "${HALF[@]}" --prompt "lizards cross the network" >"$TMP/h1" 2>"$TMP/err1"
"$LIZARD" "${HALF[@]}" >"$TMP/h2" 2>"$TMP/err2"
[ "$(ids "$TMP/h1" "$TMP/h2")" = "$(ids "$TMP/one")" ] && ok ||
    bad "session from 3 hosts to one: $(ids "$TMP/h1" "$TMP/h2") vs $(ids "$TMP/one"): $(grep -hm2 error "$TMP/err1" "$TMP/err2")"

# two ranks share node-a: `lizard plan --hosts` gives the by-type stages to the ranks so that fewer bytes
# cross between hosts than with the stages in rank order, and the job run with that plan gives the same ids
printf 'node-a slots=2\nnode-b slots=1\n' >"$TMP/hosts21"
"$LIZARD" plan --model "$M" --hosts "$TMP/hosts21" --placement by-type --out "$TMP/plan21" >"$TMP/plan.out" 2>&1 ||
    bad "plan --hosts: $(cat "$TMP/plan.out")"
grep -q "node-a ranks 0-1, node-b rank 2" "$TMP/plan.out" && grep -q "node-a <-> node-b" "$TMP/plan.out" && ok ||
    bad "plan --hosts output: $(tail -5 "$TMP/plan.out")"
totals=$(sed -n 's/^  total  \([0-9]*\)\( (the same stages on ranks in order: \([0-9]*\))\)\{0,1\}$/\1 \3/p' "$TMP/plan.out")
python3 -c "import sys; a, b = (sys.argv[1].split() + ['0'])[:2]; sys.exit(not (0 < int(a) <= int(b) or int(b) == 0))" \
    "$totals" && ok || bad "plan --hosts: bytes across hosts '$totals'"
NODES_HOSTFILE_USED=$TMP/hosts21 nodes_mpirun 3 "$LIZARD" "${GEN[@]}" --plan "$TMP/plan21" >"$TMP/planned" 2>"$TMP/err" &&
    cmp -s "$TMP/one" "$TMP/planned" && ok || bad "3 ranks on 2 hosts with the placed plan: $(grep -m2 error "$TMP/err")"

# bad launches end at once with one line: a host that does not answer, more ranks than slots
printf 'node-a slots=1\nnode-z slots=1\n' >"$TMP/hosts-z"
start=$(date +%s)
NODES_HOSTFILE_USED=$TMP/hosts-z nodes_mpirun 2 "$LIZARD" "${GEN[@]}" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "host node-z does not answer" "$TMP/err" &&
    [ $(($(date +%s) - start)) -le 25 ] && ok || bad "unreachable host: rc=$rc $(head -c 400 "$TMP/err")"
nodes_mpirun 4 "$LIZARD" "${GEN[@]}" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "4 ranks asked but its hosts provide 3 slots" "$TMP/err" && ok ||
    bad "more ranks than slots: rc=$rc $(head -c 400 "$TMP/err")"
"$LIZARD" plan --model "$M" --hosts "$TMP/hosts21" --ranks 4 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "hosts21: 4 ranks asked but its 2 hosts provide 3 slots" "$TMP/err" &&
    ok || bad "plan --hosts with too many ranks: rc=$rc $(cat "$TMP/err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
