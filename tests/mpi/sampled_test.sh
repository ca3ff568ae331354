#!/usr/bin/env bash
# sampled_test.sh LIZARD - sampled generation (temperature, top-k, top-p) with
# the ids drawn on the last stage (sample_rows) and only ids sent back: on 1..3
# CPU ranks, balanced and by-type plans, one sequence and batches whose rows
# circulate in groups, the same ids as one process for the same seed; a
# session continued mid-stream gives the ids of one uninterrupted run.
set -u
LIZARD=$1
FIX=$(cd "$(dirname "$0")/../fixtures" && pwd)
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun

H=$FIX/hybrid50/model
IDS=305,265,245,226,40,81,264,106,271,56,111,312
COMMON="--model $H --ids $IDS --max-tokens 16 --format json --ignore-eos"
for flags in "--temperature 0.8 --top-p 0.9 --seed 7" "--temperature 1.3 --top-k 5 --top-p 0.95 --seed 11" \
             "--temperature 0.8 --top-p 0.9 --seed 7 --batch 4"; do
  "$LIZARD" generate $COMMON $flags >"$TMP/one" 2>"$TMP/err" || bad "one process ($flags): $(grep error "$TMP/err")"
  for n in 1 2 3; do
    for pl in balanced by-type; do
      [ $n = 1 ] && [ $pl = by-type ] && continue # by-type needs a rank for each layer kind
      run $n "$LIZARD" generate $COMMON $flags --placement $pl >"$TMP/np" 2>"$TMP/err" ||
        { bad "np $n $pl ($flags): $(grep error "$TMP/err" | head -2)"; continue; }
      cmp -s "$TMP/one" "$TMP/np" && ok || bad "np $n $pl ($flags): $(cat "$TMP/np") vs $(cat "$TMP/one")"
    done
  done
done
# sampled ids differ from greedy ones and between seeds (the sampler is not silently greedy)
"$LIZARD" generate $COMMON --temperature 0 >"$TMP/greedy" 2>/dev/null
"$LIZARD" generate $COMMON --temperature 1.5 --seed 1 >"$TMP/s1" 2>/dev/null
"$LIZARD" generate $COMMON --temperature 1.5 --seed 2 >"$TMP/s2" 2>/dev/null
! cmp -s "$TMP/s1" "$TMP/greedy" && ! cmp -s "$TMP/s1" "$TMP/s2" && ok || bad "sampled ids equal greedy or another seed's"

# 8 tokens, then 8 more from the saved session (on 2 ranks, its sampler restored without the flags):
# the ids of one 16-token run
"$LIZARD" generate $COMMON --temperature 0.8 --top-p 0.9 --seed 7 >"$TMP/whole" 2>/dev/null
"$LIZARD" generate --model "$H" --ids $IDS --max-tokens 8 --format json --ignore-eos --temperature 0.8 --top-p 0.9 \
  --seed 7 --session "$TMP/s.lzs" >"$TMP/a" 2>/dev/null
run 2 "$LIZARD" generate --model "$H" --max-tokens 8 --format json --ignore-eos \
  --session "$TMP/s.lzs" >"$TMP/b" 2>"$TMP/err" || bad "session continued on 2 ranks: $(grep error "$TMP/err")"
joined=$(python3 -c "import json,sys; print(sum((json.load(open(f))['ids'] for f in sys.argv[1:]), []))" "$TMP/a" "$TMP/b")
whole=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ids'])" "$TMP/whole")
[ "$joined" = "$whole" ] && ok || bad "continued session: $joined vs $whole"

echo "sampled_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
