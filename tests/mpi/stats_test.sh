#!/usr/bin/env bash
# stats_test.sh - generate --stats under mpirun counts the state of every rank's layers (2 softmax +
# 2 Lizard in tiny-hybrid), as one process does, not rank 0's alone. Usage: stats_test.sh LIZARD
set -uo pipefail
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun
M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" >/dev/null
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 3 --stats >/dev/null 2>"$TMP/one"
run 2 "$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 3 --stats >/dev/null 2>"$TMP/two" && ok ||
  bad "mpirun generate --stats: $(tail -2 "$TMP/two")"
grep -q "softmax KV .*(2 layers) | lizard GLA .*(2 layers)" "$TMP/two" && ok ||
  bad "--stats under mpirun: $(grep stats "$TMP/two" | head -1)"
[ "$(grep '^lizard stats' "$TMP/one")" = "$(grep '^lizard stats' "$TMP/two")" ] && ok ||
  bad "--stats: 2 ranks and one process differ: $(grep stats "$TMP/two" | head -1) / $(grep stats "$TMP/one" | head -1)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
