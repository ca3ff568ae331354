#!/usr/bin/env bash
# finetune_test.sh LIZARD SRC MODE - `lizard finetune` end to end on the tiny-hybrid preset and a
# slice of real text (tests/fixtures/corpus/finetune_slice.txt).
#   MODE fall:   the held-out loss falls over the run; the merged folder loads and generates; the
#                PEFT folder has PEFT's config keys and tensor names, and merged = base + alpha/r B A;
#   MODE resume: --stop-at-step + --resume gives the losses of one uninterrupted run, bit for bit;
#   MODE errors: bad input -> exit 2, one line naming the fault, no output folder;
#   MODE adapter: the PEFT folder merged at load (--adapter) gives the merged folder's logits, and a
#                adapter that does not fit the model is refused in one line.
set -u
LIZARD=$1
SRC=$2
MODE=$3
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error

M=$TMP/model
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 && ok || bad "init tiny-hybrid"
TEXT=$SRC/tests/fixtures/corpus/finetune_slice.txt
SMALL=(--model "$M" --data "$TEXT" --seq-len 32 --batch 2 --lr 3e-3 --log-every 1000)

if [ "$MODE" = fall ]; then
    "$LIZARD" finetune "${SMALL[@]}" --tokens 3200 --out "$TMP/A" --adapter-out "$TMP/Aa" --log "$TMP/A.jsonl" \
        --lora-targets q,k,v,o,gate,up,down --eval-batches 4 2>"$TMP/A.err" && ok || bad "finetune: $(tail -2 "$TMP/A.err")"
    python3 - "$TMP/A.jsonl" <<'PY' && ok || bad "held-out loss did not fall: $(grep eval "$TMP/A.jsonl")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ev = {r["eval"]: r["valid_loss"] for r in rows if "eval" in r}
steps = [r for r in rows if "step" in r and "eval" not in r]
assert len(steps) == 50 and all(r["tok_per_s"] > 0 and r["grad_norm"] > 0 for r in steps), len(steps)
print(f"held-out loss {ev['start']:.4f} -> {ev['end']:.4f}")
assert ev["end"] < ev["start"] - 0.05, ev
PY
    grep -q "tok/s  loss" "$TMP/A.err" && ok || bad "progress line: $(head -3 "$TMP/A.err")"
    "$LIZARD" generate --model "$TMP/A" --prompt "The whale" --max-tokens 4 >/dev/null 2>&1 && ok || bad "generate"
    python3 - "$M" "$TMP/A" "$TMP/Aa" <<'PY' && ok || bad "adapter folder or merged weights"
import json, struct, sys
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); head.pop("__metadata__", None)
    out = {}
    for name, t in head.items():
        assert t["dtype"] == "F32", t
        b, e = t["data_offsets"]
        out[name] = (t["shape"], struct.unpack(f"<{(e - b) // 4}f", raw[8 + n + b:8 + n + e]))
    return out
base, merged = read(sys.argv[1] + "/model.safetensors"), read(sys.argv[2] + "/model.safetensors")
ad = read(sys.argv[3] + "/adapter_model.safetensors")
cfg = json.load(open(sys.argv[3] + "/adapter_config.json"))
for key in ["peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules", "bias",
            "fan_in_fan_out", "base_model_name_or_path", "inference_mode", "modules_to_save"]:
    assert key in cfg, key
assert cfg["peft_type"] == "LORA" and cfg["r"] == 8 and cfg["lora_alpha"] == 16, cfg
assert sorted(cfg["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"]), cfg
assert len(ad) == 4 * 7 * 2, len(ad)
scale = cfg["lora_alpha"] / cfg["r"]
for l in range(4):
    for parent, mod in [("self_attn", "q_proj"), ("self_attn", "v_proj"), ("mlp", "down_proj")]:
        pre = f"base_model.model.model.layers.{l}.{parent}.{mod}"
        (r, i), A = ad[pre + ".lora_A.weight"]
        (o, r2), B = ad[pre + ".lora_B.weight"]
        assert r == r2 == 8
        name = f"model.layers.{l}.{parent}.{mod}.weight"
        (o2, i2), W = base[name]
        _, Wm = merged[name]
        assert (o2, i2) == (o, i)
        worst = max(abs(Wm[a * i + b] - W[a * i + b] - scale * sum(B[a * r + k] * A[k * i + b] for k in range(r)))
                    for a in range(0, o, 7) for b in range(0, i, 5))
        assert worst < 1e-5, (name, worst)
        assert any(abs(x) > 1e-4 for x in B), name
print("adapter: PEFT keys and names; merged = base + scale B A")
PY
fi

if [ "$MODE" = resume ]; then
    R=(--tokens 1280 --lora-dropout 0.1 --eval-batches 0)
    "$LIZARD" finetune "${SMALL[@]}" "${R[@]}" --out "$TMP/one" --log "$TMP/one.jsonl" 2>"$TMP/one.err" && ok ||
        bad "one run: $(tail -1 "$TMP/one.err")"
    "$LIZARD" finetune "${SMALL[@]}" "${R[@]}" --out "$TMP/two" --log "$TMP/two.jsonl" --stop-at-step 7 \
        2>"$TMP/two.err" && ok || bad "first half: $(tail -1 "$TMP/two.err")"
    [ ! -e "$TMP/two/config.json" ] && ok || bad "a stopped run wrote a model"
    "$LIZARD" finetune "${SMALL[@]}" "${R[@]}" --out "$TMP/two" --log "$TMP/two.jsonl" --resume 2>>"$TMP/two.err" &&
        ok || bad "resume: $(tail -1 "$TMP/two.err")"
    python3 - "$TMP/one.jsonl" "$TMP/two.jsonl" <<'PY' && ok || bad "resumed losses differ"
import json, sys
def losses(p):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(p)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 20 and a == b, (a, b)
PY
    cmp "$TMP/one/model.safetensors" "$TMP/two/model.safetensors" && ok || bad "resumed weights differ"
    expect_error "different lr" "$LIZARD" finetune "${SMALL[@]}" "${R[@]}" --out "$TMP/two" --resume --lr 1e-3 \
        --stop-at-step 1
    # the checkpoint is one unit: an edited step, an edited tensor byte, a non-finite value are refused
    U=$TMP/two/finetune_state
    cp -r "$U" "$TMP/saved_unit"
    for step in 0 100 -3; do
        python3 - "$U/state.json" "$step" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["step"] = int(sys.argv[2]); json.dump(s, open(sys.argv[1], "w"))
PY
        expect_error "finetune_state" "$LIZARD" finetune "${SMALL[@]}" "${R[@]}" --out "$TMP/two" --resume
        rm -rf "$U" && cp -r "$TMP/saved_unit" "$U"
    done
    python3 - "$U/tensors.safetensors" <<'PY'
import struct, sys
raw = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack("<Q", raw[:8])[0]
raw[8 + n + 4] ^= 1  # one bit of the first tensor's second value
open(sys.argv[1], "wb").write(raw)
PY
    expect_error "checksum" "$LIZARD" finetune "${SMALL[@]}" "${R[@]}" --out "$TMP/two" --resume
    rm -rf "$U" && cp -r "$TMP/saved_unit" "$U"
    # a writer killed at each of its writes, syncs and renames resumes to the bytes of one run
    K=(--tokens 1280 --eval-batches 0 --checkpoint-every 4)
    "$LIZARD" finetune "${SMALL[@]}" "${K[@]}" --out "$TMP/KU" 2>/dev/null && ok || bad "the uninterrupted run"
    kills=0 resumed=0
    for n in $(seq 1 200); do
        rm -rf "$TMP/KK"
        (LIZARD_CHECKPOINT_KILL=$n "$LIZARD" finetune "${SMALL[@]}" "${K[@]}" --out "$TMP/KK") 2>/dev/null
        rc=$?
        [ $rc -eq 0 ] && break
        [ $rc -eq 137 ] || { bad "kill at $n: exit $rc"; break; }
        kills=$((kills + 1))
        if "$LIZARD" finetune "${SMALL[@]}" "${K[@]}" --out "$TMP/KK" --resume 2>"$TMP/kk.err"; then
            resumed=$((resumed + 1))
            cmp -s "$TMP/KU/model.safetensors" "$TMP/KK/model.safetensors" && ok ||
                bad "killed at point $n, resumed: the model differs from one run"
        else
            grep -q "has no finetune_state" "$TMP/kk.err" && ok || bad "killed at point $n: $(tail -1 "$TMP/kk.err")"
        fi
    done
    echo "finetune_test resume: $kills kill points, $resumed resumed to the bytes of one run"
    [ "$resumed" -gt 0 ] && ok || bad "no kill point left a checkpoint to resume from"
fi

if [ "$MODE" = errors ]; then
    O=$TMP/o
    "$LIZARD" init --config tiny-teacher --out "$TMP/teacher" --seed 1 >/dev/null 2>&1 && ok || bad "init teacher"
    expect_error "no lizard block" "$LIZARD" finetune --model "$TMP/teacher" --data "$TEXT" --out "$O"
    expect_error "--lora-rank 0" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --lora-rank 0
    expect_error "--lora-rank 5000" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --lora-rank 5000
    expect_error "--lora-rank 100: must be 1 .. 64" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --lora-rank 100
    expect_error "unknown module 'qkv'" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --lora-targets q,qkv
    head -c 40 "$TEXT" >"$TMP/short.txt"
    expect_error "fewer than one sequence" "$LIZARD" finetune "${SMALL[@]}" --data "$TMP/short.txt" --out "$O"
    expect_error "nope.txt" "$LIZARD" finetune "${SMALL[@]}" --data "$TMP/nope.txt" --out "$O"
    expect_error "--lora-dropout" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --lora-dropout 1
    expect_error "--resume" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --resume
    if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
        expect_error "no CUDA device\|no CUDA backend" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --device cuda
    fi
    expect_error "--valid $TMP/nope.txt" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --valid "$TMP/nope.txt"
    : >"$TMP/a-file"
    expect_error "--out $TMP/a-file: exists and is not a folder" "$LIZARD" finetune "${SMALL[@]}" --out "$TMP/a-file"
    expect_error "--adapter-out $TMP/model: holds a model" "$LIZARD" finetune "${SMALL[@]}" --out "$O" \
        --adapter-out "$TMP/model"
    expect_error "step [0-9]*: the \(gradient is not finite\|loss is\)" "$LIZARD" finetune "${SMALL[@]}" --out "$O" \
        --lr 0.3 --tokens 3200 --eval-batches 0
    expect_error "--micro-batch 3: must divide --batch 2" "$LIZARD" finetune "${SMALL[@]}" --out "$O" --micro-batch 3
    [ ! -e "$O" ] && ok || bad "a refused run left $O"
fi

if [ "$MODE" = adapter ]; then
    # Lizard tensors frozen: the adapter alone is the whole change, so base + adapter = the merged folder
    "$LIZARD" finetune "${SMALL[@]}" --tokens 640 --freeze-lizard --out "$TMP/A" --adapter-out "$TMP/Aa" \
        --lora-targets q,v,o,down --eval-batches 0 2>"$TMP/A.err" && ok || bad "finetune: $(tail -2 "$TMP/A.err")"
    "$LIZARD" forward --model "$TMP/A" --ids 5,17,42,99,3,250 --logits-out "$TMP/merged.npy" 2>/dev/null &&
    "$LIZARD" forward --model "$M" --adapter "$TMP/Aa" --ids 5,17,42,99,3,250 --logits-out "$TMP/adapted.npy" \
        2>"$TMP/f.err" && "$LIZARD" forward --model "$M" --ids 5,17,42,99,3,250 --logits-out "$TMP/base.npy" \
        2>/dev/null && ok || bad "forward: $(cat "$TMP/f.err")"
    python3 - "$TMP/merged.npy" "$TMP/adapted.npy" "$TMP/base.npy" <<'PY' && ok || bad "base + --adapter != merged"
import struct, sys
def npy(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<H", raw[8:10])[0]
    body = raw[10 + n:]
    return struct.unpack(f"<{len(body) // 4}f", body)
merged, adapted, base = (npy(p) for p in sys.argv[1:])
worst = max(abs(a - b) for a, b in zip(merged, adapted))
moved = max(abs(a - b) for a, b in zip(merged, base))
print(f"base + adapter vs merged: {worst:.2e}; merged vs base: {moved:.2e}")
assert worst < 1e-4 and moved > 1e-3, (worst, moved)
PY
    # a session saved with the adapter is another model's state than the base's
    "$LIZARD" generate --model "$M" --adapter "$TMP/Aa" --ids 5,17 --max-tokens 2 --session "$TMP/s.lzs" \
        >/dev/null 2>&1 && ok || bad "generate --adapter --session"
    expect_error "s.lzs" "$LIZARD" generate --model "$M" --max-tokens 2 --session "$TMP/s.lzs"
    # adapters that do not fit: each refused in one line naming the fault
    bad_adapter() { # NAME PYTHON-EDIT: a copy of the adapter folder, edited
        rm -rf "$TMP/$1" && cp -r "$TMP/Aa" "$TMP/$1" && python3 - "$TMP/$1" <<<"$2"
    }
    bad_adapter r4 'import json,sys; p=sys.argv[1]+"/adapter_config.json"; c=json.load(open(p)); c["r"]=4; json.dump(c,open(p,"w"))'
    expect_error "(r = 4)" "$LIZARD" forward --model "$M" --adapter "$TMP/r4" --ids 1,2 --logits-out "$TMP/x.npy"
    bad_adapter dora 'import json,sys; p=sys.argv[1]+"/adapter_config.json"; c=json.load(open(p)); c["use_dora"]=True; json.dump(c,open(p,"w"))'
    expect_error "use_dora" "$LIZARD" forward --model "$M" --adapter "$TMP/dora" --ids 1,2 --logits-out "$TMP/x.npy"
    bad_adapter ia3 'import json,sys; p=sys.argv[1]+"/adapter_config.json"; c=json.load(open(p)); c["peft_type"]="IA3"; json.dump(c,open(p,"w"))'
    expect_error "peft_type 'IA3'" "$LIZARD" forward --model "$M" --adapter "$TMP/ia3" --ids 1,2 --logits-out "$TMP/x.npy"
    bad_adapter layer9 'import sys; p=sys.argv[1]+"/adapter_model.safetensors"; b=open(p,"rb").read(); open(p,"wb").write(b.replace(b"layers.0.", b"layers.9.", 2))'
    expect_error "no LoRA factor of a projection this model has" "$LIZARD" forward --model "$M" --adapter "$TMP/layer9" \
        --ids 1,2 --logits-out "$TMP/x.npy"
    expect_error "nowhere" "$LIZARD" forward --model "$M" --adapter "$TMP/nowhere" --ids 1,2 --logits-out "$TMP/x.npy"
    [ ! -e "$TMP/x.npy" ] && ok || bad "a refused adapter left an output file"
fi

echo "finetune_test $MODE: $pass passed, $fail failed"
[ $fail -eq 0 ]
