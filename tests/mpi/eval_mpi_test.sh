#!/usr/bin/env bash
# eval_mpi_test.sh - `lizard eval` through a pipeline of two and three ranks prints one process's JSON
# (perplexity and passkey) byte for byte, and bad input still ends every rank with one line and exit 2.
# Usage: eval_mpi_test.sh LIZARD SRC
set -uo pipefail
LIZARD=$1 SRC=$2
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun
M=$SRC/launch/default-model
head -c 12000 "$SRC/tests/fixtures/corpus/finetune_slice.txt" >"$TMP/text.txt"
ARGS=(eval --model "$M" --text "$TMP/text.txt" --ppl-context 128,512 --passkey --contexts 256 --trials 2 --json)
"$LIZARD" "${ARGS[@]}" >"$TMP/one.json" 2>"$TMP/one.err" && ok || bad "eval: $(tail -2 "$TMP/one.err")"
for np in 2 3; do
  run $np "$LIZARD" "${ARGS[@]}" >"$TMP/np$np.json" 2>"$TMP/np$np.err" && cmp -s "$TMP/one.json" "$TMP/np$np.json" && ok ||
    bad "mpirun -np $np eval: not one process's JSON: $(head -c 300 "$TMP/np$np.json") $(tail -3 "$TMP/np$np.err")"
done
run 2 "$LIZARD" eval --model "$M" --text "$TMP/missing.txt" >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
[ $rc -eq 2 ] && grep -q "missing.txt" "$TMP/bad.err" && ok || bad "mpirun -np 2 eval of a missing file: exit $rc, $(tail -2 "$TMP/bad.err")"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
