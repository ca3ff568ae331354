#!/usr/bin/env bash
# distill_test.sh LIZARD SRC MODE - `lizard distill` and `lizard eval` end to end
# on a tiny teacher that `lizard init` writes.
#   MODE fall:   the held-out attention MSE of every trained layer falls (by
#                FALL_FACTOR below); the folder loads, generates, evaluates.
#   MODE runs:   same seed -> byte-identical weights, another seed -> different;
#                --stop-at-step + --resume == one run; --retain-fraction keeps the layers asked.
#   MODE errors: bad data, paths, lengths, settings -> exit 2 and one line naming the fault.
set -u
LIZARD=$1
SRC=$2
MODE=$3
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error

T=$TMP/teacher
"$LIZARD" init --config tiny-teacher --out "$T" --seed 1 >/dev/null 2>&1 && ok || bad "init tiny-teacher"
# fixed text (not the repository's docs, which change): sentences drawn by a seeded generator
python3 - "$TMP/data.txt" <<'PY'
import random, sys
rng = random.Random(20260101)
nouns = "lizard rock sun desert tail scale eye tongue insect shadow stone heat morning river sand leaf".split()
verbs = "basks waits hunts rests climbs watches runs hides sleeps warms turns eats finds".split()
adjs = "warm green small quick old bright still dry long cold slow sharp".split()
out = []
for _ in range(2500):
    out.append(f"The {rng.choice(adjs)} {rng.choice(nouns)} {rng.choice(verbs)} on the {rng.choice(nouns)}.")
    if rng.random() < 0.1:
        out.append("\n")
open(sys.argv[1], "w").write(" ".join(out))
PY
head -c 3000 "$TMP/data.txt" >"$TMP/short.txt"
# a small run of every layer: what determinism and resume compare
SMALL=(--teacher "$T" --data "$TMP/data.txt" --seq-len 32 --batch 2 --tokens 640 --window 8 --feature-dim 8
       --meta-tokens 2 --lr 1e-2 --eval-batches 1 --log-every 1000)

if [ "$MODE" = fall ]; then
    # 1. the MSE falls: layers 0 and 1 trained, 2 and 3 kept as the teacher's
    FALL_FACTOR=10
    "$LIZARD" distill --teacher "$T" --data "$TMP/data.txt" --out "$TMP/A" --softmax-layers 2,3 --seq-len 32 \
        --batch 2 --tokens 8000 --window 16 --feature-dim 32 --lr 3e-2 --log "$TMP/A.jsonl" --log-every 50 \
        2>"$TMP/A.err" && ok || bad "distill A: $(tail -2 "$TMP/A.err")"
    python3 - "$TMP/A.jsonl" "$FALL_FACTOR" <<'PY' && ok || bad "MSE did not fall ${FALL_FACTOR}x: $(grep eval "$TMP/A.jsonl")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ev = {r["eval"]: r["mse"] for r in rows if "eval" in r}
steps = [r for r in rows if "step" in r]
assert len(steps) == 125 and all(r["tok_per_s"] > 0 for r in steps), len(steps)
assert sorted(ev["start"]) == ["0", "1"], ev
for layer, start in ev["start"].items():
    end = ev["end"][layer]
    print(f"layer {layer}: held-out mse {start:.4f} -> {end:.4f} ({start / end:.1f}x)")
    assert end * float(sys.argv[2]) <= start
PY
    grep -q "tok/s  mse 0:" "$TMP/A.err" && ok || bad "progress line: $(head -3 "$TMP/A.err")"
    # the folder: docs/model-format.md's lizard block, loads, generates, evaluates
    python3 -c "
import json; c = json.load(open('$TMP/A/config.json'))['lizard']
assert c == {'softmax_layers': [2, 3], 'feature_dim': 32, 'feature_map': 'softmax', 'window_size': 16,
             'num_meta_tokens': 4, 'gla_normalize': True}, c" && ok || bad "lizard block"
    "$LIZARD" info --model "$TMP/A" 2>&1 | grep -q "LLSS" && ok || bad "info: $("$LIZARD" info --model "$TMP/A" 2>&1)"
    "$LIZARD" generate --model "$TMP/A" --prompt "The lizard" --max-tokens 6 --format json --ignore-eos \
        >"$TMP/gen" 2>/dev/null && grep -Eq '^\{"ids": \[[0-9]+(, [0-9]+){5}\]' "$TMP/gen" && ok \
        || bad "generate on the distilled folder: $(cat "$TMP/gen")"
    for m in "$T" "$TMP/A"; do
        "$LIZARD" eval --model "$m" --text "$TMP/short.txt" --ppl-context 128 >"$TMP/ppl" 2>&1 \
            && grep -Eq '^perplexity [0-9.]+ ' "$TMP/ppl" && ok || bad "eval --text $m: $(cat "$TMP/ppl")"
    done
    # eval's perplexity = exp(mean NLL) recomputed here from `lizard forward`'s logits of the same ids
    head -c 400 "$TMP/data.txt" >"$TMP/tiny.txt"
    ids=$("$LIZARD" tokenize --model "$TMP/A" --file "$TMP/tiny.txt" 2>/dev/null)
    "$LIZARD" forward --model "$TMP/A" --ids "$ids" --logits-out "$TMP/l.npy" 2>/dev/null
    "$LIZARD" eval --model "$TMP/A" --text "$TMP/tiny.txt" --ppl-context 1000 --prefill-chunk 7 >"$TMP/ppl" 2>&1
    python3 - "$TMP/l.npy" "$ids" "$TMP/ppl" <<'PY' && ok || bad "perplexity differs from the logits: $(cat "$TMP/ppl")"
import math, struct, sys
raw = open(sys.argv[1], "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
ids = [int(x) for x in sys.argv[2].split(",")]
V = (len(raw) - 10 - hlen) // 4 // len(ids)
logits = struct.unpack("<%df" % (len(ids) * V), raw[10 + hlen:])
nll = 0.0
for t in range(len(ids) - 1):
    row = logits[t * V:(t + 1) * V]
    m = max(row)
    nll -= row[ids[t + 1]] - m - math.log(sum(math.exp(x - m) for x in row))
want = math.exp(nll / (len(ids) - 1))
got = float(open(sys.argv[3]).read().split()[1])
print(f"perplexity: eval {got:.4f}, from the logits {want:.4f}")
assert abs(got - want) <= 1e-3 * want, (got, want)
PY
    "$LIZARD" eval --model "$TMP/A" --passkey --contexts 200,300 --trials 1 >"$TMP/pk" 2>&1 \
        && [ "$(grep -Ec '^ +(200|300) +1 +[01] +[01]\.00$' "$TMP/pk")" -eq 2 ] && ok || bad "passkey table: $(cat "$TMP/pk")"
fi

if [ "$MODE" = runs ]; then
    # 2. same seed -> same bytes; another seed -> other bytes
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/B1" --seed 5 2>/dev/null && ok || bad "distill B1"
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/B2" --seed 5 2>/dev/null && ok || bad "distill B2"
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/B3" --seed 6 2>/dev/null && ok || bad "distill B3"
    cmp -s "$TMP/B1/model.safetensors" "$TMP/B2/model.safetensors" && ok || bad "seed 5 twice: different weights"
    cmp -s "$TMP/B1/model.safetensors" "$TMP/B3/model.safetensors" && bad "seeds 5 and 6: same weights" || ok
    # 3. stopped after step 4 of 10 (a checkpoint that loads), then resumed: the same bytes as one run
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/R" --seed 5 --stop-at-step 4 2>"$TMP/R.err" \
        && grep -q "stopped after step 4 of 10" "$TMP/R.err" && ok || bad "--stop-at-step: $(cat "$TMP/R.err")"
    "$LIZARD" generate --model "$TMP/R" --ids 1,2 --max-tokens 2 >/dev/null 2>&1 && ok || bad "checkpoint folder"
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/R" --seed 5 --resume 2>"$TMP/R.err" \
        && grep -q "from step 4" "$TMP/R.err" && ok || bad "--resume: $(cat "$TMP/R.err")"
    cmp -s "$TMP/B1/model.safetensors" "$TMP/R/model.safetensors" && ok || bad "resumed run differs from one run"
    # periodic checkpoints leave the training untouched
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/K" --seed 5 --checkpoint-every 4 2>"$TMP/K.err" \
        && [ "$(grep -c "checkpoint after step [48] in" "$TMP/K.err")" -eq 2 ] && ok || bad "--checkpoint-every: $(cat "$TMP/K.err")"
    cmp -s "$TMP/B1/model.safetensors" "$TMP/K/model.safetensors" && ok || bad "checkpointed run differs"
    # 4. --retain-fraction 0.5 keeps two of four layers, chosen after calibration
    "$LIZARD" distill "${SMALL[@]}" --out "$TMP/C" --retain-fraction 0.5 --retain-by error \
        --calibration-steps 4 2>"$TMP/C.err" && grep -q "kept as softmax" "$TMP/C.err" && ok \
        || bad "--retain-fraction: $(cat "$TMP/C.err")"
    python3 -c "
import json; c = json.load(open('$TMP/C/config.json'))['lizard']; assert len(c['softmax_layers']) == 2, c" \
        && ok || bad "retained layers: $(cat "$TMP/C/config.json")"
    "$LIZARD" generate --model "$TMP/C" --ids 1,2 --max-tokens 2 >/dev/null 2>&1 && ok || bad "retained folder"
fi

if [ "$MODE" = errors ]; then
    D=(--teacher "$T" --seq-len 32 --batch 2 --tokens 640)
    expect_error "nope.txt" "$LIZARD" distill "${D[@]}" --data "$TMP/nope.txt" --out "$TMP/o"
    : >"$TMP/empty.txt"
    expect_error "no tokens" "$LIZARD" distill "${D[@]}" --data "$TMP/empty.txt" --out "$TMP/o"
    expect_error "fewer than one sequence" "$LIZARD" distill "${D[@]}" --data "$TMP/short.txt" --out "$TMP/o" \
        --seq-len 4000
    expect_error "max_position_embeddings" "$LIZARD" distill "${D[@]}" --data "$TMP/data.txt" --out "$TMP/o" \
        --seq-len 5000
    python3 -c "
import struct, sys
def npy(path, descr, shape, payload):
    h = \"{'descr': '%s', 'fortran_order': False, 'shape': %s, }\" % (descr, shape)
    h += ' ' * ((64 - (10 + len(h) + 1) % 64) % 64) + '\n'
    open(path, 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + payload)
npy('$TMP/f32.npy', '<f4', '(64,)', bytes(256))
npy('$TMP/big.npy', '<i4', '(64,)', struct.pack('<64i', *([7] * 63 + [999])))
npy('$TMP/ids.npy', '<i4', '(640,)', struct.pack('<640i', *[i % 500 for i in range(640)]))
"
    expect_error "int32" "$LIZARD" distill "${D[@]}" --data "$TMP/f32.npy" --out "$TMP/o"
    expect_error "outside the vocabulary" "$LIZARD" distill "${D[@]}" --data "$TMP/big.npy" --out "$TMP/o"
    "$LIZARD" init --config tiny-hybrid --out "$TMP/hybrid" >/dev/null 2>&1
    expect_error "lizard" "$LIZARD" distill --teacher "$TMP/hybrid" --data "$TMP/ids.npy" --out "$TMP/o" --seq-len 32
    expect_error "already holds a model" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$T"
    expect_error "distill_state.json" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" --resume
    expect_error "give one" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" --softmax-layers 0 \
        --retain-fraction 0.5
    expect_error "--softmax-layers" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" \
        --softmax-layers 0,9
    expect_error "--feature-map" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" --feature-map relu
    expect_error "--retain-by" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" \
        --retain-fraction 0.5 --retain-by size
    expect_error "--device" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" --device gpu
    expect_error "needs --device cuda" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" \
        --gla-precision bf16
    expect_error "needs --device cuda" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" \
        --teacher-device cuda
    expect_error "needs the teacher on the GPU" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" \
        --teacher-dtype bf16
    [ ! -e "$TMP/o" ] && ok || bad "a failed distill left $TMP/o behind"
    # a run from .npy ids, then a resume with another setting is refused
    "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/ok" --stop-at-step 2 --feature-dim 8 \
        --window 8 2>/dev/null && ok || bad "distill from .npy ids"
    expect_error "different lr" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/ok" --resume \
        --feature-dim 8 --window 8 --lr 0.5
    expect_error "too short" "$LIZARD" eval --model "$T" --passkey --contexts 80
    expect_error "--text" "$LIZARD" eval --model "$T"
    expect_error "nope.txt" "$LIZARD" eval --model "$T" --text "$TMP/nope.txt"
    expect_error "max_position_embeddings" "$LIZARD" eval --model "$T" --passkey --contexts 5000
fi

echo "distill_test $MODE: $pass passed, $fail failed"
[ $fail -eq 0 ]
