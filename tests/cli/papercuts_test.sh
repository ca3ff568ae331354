#!/usr/bin/env bash
# papercuts_test.sh - what a new user runs into first: lizard bench on the CPU by default (quick, each
# line as it comes, "-" where the CPU has no ceiling or memory figure), a missing model folder named as
# such, the position limit of softmax layers (refused unless allowed; none for pure Lizard), init and
# info counting parameters alike and marking the state figures past max_position_embeddings, --prompts-file
# results numbered by their lines, error messages that say "lizard" once, and distill refusing a run
# that keeps every layer softmax (--stats under mpirun: tests/mpi/stats_test.sh). Usage: papercuts_test.sh LIZARD
set -uo pipefail
LIZARD=$1
source "$(dirname "$0")/../test_lib.sh"
M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" >"$TMP/init" 2>&1 || { echo "init failed"; cat "$TMP/init"; exit 1; }

# bench: cpu by default, seconds not minutes, "-" for the ceilings and memory the CPU does not measure
start=$(date +%s)
timeout 120 "$LIZARD" bench --shape tiny-hybrid >"$TMP/bench" 2>&1 && ok || bad "bench: $(tail -2 "$TMP/bench")"
[ $(( $(date +%s) - start )) -le 30 ] && ok || bad "bench on the CPU took $(( $(date +%s) - start )) s"
grep -q "tiny-hybrid on cpu" "$TMP/bench" && ok || bad "bench: not the CPU by default: $(head -1 "$TMP/bench")"
grep -q "^decode .*bound          - tok/s (    -)  mem      - GB" "$TMP/bench" && ! grep "^prompt\|^decode" "$TMP/bench" | grep -q " 0\.0%\|0\.00 GB" && ok ||
  bad "bench: bound/memory columns on the CPU: $(grep decode "$TMP/bench" | head -1)"
# each line as it comes: the prompt's line arrives while a long decode run is still going
mkfifo "$TMP/fifo"
"$LIZARD" bench --shape tiny-hybrid --batch 1 --steps 1000000 >"$TMP/fifo" 2>/dev/null &
pid=$!
exec 3<"$TMP/fifo"
got=""
for _ in 1 2 3; do IFS= read -r -t 20 -u 3 line || break; got=$line; done
kill $pid 2>/dev/null; wait $pid 2>/dev/null; exec 3<&-
[[ $got == prompt* ]] && ok || bad "bench: the prompt line did not come before the end (got '$got')"

# a missing model folder is named as a missing folder, whatever the command would read first
for cmd in "generate --prompt hi" "generate --ids 1" "info" "tokenize --text hi" "forward --ids 1 --logits-out $TMP/l.npy"; do
  expect_error "--model $TMP/none: no such folder" "$LIZARD" ${cmd%% *} --model "$TMP/none" ${cmd#* }
done
expect_error "--model $M/config.json: not a folder" "$LIZARD" info --model "$M/config.json"

# positions past max_position_embeddings: refused with softmax layers unless allowed; a pure Lizard run has no limit
S=$TMP/short
mkdir -p "$S" && cp "$M"/* "$S"/ && python3 - "$S/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 16; json.dump(c, open(sys.argv[1], "w"))
PY
expect_error "context 23 exceeds max_position_embeddings 16 of a model with 2 softmax layers" \
  "$LIZARD" generate --model "$S" --ids 1,2,3 --max-tokens 20
expect_error "max_position_embeddings 16" "$LIZARD" generate --model "$S" --prompts-file /dev/stdin --max-tokens 20 <<<"a b c"
ids=$(seq -s, 1 17)
expect_error "context 17 exceeds max_position_embeddings 16" "$LIZARD" forward --model "$S" --ids "$ids" --logits-out "$TMP/l.npy"
"$LIZARD" generate --model "$S" --ids 1,2,3 --max-tokens 20 --ignore-eos --allow-long-context >/dev/null 2>&1 && ok ||
  bad "--allow-long-context did not allow it"
"$LIZARD" generate --model "$S" --ids 1,2,3 --max-tokens 20 --ignore-eos --softmax-layers none >/dev/null 2>&1 && ok ||
  bad "a pure Lizard run was refused for its length"
"$LIZARD" forward --model "$S" --ids "$ids" --logits-out "$TMP/l.npy" --softmax-layers none 2>/dev/null && ok ||
  bad "forward: a pure Lizard run was refused for its length"

# info: the state at contexts past max_position_embeddings marked, with a note that says what refuses them
"$LIZARD" info --model "$S" >"$TMP/info_short" 2>&1
[ "$(grep -c '^state @ .*  \*$' "$TMP/info_short")" = 3 ] &&
  grep -q "^  \* past max_position_embeddings (16): " "$TMP/info_short" &&
  grep -q "refuse it without --allow-long-context (2 softmax layers)$" "$TMP/info_short" && ok ||
  bad "info past max_position_embeddings 16: $(cat "$TMP/info_short")"
"$LIZARD" info --model "$S" --softmax-layers none 2>&1 | grep -q "^    trained on it$" && ok ||
  bad "info, pure Lizard: a refusal said where none is: $("$LIZARD" info --model "$S" --softmax-layers none 2>&1 | tail -2)"
"$LIZARD" info --model "$M" >"$TMP/info_long" 2>&1 # (4,096 positions: 1K within, 32K and 128K past)
[ "$(grep -c '^state @ .*  \*$' "$TMP/info_long")" = 2 ] && ! grep -q '^state @   1024 .*\*$' "$TMP/info_long" && ok ||
  bad "info past max_position_embeddings 4096: $(cat "$TMP/info_long")"

# init and info count the same parameters
n_init=$(grep -o '[0-9]* parameters' "$TMP/init" | cut -d' ' -f1)
n_info=$("$LIZARD" info --model "$M" | sed -n 's/^parameters *\([0-9]*\) .*/\1/p')
[ -n "$n_init" ] && [ "$n_init" = "$n_info" ] && ok || bad "init counted $n_init parameters, info $n_info"

# --prompts-file: a result carries its prompt's line (from 0); blank lines keep their number
printf 'The lizard\n\nA cat\n\n\nHello\n' >"$TMP/prompts"
"$LIZARD" generate --model "$M" --prompts-file "$TMP/prompts" --max-tokens 2 --format json 2>/dev/null >"$TMP/many"
[ "$(grep -o '"index": [0-9]*' "$TMP/many" | cut -d' ' -f2 | tr '\n' ' ')" = "0 2 5 " ] && ok ||
  bad "--prompts-file numbering: $(cat "$TMP/many")"
"$LIZARD" generate --model "$M" --prompts-file "$TMP/prompts" --max-tokens 2 2>/dev/null | cut -c1-3 >"$TMP/many_text"
[ "$(tr '\n' ' ' <"$TMP/many_text")" = "[0] [2] [5] " ] && ok || bad "--prompts-file text numbering: $(cat "$TMP/many_text")"

# one "lizard" a message
"$LIZARD" generate --model "$M" --ids 1 --format xml 2>"$TMP/err"
[ "$(cat "$TMP/err")" = "lizard: error: --format: expected text or json, got 'xml'" ] && ok || bad "error line: $(cat "$TMP/err")"
"$LIZARD" generate --model "$M" --ids 1 --frob 2>"$TMP/err"
grep -q "^lizard: error: unknown flag '--frob'" "$TMP/err" && ok || bad "error line: $(cat "$TMP/err")"

# distill: every layer softmax is nothing to distill
T=$TMP/teacher
"$LIZARD" init --config tiny-teacher --out "$T" >/dev/null 2>&1
printf 'lizards bask in the sun\n%.0s' $(seq 1 50) >"$TMP/data.txt"
expect_error "keeps every layer of the teacher (4) softmax: nothing to distill" \
  "$LIZARD" distill --teacher "$T" --data "$TMP/data.txt" --out "$TMP/o1" --softmax-layers all
expect_error "keeps every layer of the teacher (4) softmax" \
  "$LIZARD" distill --teacher "$T" --data "$TMP/data.txt" --out "$TMP/o2" --softmax-layers 0,1,2,3
expect_error "--retain-fraction 1 keeps every layer softmax" \
  "$LIZARD" distill --teacher "$T" --data "$TMP/data.txt" --out "$TMP/o3" --retain-fraction 1
[ ! -e "$TMP/o1" ] && [ ! -e "$TMP/o3" ] && ok || bad "a refused distill left an output folder"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
