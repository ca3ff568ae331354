#!/usr/bin/env bash
# fp8_mpi_test.sh - --dtype fp8 through a pipeline of two ranks gives one process's logits bit for bit
# (each rank quantizes its own layers at load). Usage: fp8_mpi_test.sh LIZARD SRC
set -uo pipefail
LIZARD=$1 SRC=$2
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun
M=$SRC/tests/fixtures/hybrid50/model
IDS=305,265,245,226,40,81,264,106,271,56,111,312,163,267,192,21,108,160,198,315,234,107,275,134,108
"$LIZARD" forward --model "$M" --ids $IDS --logits-out "$TMP/one.npy" --dtype fp8 >/dev/null 2>"$TMP/one.err" && ok ||
  bad "forward --dtype fp8: $(tail -2 "$TMP/one.err")"
run 2 "$LIZARD" forward --model "$M" --ids $IDS --logits-out "$TMP/two.npy" --dtype fp8 >/dev/null 2>"$TMP/two.err" &&
  cmp -s "$TMP/one.npy" "$TMP/two.npy" && ok ||
  bad "mpirun -np 2 forward --dtype fp8: not one process's logits: $(tail -3 "$TMP/two.err")"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
