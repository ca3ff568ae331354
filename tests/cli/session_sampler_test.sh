#!/usr/bin/env bash
# session_sampler_test.sh LIZARD SOURCE_DIR - a session keeps its sampler:
# sampled `lizard generate` of N tokens in one go gives the ids of k tokens
# saved to --session and N-k continued without repeating the sampling flags
# (tiny Lizard and hybrid models, top-k and top-p); a flag given on the
# continuing command overrides the saved one, with one line naming it; a
# session file written before the sampler was a message of its own (the
# fuzz corpus's version-2 file) still continues.
set -u
LIZARD=$1
SRC=$2
. "$(dirname "$0")/../test_lib.sh"

ids_of() { python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))" 2>/dev/null; }
gen() { "$LIZARD" generate --format json --ignore-eos "$@" 2>"$TMP/err" | ids_of; }

for cfg in tiny-lizard tiny-hybrid; do
    M=$TMP/$cfg
    "$LIZARD" init --config "$cfg" --out "$M" --seed 1 >/dev/null 2>&1 || { bad "init $cfg"; continue; }
    for flags in "--temperature 0.9 --top-k 20 --seed 5" "--temperature 1.3 --top-p 0.8 --seed 11"; do
        # shellcheck disable=SC2086
        whole=$(gen --model "$M" --ids 1,2,3 --max-tokens 12 $flags)
        rm -f "$TMP/s.lzs"
        # shellcheck disable=SC2086
        first=$(gen --model "$M" --ids 1,2,3 --max-tokens 5 $flags --session "$TMP/s.lzs")
        rest=$(gen --model "$M" --max-tokens 7 --session "$TMP/s.lzs")
        [ -n "$whole" ] && [ "$first,$rest" = "$whole" ] && ok ||
            bad "$cfg $flags: in one go $whole, saved and continued $first,$rest"
        [ ! -s "$TMP/err" ] && ok || bad "$cfg: continuing with the saved sampler printed: $(cat "$TMP/err")"
    done
    # a flag given on the continuing command wins, and says so in one line
    rm -f "$TMP/s.lzs"
    first=$(gen --model "$M" --ids 1,2,3 --max-tokens 5 --temperature 0.9 --seed 5 --session "$TMP/s.lzs")
    rest=$(gen --model "$M" --max-tokens 4 --temperature 0 --seed 5 --session "$TMP/s.lzs")
    [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q -- "--temperature 0 (saved 0.9)" "$TMP/err" && ! grep -q -- "--seed" "$TMP/err" &&
        ok || bad "$cfg: the override line: $(cat "$TMP/err")"
    greedy=$(gen --model "$M" --ids "1,2,3,$first" --max-tokens 4 --temperature 0)
    [ -n "$rest" ] && [ "$rest" = "$greedy" ] && ok || bad "$cfg: --temperature 0 on continuing: $rest vs greedy $greedy"
done

# a session written before the SamplerState message (tiny-hybrid, seed 0) loads and continues
M=$TMP/old-hybrid
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 0 >/dev/null 2>&1 || bad "init old-hybrid"
cp "$SRC/tests/fuzz/corpus/session/tiny-hybrid-v2.lzs" "$TMP/old.lzs"
got=$(gen --model "$M" --max-tokens 4 --session "$TMP/old.lzs")
[ "$(echo "$got" | tr ',' '\n' | grep -c .)" = 4 ] && ok || bad "the older session file: '$got' $(cat "$TMP/err")"
again=$(gen --model "$M" --max-tokens 3 --session "$TMP/old.lzs") # written back with the message
[ -n "$again" ] && ok || bad "the older session, saved again: $(cat "$TMP/err")"

echo "session_sampler_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
