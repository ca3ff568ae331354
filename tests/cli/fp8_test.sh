#!/usr/bin/env bash
# fp8_test.sh LIZARD SOURCE_DIR - FP8 weights (kernels/fp8_rule.h, --dtype fp8) end to end:
#   - the FP8 checkpoints of tests/fixtures/fp8_* (the hub's layouts: fbgemm_fp8 per channel,
#     compressed-tensors per channel with BF16 scales, fp8 per tensor with [] and [1] scales; written by
#     tests/fixtures/gen_fp8_fixtures.py, which quantizes with exact fractions of its own):
#     without --dtype fp8 they load dequantized, with the same logits, bit for bit, as the F32 model
#     that the generator dequantizes (s * q); with --dtype fp8 they run as FP8 within 1e-5 of it (only
#     the order of the scale's product differs);
#   - quantizing at load: the base model with --dtype fp8 gives the same logits, bit for bit, as the
#     generator's fp8_fbgemm folder run with --dtype fp8 (the C rule = the generator's);
#   - layouts lizard does not read, refused by name in one line (block-wise scales, other methods,
#     formats and strategies, E5M2, missing, misshapen, negative or integer scales, a NaN code);
#   - a PEFT adapter merged before quantizing; (a pipeline of two ranks: tests/mpi/fp8_mpi_test.sh);
#   - generate, eval and info with --dtype fp8; `lizard init --dtype fp8` (fbgemm_fp8's layout) holds what
#     --dtype fp8 makes of the same preset in bf16; --device cuda refused where no GPU is; a session saved
#     with FP8 weights is refused by a run without them (another model's state).
set -u
LIZARD=$1
SRC=$2
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error

FIX=$SRC/tests/fixtures
GEN=$FIX/gen_fp8_fixtures.py
IDS=305,265,245,226,40,81,264,106,271,56,111,312,163,267,192,21,108,160,198,315,234,107,275,134,108

fwd() { # MODEL OUT [flags]: forward's logits of IDS
    local model=$1 out=$2; shift 2
    "$LIZARD" forward --model "$model" --ids $IDS --logits-out "$out" "$@" >/dev/null 2>"$TMP/fwd.err"
}

rel_err() { # A.npy B.npy: ||a - b|| / ||b||
    python3 - "$1" "$2" <<'PY'
import math, struct, sys
def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    d = b[10 + n:]
    return struct.unpack("<%df" % (len(d) // 4), d)
a, b = read(sys.argv[1]), read(sys.argv[2])
print(math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(y * y for y in b)))
PY
}

# 1. the three layouts read, dequantized and as FP8
for layout in fbgemm ct_channel per_tensor; do
    F=$FIX/fp8_$layout
    python3 "$GEN" --dequantize "$F" "$TMP/deq_$layout" || bad "$layout: the generator's dequantized copy"
    fwd "$TMP/deq_$layout" "$TMP/ref_$layout.npy" || bad "$layout: forward of the dequantized copy: $(cat "$TMP/fwd.err")"
    if fwd "$F" "$TMP/deq_load_$layout.npy" && cmp -s "$TMP/deq_load_$layout.npy" "$TMP/ref_$layout.npy"; then ok
    else bad "$layout: dequantized at load, not the generator's dequantized logits: $(cat "$TMP/fwd.err")"; fi
    if fwd "$F" "$TMP/fp8_$layout.npy" --dtype fp8; then
        err=$(rel_err "$TMP/fp8_$layout.npy" "$TMP/ref_$layout.npy")
        echo "  $layout: --dtype fp8 against the dequantized F32 model: rel err $err"
        python3 -c "import sys; sys.exit(0 if $err <= 1e-5 else 1)" && ok || bad "$layout: --dtype fp8 rel err $err > 1e-5"
    else
        bad "$layout: forward --dtype fp8: $(cat "$TMP/fwd.err")"
    fi
done

# 2. quantized at load by the C rule = quantized by the generator's fractions
fwd "$FIX/hybrid50/model" "$TMP/q_load.npy" --dtype fp8 || bad "base --dtype fp8: $(cat "$TMP/fwd.err")"
cmp -s "$TMP/q_load.npy" "$TMP/fp8_fbgemm.npy" && ok || bad "quantized at load: not the generator's codes and scales"
fwd "$FIX/hybrid50/model" "$TMP/f32.npy" || bad "base fp32"
err=$(rel_err "$TMP/q_load.npy" "$TMP/f32.npy")
echo "  hybrid50: --dtype fp8 against fp32: rel err $err"
python3 -c "import sys; sys.exit(0 if 1e-3 < $err < 0.15 else 1)" && ok || bad "fp8 against fp32: rel err $err"

# 3. refused by name, in one line
python3 "$GEN" --refusals "$FIX/fp8_fbgemm" "$TMP/ref" || bad "the generator's refusal folders"
refuse() { # FOLDER NEEDLE [flags]
    local d=$1 needle=$2; shift 2
    expect_error "$needle" "$LIZARD" forward --model "$TMP/ref/$d" --ids 1,2,3 --logits-out "$TMP/x.npy" "$@"
}
for flags in "" "--dtype fp8"; do
    refuse block_fp8 "block-wise FP8 (quant_method 'fp8' with weight_block_size" $flags
    refuse block_tensors "block-wise scales 'model.layers.0.self_attn.q_proj.weight_scale_inv'" $flags
    refuse ct_block "strategy 'block' is not read" $flags
    refuse ct_group "strategy 'group' is not read" $flags
    refuse ct_int8 "int 8-bit weights are not read" $flags
    refuse ct_packed "format 'pack-quantized' is not read" $flags
    refuse awq "quant_method 'awq' is not read" $flags
    refuse fp8_e5m2_fmt "FP8 format 'e5m2' is not read" $flags
    refuse block_shape_scale "q_proj.weight_scale' has shape .2, 1.: lizard reads one scale per output channel" $flags
    refuse no_scale "has no scale tensor 'model.layers.0.self_attn.q_proj.weight_scale'" $flags
    refuse negative_scale "weight_scale': element 0 is -1" $flags
    refuse nan_code "'model.layers.0.self_attn.q_proj.weight': element 0 is a NaN" $flags
    refuse e5m2_weight "is FP8 E5M2: lizard reads FP8 weights in E4M3 only" $flags
    refuse int_scale "has dtype I32, expected F32, F16 or BF16" $flags
done

# 4. the commands with --dtype fp8
M=$FIX/fp8_ct_channel
out=$("$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 6 --dtype fp8 --format json 2>"$TMP/err") &&
    [ -n "$out" ] && ok || bad "generate --dtype fp8: $(cat "$TMP/err")"
for layout in fbgemm ct_channel per_tensor; do # the base model's parameters (scales are not), the FP8 layers
    "$LIZARD" info --model "$FIX/fp8_$layout" >"$TMP/info" 2>&1 && grep -q "parameters     214216 = 213568 teacher" "$TMP/info" &&
        grep -q "weights        F8_E4M3 in 28 of 29 linear layers" "$TMP/info" && ok ||
        bad "info of fp8_$layout: $(cat "$TMP/info")"
done
printf 'the lizard basks on a warm stone in the sun\n%.0s' 1 2 3 4 >"$TMP/text.txt" # (eval: a folder with a tokenizer)
"$LIZARD" eval --model "$FIX/hub_llama31_instruct" --text "$TMP/text.txt" --ppl-context 16 --dtype fp8 --json \
    >"$TMP/eval.json" 2>"$TMP/err" && grep -q '"ppl"' "$TMP/eval.json" && ok || bad "eval --dtype fp8: $(cat "$TMP/err")"
if ! nvidia-smi -L >/dev/null 2>&1; then # (where a GPU runs it, tests/gpu/device_fp8.sh checks it)
    expect_error "--device cuda: " \
        "$LIZARD" forward --model "$M" --ids 1,2 --logits-out "$TMP/x.npy" --dtype fp8 --device cuda
fi
expect_error "--dtype: expected bf16 or fp32, got 'fp9'" \
    "$LIZARD" forward --model "$M" --ids 1,2 --logits-out "$TMP/x.npy" --dtype fp9
# a session holds the state of the weights it was made with
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 3 --dtype fp8 --session "$TMP/s.lzs" >/dev/null 2>&1 && ok ||
    bad "generate --dtype fp8 --session"
"$LIZARD" generate --model "$M" --max-tokens 3 --dtype fp8 --session "$TMP/s.lzs" >/dev/null 2>"$TMP/err" && ok ||
    bad "an FP8 session continued with FP8 weights: $(cat "$TMP/err")"
expect_error "or --dtype fp8 on one side only" "$LIZARD" generate --model "$M" --max-tokens 3 --session "$TMP/s.lzs"

# 5. a PEFT adapter merged at load, then quantized (an FP8 checkpoint's weight: dequantized, merged, quantized
#    again): an adapter of zeros changes no code; one of values changes the logits, within FP8's error of fp32's
make_adapter() { # DIR SCALE: q_proj and v_proj factors of the 4 layers, r 2; B = SCALE * small values
    python3 - "$1" "$2" <<'PY'
import json, os, random, struct, sys
d, scale = sys.argv[1], float(sys.argv[2])
os.makedirs(d, exist_ok=True)
rng, t = random.Random(5), {}
for layer in range(4):
    for mod, out in (("q_proj", 64), ("v_proj", 32)):
        p = "base_model.model.model.layers.%d.self_attn.%s" % (layer, mod)
        t[p + ".lora_A.weight"] = ([2, 64], [rng.uniform(-0.5, 0.5) for _ in range(128)])
        t[p + ".lora_B.weight"] = ([out, 2], [scale * rng.uniform(-0.5, 0.5) for _ in range(2 * out)])
json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], "bias": "none"},
          open(d + "/adapter_config.json", "w"))
head, blobs, off = {}, [], 0
for k, (shape, v) in sorted(t.items()):
    b = struct.pack("<%df" % len(v), *v)
    head[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(d + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
}
make_adapter "$TMP/zero" 0 && make_adapter "$TMP/lora" 0.1 || bad "the adapters"
fwd "$FIX/hybrid50/model" "$TMP/zero.npy" --dtype fp8 --adapter "$TMP/zero" && cmp -s "$TMP/zero.npy" "$TMP/q_load.npy" &&
    ok || bad "an adapter of zeros changed FP8 codes: $(cat "$TMP/fwd.err")"
fwd "$FIX/hybrid50/model" "$TMP/lora_fp8.npy" --dtype fp8 --adapter "$TMP/lora" &&
    fwd "$FIX/hybrid50/model" "$TMP/lora_f32.npy" --adapter "$TMP/lora" || bad "--adapter: $(cat "$TMP/fwd.err")"
err=$(rel_err "$TMP/lora_fp8.npy" "$TMP/lora_f32.npy") moved=$(rel_err "$TMP/lora_f32.npy" "$TMP/f32.npy")
echo "  --adapter: fp8 against fp32 rel err $err (the adapter moves fp32's logits by $moved)"
python3 -c "import sys; sys.exit(0 if $err < 0.15 and $moved > 0.02 else 1)" && ok ||
    bad "--adapter --dtype fp8: rel err $err against fp32 with the adapter (which moves the logits by $moved)"
for flags in "" "--dtype fp8"; do # an FP8 checkpoint with an adapter: dequantized, merged (and quantized again)
    fwd "$FIX/fp8_fbgemm" "$TMP/fp8_lora.npy" $flags --adapter "$TMP/lora" || bad "FP8 folder --adapter $flags"
    err=$(rel_err "$TMP/fp8_lora.npy" "$TMP/lora_f32.npy")
    echo "  fp8_fbgemm --adapter $flags: rel err $err against the F32 base with the adapter"
    python3 -c "import sys; sys.exit(0 if $err < 0.15 else 1)" && ok || bad "FP8 folder --adapter $flags: rel err $err"
done

# 6. through a pipeline of two ranks: tests/mpi/fp8_mpi_test.sh (mpi.fp8)

# 7. lizard init --dtype fp8: fbgemm_fp8's layout, what --dtype fp8 makes of the same preset in bf16
for dt in bf16 fp8; do
    "$LIZARD" init --config tiny-hybrid --dtype $dt --out "$TMP/init_$dt" --seed 4 >"$TMP/init_$dt.out" 2>&1 ||
        bad "init --dtype $dt: $(cat "$TMP/init_$dt.out")"
done
grep -q "863892 parameters, .* bytes F8_E4M3 + BF16" "$TMP/init_fp8.out" && grep -q '"fbgemm_fp8"' "$TMP/init_fp8/config.json" &&
    ok || bad "init --dtype fp8: $(cat "$TMP/init_fp8.out")"
fwd "$TMP/init_bf16" "$TMP/init_bf16.npy" --dtype fp8 && fwd "$TMP/init_fp8" "$TMP/init_fp8.npy" --dtype fp8 &&
    cmp -s "$TMP/init_bf16.npy" "$TMP/init_fp8.npy" && ok || bad "init --dtype fp8: not the bf16 preset quantized at load"

echo "fp8_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
