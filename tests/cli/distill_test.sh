#!/usr/bin/env bash
# distill_test.sh LIZARD SRC MODE - `lizard distill` and `lizard eval` end to end
# on a tiny teacher that `lizard init` writes.
#   MODE fall:   the held-out attention MSE of every trained layer falls (by
#                FALL_FACTOR below); the folder loads, generates, evaluates.
#   MODE runs:   same seed -> byte-identical weights, another seed -> different;
#                --stop-at-step + --resume == one run; --retain-fraction keeps the layers asked.
#   MODE errors: bad data, paths, lengths, settings -> exit 2 and one line naming the fault.
#   MODE state:  a checkpoint is one unit: every field, tensor and byte of a state edited is refused
#                on --resume (exit 2, one line); a writer killed at each of its writes, syncs and
#                renames (LIZARD_CHECKPOINT_KILL) resumes to the bytes of one uninterrupted run;
#                a non-finite loss or gradient stops the run, naming the step and the layer, and
#                keeps the last checkpoint.
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
    expect_error "has no distill_state" "$LIZARD" distill "${D[@]}" --data "$TMP/ids.npy" --out "$TMP/o" --resume
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

if [ "$MODE" = state ]; then
    # 8 steps, layers 0 and 2 kept softmax (the state holds layers 1 and 3)
    S=(--teacher "$T" --data "$TMP/data.txt" --seq-len 32 --batch 2 --tokens 512 --window 8 --feature-dim 8
       --meta-tokens 2 --lr 1e-2 --eval-batches 1 --log-every 1000 --softmax-layers 0,2 --seed 5)
    "$LIZARD" distill "${S[@]}" --out "$TMP/U" 2>/dev/null && ok || bad "the uninterrupted run"
    "$LIZARD" distill "${S[@]}" --out "$TMP/P" --stop-at-step 6 2>/dev/null && ok || bad "--stop-at-step 6"
    [ -f "$TMP/P/distill_state/state.json" ] && [ -f "$TMP/P/distill_state/tensors.safetensors" ] &&
        [ "$(ls "$TMP/P/distill_state")" = "$(printf 'state.json\ntensors.safetensors')" ] && ok ||
        bad "the unit: $(ls -R "$TMP/P")"
    cp -r "$TMP/P" "$TMP/P6" # kept as it was for the edits below
    "$LIZARD" distill "${S[@]}" --out "$TMP/P" --resume 2>/dev/null && ok || bad "--resume from step 6"
    cmp -s "$TMP/U/model.safetensors" "$TMP/P/model.safetensors" && ok || bad "stopped at 6 and resumed != one run"

    # edit NAME PYTHON: a copy of the state of step 6 edited by PYTHON (s: state.json as a dict,
    # t: the tensors as {name: [dtype, shape, bytes]}, both written back), then --resume refused
    n_edits=0
    edit() {
        local name=$1 code=$2 needle=$3
        rm -rf "$TMP/E"; cp -r "$TMP/P6" "$TMP/E"
        python3 - "$TMP/E/distill_state" "$code" <<'PY' || { bad "edit $name: python"; return; }
import json, struct, sys
d, code = sys.argv[1], sys.argv[2]
raw = open(d + "/tensors.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__", None)
t = {k: [v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]] for k, v in head.items()}
s = json.load(open(d + "/state.json"))
text = None
exec(code)
if text is None:
    text = json.dumps(s)
open(d + "/state.json", "w").write(text)
out, off = {}, 0
for k, (dt, shape, b) in t.items():
    out[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
    off += len(b)
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(d + "/tensors.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(b for _, _, b in t.values()))
PY
        if [ "$needle" = - ]; then # a rewrite that changes nothing the state says: it resumes
            "$LIZARD" distill "${S[@]}" --out "$TMP/E" --resume 2>/dev/null &&
                cmp -s "$TMP/U/model.safetensors" "$TMP/E/model.safetensors" && ok || bad "edit $name: did not resume"
            return
        fi
        cp "$TMP/E/model.safetensors" "$TMP/before.safetensors"
        expect_error "$needle" "$LIZARD" distill "${S[@]}" --out "$TMP/E" --resume
        cmp -s "$TMP/E/model.safetensors" "$TMP/before.safetensors" && ok || bad "edit $name: the refused resume wrote"
        n_edits=$((n_edits + 1))
    }
    edit rewritten 'pass' -
    edit reordered 't = dict(reversed(list(t.items()))); text = json.dumps(s, indent=1, sort_keys=True)' -
    edit softmax13 's["fields"]["softmax_layers"] = [1, 3]' "softmax_layers 1,3 is not this run's --softmax-layers 0,2"
    edit softmax_all 's["fields"]["softmax_layers"] = [0, 1, 2, 3]' "is not this run's --softmax-layers"
    edit softmax_none 's["fields"]["softmax_layers"] = []' "softmax_layers none is not"
    edit softmax_null 's["fields"]["softmax_layers"] = None' "softmax_layers null is not"
    edit softmax_gone 'del s["fields"]["softmax_layers"]' '"softmax_layers" is missing'
    edit softmax_text 's["fields"]["softmax_layers"] = "0,2"' 'must be null or a list'
    edit softmax_big 's["fields"]["softmax_layers"] = [0, 2, 9]' 'softmax_layers\[2\] is not a layer'
    edit softmax_twice 's["fields"]["softmax_layers"] = [0, 0, 2]' 'or repeats one'
    edit softmax_neg 's["fields"]["softmax_layers"] = [-1, 2]' 'softmax_layers\[0\] is not a layer'
    edit field_extra 's["fields"]["cursor"] = 3' '"cursor" is not a field of a distillation state'
    edit fields_gone 'del s["fields"]' '"fields" must be an object'
    for step in 0 -3 100 9; do
        edit "step$step" "s['step'] = $step" "step $step is outside this run's 1..8"
    done
    for step in 1 5 7 8; do
        edit "step$step" "s['step'] = $step" "checksum does not match"
    done
    edit step_real 's["step"] = 6.0' '"step" must be an integer'
    edit step_text 's["step"] = "6"' '"step" must be an integer'
    edit step_gone 'del s["step"]' '"step" must be an integer'
    edit step_huge 'text = json.dumps(s).replace("\"step\": 6", "\"step\": 99999999999999999999999")' '"step" must be an integer'
    edit signature_lr 's["signature"] = s["signature"].replace("lr=0.01;", "lr=0.02;")' 'different lr'
    edit signature_gone 'del s["signature"]' '"signature" must be a string'
    edit checksum_gone 'del s["checksum"]' '"checksum" must be 16'
    edit checksum_other 's["checksum"] = "%016x" % (int(s["checksum"], 16) ^ 1)' 'checksum does not match'
    edit format_other 's["format"] = "lizard-checkpoint-2"' '"format" must be'
    edit top_extra 's["note"] = 1' '"note" is not a field of a checkpoint'
    edit not_json 'text = "{\"step\": 6,"' 'state.json: line'
    edit empty_state 'text = ""' 'state.json: line'
    edit array_state 'text = "[]"' 'not a JSON object'
    edit duplicate_key 'text = json.dumps(s)[:-1] + ", \"step\": 6}"' 'state.json: line'
    edit tensor_gone 'del t["layers.1.gate.weight.adam_v"]' "tensor 'layers.1.gate.weight.adam_v' is missing"
    edit tensor_extra 't["layers.0.gate.weight"] = t["layers.1.gate.weight"]' "tensor 'layers.0.gate.weight' is not one of this run's"
    edit tensor_renamed 't["layers.2.meta_logits"] = t.pop("layers.3.meta_logits")' "'layers.3.meta_logits' is missing"
    edit tensor_shape 't["layers.1.meta_logits"][1] = [1, 2]' "is F32 \[1, 2\]; this run has F32 \[2\]"
    edit tensor_dtype 'dt, sh, b = t["layers.1.meta_logits"]; t["layers.1.meta_logits"] = ["I32", sh, b]' "is I32 \[2\]"
    edit tensor_f16 'dt, sh, b = t["layers.1.meta_logits"]; t["layers.1.meta_logits"] = ["F16", [4], b]' "is F16 \[4\]"
    edit tensor_nan 'dt, sh, b = t["layers.3.feature_map_k.weight"]; t["layers.3.feature_map_k.weight"][2] = b[:8] + struct.pack("<f", float("nan")) + b[12:]' "'layers.3.feature_map_k.weight' holds a NaN or infinity (element 2)"
    edit tensor_inf 'dt, sh, b = t["layers.1.window_alpha.adam_v"]; t["layers.1.window_alpha.adam_v"][2] = struct.pack("<f", float("inf"))' "'layers.1.window_alpha.adam_v' holds a NaN"
    edit tensor_bit 'dt, sh, b = t["layers.3.gate.weight"]; t["layers.3.gate.weight"][2] = bytes([b[0] ^ 1]) + b[1:]' "checksum does not match"
    edit tensor_swap 'a, b = t["layers.1.gate.weight"], t["layers.3.gate.weight"]; t["layers.1.gate.weight"], t["layers.3.gate.weight"] = b, a' "checksum does not match"
    edit tensors_empty 'open(d + "/tensors.safetensors", "wb").write(b""); import os; os._exit(0)' "tensors.safetensors: file is empty"
    edit tensors_cut 'open(d + "/tensors.safetensors", "wb").write(raw[:len(raw) // 2]); open(d + "/state.json", "w").write(json.dumps(s)); import os; os._exit(0)' "tensors.safetensors"
    edit tensors_gone 'import os; os.remove(d + "/tensors.safetensors"); os._exit(0)' "tensors.safetensors: cannot open"
    edit state_gone 'import os; os.remove(d + "/state.json"); os._exit(0)' "state.json"
    # a state from the tensors of step 6 and the state of step 7 (as two files renamed one after the other could pair them)
    "$LIZARD" distill "${S[@]}" --out "$TMP/P7" --stop-at-step 7 2>/dev/null
    rm -rf "$TMP/M"; cp -r "$TMP/P6" "$TMP/M"; cp "$TMP/P7/distill_state/state.json" "$TMP/M/distill_state/"
    expect_error "checksum does not match" "$LIZARD" distill "${S[@]}" --out "$TMP/M" --resume
    # the state of another run's unit, and an earlier version's two files
    rm -rf "$TMP/V"; mkdir "$TMP/V"; echo '{"step": 6}' >"$TMP/V/distill_state.json"
    expect_error "is an earlier version's" "$LIZARD" distill "${S[@]}" --out "$TMP/V" --resume
    echo "distill state: $n_edits edited states refused"

    # killed at every write, sync and rename of its checkpoints (the first after step 4, the final one after
    # step 8): --resume, or when no checkpoint was whole yet a refusal naming it, then the bytes of one run
    K=(--teacher "$T" --data "$TMP/data.txt" --seq-len 32 --batch 2 --tokens 512 --window 8 --feature-dim 8
       --meta-tokens 2 --lr 1e-2 --eval-batches 1 --log-every 1000 --softmax-layers 0,1,2 --seed 7
       --checkpoint-every 4)
    "$LIZARD" distill "${K[@]}" --out "$TMP/KU" 2>/dev/null && ok || bad "the uninterrupted run K"
    kills=0 resumed=0 refused=0
    for n in $(seq 1 400); do
        rm -rf "$TMP/KK"
        (LIZARD_CHECKPOINT_KILL=$n "$LIZARD" distill "${K[@]}" --out "$TMP/KK") 2>/dev/null
        rc=$?
        if [ $rc -eq 0 ]; then break; fi
        [ $rc -eq 137 ] || { bad "kill at $n: exit $rc"; break; }
        kills=$((kills + 1))
        leftovers=$(ls "$TMP/KK" | grep -c 'distill_state\.')
        if "$LIZARD" distill "${K[@]}" --out "$TMP/KK" --resume 2>"$TMP/kk.err"; then
            resumed=$((resumed + 1))
            cmp -s "$TMP/KU/model.safetensors" "$TMP/KK/model.safetensors" && ok ||
                bad "killed at point $n, resumed: the model differs from one run"
            [ "$(ls "$TMP/KK" | grep -c 'distill_state\.')" = 0 ] && ok ||
                bad "killed at point $n: left behind after the resumed run: $(ls "$TMP/KK")"
        else
            refused=$((refused + 1))
            grep -q "has no distill_state to continue from" "$TMP/kk.err" && [ "$leftovers" -le 1 ] && ok ||
                bad "killed at point $n: resume: $(cat "$TMP/kk.err")"
        fi
    done
    echo "distill state: killed at $kills points: $resumed resumed to one run's bytes, $refused before a first whole checkpoint"
    [ "$kills" -ge 40 ] && [ "$resumed" -ge 20 ] && ok || bad "too few kill points: $kills ($resumed resumed)"

    # a non-finite loss (exp feature maps at --lr 1 overflow on step 3): one line naming the step and the layer,
    # exit 2, the checkpoint of step 2 kept
    N=(--teacher "$T" --data "$TMP/data.txt" --seq-len 32 --batch 2 --tokens 640 --window 8 --feature-dim 8
       --meta-tokens 2 --lr 1 --eval-batches 1 --log-every 1000 --feature-map exp --checkpoint-every 2)
    "$LIZARD" distill "${N[@]}" --out "$TMP/N" 2>"$TMP/n.err"
    rc=$?
    line=$(grep "lizard: error" "$TMP/n.err")
    [ $rc -eq 2 ] && [ "$(grep -c "lizard: error" "$TMP/n.err")" = 1 ] &&
        [[ "$line" =~ step\ ([0-9]+):\ layer\ [0-9]:\ the\ (loss|gradient\ of\ [a-z_.]+)\ is\ not\ finite ]] &&
        [[ "$line" == *"the checkpoint of step 2 in $TMP/N is kept"* ]] && ok ||
        bad "non-finite loss: rc $rc: $(cat "$TMP/n.err")"
    python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['step'] == 2" "$TMP/N/distill_state/state.json" &&
        ok || bad "the kept checkpoint: $(cat "$TMP/N/distill_state/state.json")"
    "$LIZARD" distill "${N[@]}" --out "$TMP/N" --resume 2>"$TMP/n2.err"
    [ $? -eq 2 ] && [ "$(grep "lizard: error" "$TMP/n2.err")" = "$line" ] && ok ||
        bad "resumed into the same overflow: $(cat "$TMP/n2.err")"
    "$LIZARD" generate --model "$TMP/N" --ids 1,2 --max-tokens 2 >/dev/null 2>&1 && ok || bad "the kept folder loads"
fi

echo "distill_test $MODE: $pass passed, $fail failed"
[ $fail -eq 0 ]
