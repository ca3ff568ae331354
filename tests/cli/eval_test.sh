#!/usr/bin/env bash
# eval_test.sh LIZARD MODE - `lizard eval` on tiny models that `lizard init` writes.
#   MODE ppl:    perplexity at several window lengths in one run, its text lines and its --json
#                object, against tests/cli/ppl_reference.py (each window through `lizard forward`,
#                log-softmax in python); the default output's one line as before; --progress 0: a
#                line on stderr after every window but the last, none on stdout.
#   MODE json:   --json with --passkey: the same table as the text output, well-formed.
#   MODE length: contexts past max_position_embeddings: refused for a model running softmax
#                layers unless --allow-long-context; a model of Lizard layers alone runs.
set -u
LIZARD=$1
MODE=$2
HERE=$(dirname "$0")
. "$HERE/../test_lib.sh" # TMP, ok, bad, expect_error

T=$TMP/teacher
"$LIZARD" init --config tiny-teacher --out "$T" --seed 3 >/dev/null 2>&1 && ok || bad "init tiny-teacher"
python3 "$HERE/word_text.py" 43 220 "$TMP/text.txt"

if [ "$MODE" = ppl ]; then
    ids=$("$LIZARD" tokenize --model "$T" --file "$TMP/text.txt" 2>/dev/null)
    n=$(echo "$ids" | tr ',' '\n' | wc -l)
    [ "$n" -gt 150 ] && [ "$n" -lt 800 ] && ok || bad "the text is $n tokens; the windows below assume 150..800"
    # 37 leaves a short last window; n + 10 is one window longer than the text; chunks of 16 cut windows
    W="37,100,$((n + 10))"
    "$LIZARD" eval --model "$T" --text "$TMP/text.txt" --ppl-context "$W" --prefill-chunk 16 >"$TMP/ppl.txt" 2>"$TMP/err" \
        && ok || bad "eval --ppl-context $W: $(cat "$TMP/err")"
    "$LIZARD" eval --model "$T" --text "$TMP/text.txt" --ppl-context "$W" --json >"$TMP/ppl.json" 2>"$TMP/err" \
        && ok || bad "eval --json: $(cat "$TMP/err")"
    python3 "$HERE/ppl_reference.py" "$LIZARD" "$T" "$ids" "$W" >"$TMP/ref.json" && ok || bad "ppl_reference.py"
    python3 - "$TMP/ppl.txt" "$TMP/ppl.json" "$TMP/ref.json" "$W" "$n" "$T" <<'PY' && ok || bad "perplexity figures"
import json, re, sys
text, js, ref, W, n, model = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), \
    [int(w) for w in sys.argv[4].split(",")], int(sys.argv[5]), sys.argv[6]
lines = [l for l in text.splitlines() if l.startswith("perplexity ")]
assert len(lines) == len(W), text
assert js["model"] == model and js["text_tokens"] == n and js["softmax_layers"] == [0, 1, 2, 3], js
assert [p["context"] for p in js["perplexity"]] == W and js["passkey"] == [], js
for w, line, p in zip(W, lines, js["perplexity"]):
    r = ref[str(w)]
    m = re.match(r"perplexity ([0-9.]+)  \(mean nll ([0-9.]+) over (\d+) predicted tokens of (\d+), segments of (\d+)\)$",
                 line)
    assert m, line
    assert (int(m[3]), int(m[4]), int(m[5])) == (r["tokens"], n, w), (line, r)
    assert (p["tokens"], p["windows"]) == (r["tokens"], r["windows"]), (p, r)
    assert abs(p["mean_nll"] - r["mean_nll"]) <= 1e-4 * r["mean_nll"], (w, p, r)
    assert abs(float(m[1]) - r["ppl"]) <= 1e-3 * r["ppl"] and abs(p["ppl"] - r["ppl"]) <= 1e-3 * r["ppl"], (w, p, r)
    print(f"window {w}: {r['windows']} windows, {r['tokens']} tokens, ppl eval {p['ppl']:.4f} reference {r['ppl']:.4f}")
# the windows are fresh sequences: lengths that cut the text differently score differently
assert ref[str(W[0])]["tokens"] < ref[str(W[1])]["tokens"] < ref[str(W[2])]["tokens"] == n - 1, ref
assert abs(ref[str(W[0])]["ppl"] - ref[str(W[2])]["ppl"]) > 1e-6, ref
PY
    # progress on stderr after every window but each length's last (its result follows), stdout as without
    "$LIZARD" eval --model "$T" --text "$TMP/text.txt" --ppl-context "$W" --json --progress 0 >"$TMP/progress.json" \
        2>"$TMP/progress.err" && cmp -s "$TMP/ppl.json" "$TMP/progress.json" && ok ||
        bad "--progress 0: stdout differs: $(head -c 300 "$TMP/progress.json") $(head -3 "$TMP/progress.err")"
    python3 - "$TMP/progress.err" "$TMP/ref.json" "$W" <<'PY' && ok || bad "--progress 0: $(head -5 "$TMP/progress.err")"
import json, re, sys
lines, ref, W = open(sys.argv[1]).read().splitlines(), json.load(open(sys.argv[2])), sys.argv[3].split(",")
want = [(int(w), k, ref[w]["windows"]) for w in W for k in range(1, ref[w]["windows"])]
got = [re.fullmatch(r"lizard eval: perplexity at (\d+) tokens: window (\d+) of (\d+), \d+ s so far, about \d+ s left", l)
       for l in lines]
assert all(got), lines
assert [(int(m[1]), int(m[2]), int(m[3])) for m in got] == want, (lines, want)
PY
    # the default: one line, windows of 1024 (the text is shorter: one window)
    "$LIZARD" eval --model "$T" --text "$TMP/text.txt" >"$TMP/default.txt" 2>&1
    grep -Eq "^perplexity [0-9.]+  \(mean nll [0-9.]+ over $((n - 1)) predicted tokens of $n, segments of 1024\)$" \
        "$TMP/default.txt" && [ "$(wc -l <"$TMP/default.txt")" -eq 1 ] && ok || bad "default output: $(cat "$TMP/default.txt")"
    expect_error "--ppl-context" "$LIZARD" eval --model "$T" --text "$TMP/text.txt" --ppl-context 1
    expect_error "--ppl-context" "$LIZARD" eval --model "$T" --text "$TMP/text.txt" --ppl-context 64,x
fi

if [ "$MODE" = json ]; then
    A=(--model "$T" --text "$TMP/text.txt" --ppl-context 64 --passkey --contexts 200,300 --trials 2 --seed 4)
    "$LIZARD" eval "${A[@]}" >"$TMP/table.txt" 2>"$TMP/err" && ok || bad "eval: $(cat "$TMP/err")"
    "$LIZARD" eval "${A[@]}" --json >"$TMP/eval.json" 2>"$TMP/err" && ok || bad "eval --json: $(cat "$TMP/err")"
    python3 - "$TMP/table.txt" "$TMP/eval.json" <<'PY' && ok || bad "--json against the table: $(cat "$TMP/eval.json")"
import json, math, sys
text, raw = open(sys.argv[1]).read(), open(sys.argv[2]).read()
assert raw.count("\n") == 1, "one line"
js = json.loads(raw)
rows = [l.split() for l in text.splitlines() if l.split() and l.split()[0].isdigit()]
assert [[p["context"], p["trials"], p["correct"]] for p in js["passkey"]] == [[int(r[0]), int(r[1]), int(r[2])] for r in rows], (js, rows)
assert all(abs(p["accuracy"] - p["correct"] / p["trials"]) < 1e-12 for p in js["passkey"]), js
ppl = float(text.split()[1])
assert len(js["perplexity"]) == 1 and math.isfinite(js["perplexity"][0]["ppl"]), js
assert abs(js["perplexity"][0]["ppl"] - ppl) <= 1e-4 * ppl, (js, ppl)
PY
    # a model whose logits are NaN (finite weights that overflow; a NaN weight is refused at load): the figures
    # are null, the object still parses
    cp -r "$T" "$TMP/nan"
    python3 - "$TMP/nan/model.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])["model.norm.weight"]
assert t["dtype"] == "F32", t
a, b = t["data_offsets"]
raw[8 + n + a:8 + n + b] = struct.pack("<f", 3e38) * ((b - a) // 4)
open(sys.argv[1], "wb").write(raw)
PY
    "$LIZARD" eval --model "$TMP/nan" --text "$TMP/text.txt" --ppl-context 64 --json >"$TMP/nan.json" 2>"$TMP/err" \
        && python3 -c "
import json, sys; p = json.load(open(sys.argv[1]))['perplexity'][0]
assert p['ppl'] is None and p['mean_nll'] is None and p['tokens'] > 0, p" "$TMP/nan.json" \
        && ok || bad "NaN logits in --json: $(cat "$TMP/nan.json" "$TMP/err")"
fi

if [ "$MODE" = length ]; then
    Z=$TMP/lizard H=$TMP/hybrid
    "$LIZARD" init --config tiny-lizard --out "$Z" --seed 3 >/dev/null 2>&1 && ok || bad "init tiny-lizard"
    "$LIZARD" init --config tiny-hybrid --out "$H" --seed 3 >/dev/null 2>&1 && ok || bad "init tiny-hybrid"
    max=$(python3 -c "import json; print(json.load(open('$T/config.json'))['max_position_embeddings'])")
    long=$((max + 64))
    expect_error "max_position_embeddings $max" "$LIZARD" eval --model "$T" --passkey --contexts "$long" --trials 1
    expect_error "--allow-long-context" "$LIZARD" eval --model "$H" --passkey --contexts 256,"$long" --trials 1
    # perplexity windows are sized by the text: a window past max_position_embeddings is refused only where the
    # text reaches past it; with --allow-long-context a window of 2e9 on a 5.9K-token text runs as one of the
    # text's length (it allocated state for 2e9 positions and failed)
    python3 "$HERE/word_text.py" 7 2500 "$TMP/long.txt"
    n_long=$("$LIZARD" tokenize --model "$H" --file "$TMP/long.txt" 2>/dev/null | tr ',' '\n' | wc -l)
    [ "$n_long" -gt "$max" ] && ok || bad "the long text is $n_long tokens, not past $max"
    expect_error "context $n_long exceeds max_position_embeddings $max" "$LIZARD" eval --model "$H" --text "$TMP/long.txt" \
        --ppl-context 2000000000
    "$LIZARD" eval --model "$H" --text "$TMP/text.txt" --ppl-context "$long" >"$TMP/short_window" 2>"$TMP/err" &&
        ok || bad "a window past max_position_embeddings on a shorter text: $(cat "$TMP/err")"
    "$LIZARD" eval --model "$H" --text "$TMP/long.txt" --ppl-context 2000000000 --allow-long-context >"$TMP/huge" \
        2>"$TMP/err" && ok || bad "--ppl-context 2000000000 --allow-long-context: $(cat "$TMP/err")"
    "$LIZARD" eval --model "$H" --text "$TMP/long.txt" --ppl-context "$n_long" --allow-long-context >"$TMP/whole" \
        2>"$TMP/err" && ok || bad "--ppl-context $n_long --allow-long-context: $(cat "$TMP/err")"
    [ "$(cut -d' ' -f1-11 "$TMP/huge")" = "$(cut -d' ' -f1-11 "$TMP/whole")" ] && [ -s "$TMP/huge" ] && ok ||
        bad "a window of 2e9 is not the text's one window: $(cat "$TMP/huge" "$TMP/whole")"
    expect_error "max_position_embeddings" "$LIZARD" eval --model "$H" --softmax-layers 1 --passkey --contexts "$long"
    row() { grep -Eq "^ +$long +1 +[01] +[01]\.00$" "$TMP/out"; }
    "$LIZARD" eval --model "$T" --passkey --contexts "$long" --trials 1 --allow-long-context >"$TMP/out" 2>"$TMP/err" \
        && row && ok || bad "teacher with --allow-long-context: $(cat "$TMP/out" "$TMP/err")"
    "$LIZARD" eval --model "$Z" --passkey --contexts "$long" --trials 1 >"$TMP/out" 2>"$TMP/err" \
        && row && ok || bad "Lizard layers alone past max_position_embeddings: $(cat "$TMP/out" "$TMP/err")"
    "$LIZARD" eval --model "$H" --softmax-layers none --passkey --contexts "$long" --trials 1 >"$TMP/out" 2>"$TMP/err" \
        && row && ok || bad "hybrid run as Lizard layers alone: $(cat "$TMP/out" "$TMP/err")"
    # at max_position_embeddings itself: no flag needed
    "$LIZARD" eval --model "$T" --text "$TMP/text.txt" --ppl-context "$max" >/dev/null 2>"$TMP/err" \
        && ok || bad "window of max_position_embeddings: $(cat "$TMP/err")"
fi

echo "eval_test $MODE: $pass passed, $fail failed"
[ $fail -eq 0 ]
