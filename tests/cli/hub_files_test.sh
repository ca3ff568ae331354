#!/usr/bin/env bash
# hub_files_test.sh LIZARD FIXTURES - model folders shaped as the hub's
# LLaMA-3.1-8B-Instruct and Mistral-7B-Instruct folders (tests/fixtures/hub_*:
# "model_max_length": 1000000000000000019884624838656, a long chat_template,
# special_tokens_map.json, generation_config.json) load through the commands
# that read them: tokenize, generate --prompt, eval --text. Then a tokenizer
# with more ids than the model: one warning at load, and text that becomes an
# id >= vocab_size is refused in one line naming the id.
set -u
LIZARD=$1
FIXTURES=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../test_lib.sh" # TMP, ok, bad

printf 'The lizard basks on a warm stone in the sun. A small lizard runs under the rock.\n' >"$TMP/text.txt"
for name in hub_llama31_instruct hub_mistral7b_instruct; do
    M=$FIXTURES/$name
    ids=$("$LIZARD" tokenize --model "$M" --text "The lizard basks" 2>"$TMP/err")
    [ $? -eq 0 ] && [ -n "$ids" ] && ok || bad "$name: tokenize: $(cat "$TMP/err")"
    "$LIZARD" generate --model "$M" --prompt "The lizard basks" --max-tokens 4 --temperature 0 --ignore-eos \
        --format json >"$TMP/gen" 2>"$TMP/err" &&
        grep -Eq '^\{"ids": \[[0-9]+(, [0-9]+){3}\], "text": ".*"\}$' "$TMP/gen" && ok ||
        bad "$name: generate --prompt: $(cat "$TMP/gen" "$TMP/err")"
    "$LIZARD" eval --model "$M" --text "$TMP/text.txt" --ppl-context 64 >"$TMP/eval" 2>"$TMP/err" &&
        grep -q perplexity "$TMP/eval" && ok || bad "$name: eval --text: $(cat "$TMP/eval" "$TMP/err")"
    [ -s "$TMP/err" ] && bad "$name: a tokenizer that fits the model printed: $(cat "$TMP/err")" || ok
done

# The LLaMA folder with one more special token, id 320, past the model's 0..319.
BIG=$TMP/bigtok
cp -rL "$FIXTURES/hub_llama31_instruct" "$BIG"
python3 - "$BIG/tokenizer.json" <<'PY'
import json, sys
path = sys.argv[1]
t = json.load(open(path, encoding="utf-8"))
t["added_tokens"].append({"id": 320, "content": "<|reserved_special_token_250|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(path, "w", encoding="utf-8"), ensure_ascii=False)
PY
# text that stays inside the vocabulary works, with the warning, once
"$LIZARD" generate --model "$BIG" --prompt "The lizard basks" --max-tokens 2 --ignore-eos >/dev/null 2>"$TMP/err" &&
    [ "$(grep -c "warning: .*tokenizer.json has 321 token ids, the model 320" "$TMP/err")" = 1 ] && ok ||
    bad "warning at load: $(cat "$TMP/err")"
"$LIZARD" generate --model "$BIG" --prompt "Hi <|reserved_special_token_250|>" --max-tokens 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" = 2 ] && [ ! -s "$TMP/out" ] &&
    grep -q "lizard: error: --prompt: token 320 ('<|reserved_special_token_250|>') is not in the model's vocabulary (vocab_size 320" "$TMP/err" && ok ||
    bad "generate --prompt with id 320: rc $rc, $(cat "$TMP/err")"
printf 'Hi <|reserved_special_token_250|> there\n' >"$TMP/bad.txt"
"$LIZARD" eval --model "$BIG" --text "$TMP/bad.txt" --ppl-context 64 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "lizard: error: --text: token 320" "$TMP/err" && ok || bad "eval --text with id 320: rc $rc, $(cat "$TMP/err")"
printf 'The lizard basks\nHi <|reserved_special_token_250|>\n' >"$TMP/prompts.txt"
"$LIZARD" generate --model "$BIG" --prompts-file "$TMP/prompts.txt" --max-tokens 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "lizard: error: --prompts-file: token 320" "$TMP/err" && ok ||
    bad "generate --prompts-file with id 320: rc $rc, $(cat "$TMP/err")"

echo "hub_files_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
