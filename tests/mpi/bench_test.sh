#!/usr/bin/env bash
# bench_test.sh - `lizard bench` in one process and under mpirun -np 2 runs the same engine code and
# reports in one format: the same header, the same result line (tok/s, bound, share, mem, ranks,
# placement, load) and the same JSON keys for prompt and decode rows, bound_tok_s null where no
# ceilings are measured (the CPU; --no-ceilings); the per-rank lines under mpirun only; bad input one
# error line (per rank) and exit 2 in both; --state and --linear-shapes in one process, refused under
# mpirun. (The bound's figures: tests/unit/test_bench_report.c.) Usage: bench_test.sh LIZARD
set -uo pipefail
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error, require_mpirun, run
require_mpirun
ARGS=(bench --shape tiny-hybrid --prompt 40 --batch 1,3 --context 24 --steps 2 --prefill-chunk 16)

"$LIZARD" "${ARGS[@]}" --json "$TMP/one.jsonl" >"$TMP/one" 2>"$TMP/one.err" && ok ||
  bad "one process: $(cat "$TMP/one.err")"
run 2 "$LIZARD" "${ARGS[@]}" --no-ceilings --json "$TMP/two.jsonl" >"$TMP/two" 2>"$TMP/two.err" && ok ||
  bad "2 ranks: $(tail -3 "$TMP/two.err")"
python3 - "$TMP" <<'PY' && ok || bad "one format for 1 and 2 ranks (above)"
import json, re, sys
tmp = sys.argv[1]
line = re.compile(r"^(prompt|decode)  prompt +\d+  batch +\d+  context +\d+ +[0-9.]+ tok/s  "
                  r"bound +(-|[0-9.]+) tok/s \( *(-|[0-9.]+%)\)  mem +(-|[0-9.]+) GB  "
                  r"(\d+) ranks? (balanced|by-type|plan file), load [0-9.]+ s$")
keys = ["kind", "prompt", "batch", "context", "tok_s", "bound_tok_s", "mem_bytes", "ranks", "placement", "load_s"]
failed = []
for name, ranks in (("one", 1), ("two", 2)):
    text = open(f"{tmp}/{name}").read().splitlines()
    results = [l for l in text if l.startswith(("prompt", "decode"))]
    if len(results) != 3 or not all(line.match(l) and int(line.match(l)[5]) == ranks for l in results):
        failed.append(f"{name}: result lines {results}")
    if not re.match(r"lizard bench: tiny-hybrid on cpu, \d+ parameters \([0-9.]+ GB\), 2 softmax \+ 2 Lizard layers, "
                    rf"{ranks} ranks? \(balanced\)$", text[0]) or not text[1].startswith("state per sequence: "):
        failed.append(f"{name}: header {text[:2]}")
    if sum(l.startswith("  rank ") for l in text) != (0 if ranks == 1 else 6):
        failed.append(f"{name}: per-rank lines")
    rows = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")]
    runs = [r for r in rows if r["kind"] in ("prompt", "decode")]
    if [r["kind"] for r in runs] != ["prompt", "decode", "decode"]:
        failed.append(f"{name}: rows {rows}")
    for r in runs:
        if list(r) != keys or r["bound_tok_s"] is not None or r["mem_bytes"] is not None or r["ranks"] != ranks \
                or r["placement"] != "balanced" or not r["tok_s"] > 0:
            failed.append(f"{name}: row {r}")
    if len(rows) - len(runs) != (0 if ranks == 1 else 6):
        failed.append(f"{name}: rank rows")
print("\n".join(failed), file=sys.stderr)
sys.exit(1 if failed else 0)
PY
# the same header (but the ranks) and the same state figures
header() { sed -n 1,2p "$1" | sed 's/, [0-9] ranks\? (/, N (/'; }
[ "$(header "$TMP/one")" = "$(header "$TMP/two")" ] && ok ||
  bad "headers differ: $(head -2 "$TMP/one") / $(head -2 "$TMP/two")"

# bad input: one line and exit 2 in one process; under mpirun exit 2 and one line a rank
expect_error "--batch: 'x'" "$LIZARD" bench --shape tiny-hybrid --batch x
expect_error "--json: cannot write '$TMP/none/f'" "$LIZARD" bench --shape tiny-hybrid --json "$TMP/none/f"
mpi_error() { # NEEDLE MAX_LINES ARGS...: exit 2, 1 to MAX_LINES "lizard: error" lines, every one with NEEDLE
  local needle=$1 most=$2; shift 2
  run 2 "$LIZARD" "$@" >/dev/null 2>"$TMP/err"
  local rc=$? n others
  n=$(grep -c "^lizard: error: " "$TMP/err")
  others=$(grep "^lizard: error: " "$TMP/err" | grep -vc -- "$needle")
  [ $rc -eq 2 ] && [ "$n" -ge 1 ] && [ "$n" -le "$most" ] && [ "$others" = 0 ] && ok ||
    bad "mpirun $*: rc=$rc, $(grep error "$TMP/err")"
}
mpi_error "--batch: 'x'" 2 bench --shape tiny-hybrid --batch x
mpi_error "--json: cannot write" 1 bench --shape tiny-hybrid --json "$TMP/none/f"
mpi_error "--state runs in one process" 2 bench --shape tiny-hybrid --state
mpi_error "--linear-shapes runs in one process" 2 bench --shape tiny-hybrid --linear-shapes

# --linear-shapes and --state in one process, around the runs
"$LIZARD" bench --shape tiny-hybrid --prompt 0 --batch 1 --context 24 --steps 2 --linear-shapes --state \
  --json "$TMP/extra.jsonl" >"$TMP/extra" 2>&1
rc=$?
order=$(grep '^[a-z]' "$TMP/extra" | cut -c1-6 | uniq | tr -d ' ' | tr '\n' ' ') # header, linear, decode, state
[ $rc -eq 0 ] && [ "$(grep -c '^linear  lm_head' "$TMP/extra")" = 7 ] && [ "$(grep -c '^decode' "$TMP/extra")" = 1 ] &&
  [ "$(grep -c '^state   context      24  message' "$TMP/extra")" = 1 ] && [ "$order" = "lizard state linear decode state " ] &&
  [ "$(grep -c '"kind": "state"' "$TMP/extra.jsonl")" = 1 ] && ok ||
  bad "--linear-shapes --state: rc=$rc $(tail -3 "$TMP/extra")"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
