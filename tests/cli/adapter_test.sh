#!/usr/bin/env bash
# adapter_test.sh LIZARD - PEFT adapter folders (--adapter) as a hostile user would hand them over:
#   - one adapter's factors in F32, F16, BF16 and F64 (values every dtype holds exactly) give the same
#     logits, and those of a model folder merged here (base + alpha / r B A, in double); use_rslora
#     scales by alpha / sqrt(r);
#   - every other dtype PEFT could write (I64, I32, I16, I8, U8, BOOL, F8), an F64 value with no exact
#     F32, a NaN or an infinity: refused in one line naming the tensor (they merged as zeros before);
#   - target_modules (a list, a regex, "all-linear", full names), exclude_modules, layers_to_transform
#     (an int, a list) and layers_pattern decide which tensors may be there, as PEFT decides: a tensor
#     outside them is refused;
#   - fields that would change the model and are not merged (modules_to_save, bias, use_dora,
#     rank_pattern, layer_replication, lora_bias, an unknown field that is set): refused by name.
set -u
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error

M=$TMP/base
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 3 >/dev/null 2>&1 && ok || bad "init tiny-hybrid"
IDS=5,17,42,99,3,250,7
"$LIZARD" forward --model "$M" --ids $IDS --logits-out "$TMP/base.npy" >/dev/null 2>&1 || bad "forward base"

# make_adapter DIR CONFIG-EDIT TENSOR-EDIT: q_proj and v_proj factors (r 4) of layers 0..3, values k/256
# (|k| <= 64: exact in F16, BF16, F32, F64), alpha 8; CONFIG-EDIT changes c (the config dict),
# TENSOR-EDIT changes t ({name: [dtype, shape, list of floats or raw bytes]})
make_adapter() {
    python3 - "$1" "$2" "${3:-pass}" <<'PY'
import json, os, random, struct, sys
d, cedit, tedit = sys.argv[1:4]
os.makedirs(d, exist_ok=True)
rng = random.Random(11)
H, KV, R = 128, 64, 4
t = {}
for layer in range(4):
    for mod, out in (("q_proj", H), ("v_proj", KV)):
        p = f"base_model.model.model.layers.{layer}.self_attn.{mod}"
        t[p + ".lora_A.weight"] = ["F32", [R, H], [rng.randint(-64, 64) / 256 for _ in range(R * H)]]
        t[p + ".lora_B.weight"] = ["F32", [out, R], [rng.randint(-64, 64) / 256 for _ in range(out * R)]]
c = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": R, "lora_alpha": 8, "lora_dropout": 0.0,
     "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False, "use_dora": False,
     "use_rslora": False, "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
     "rank_pattern": {}, "alpha_pattern": {}, "init_lora_weights": True, "inference_mode": True}
def f16(x):
    return struct.pack("<e", x)
def bf16(x):
    return struct.pack("<f", x)[2:]
pack = {"F32": lambda v: struct.pack("<%df" % len(v), *v), "F64": lambda v: struct.pack("<%dd" % len(v), *v),
        "F16": lambda v: b"".join(f16(x) for x in v), "BF16": lambda v: b"".join(bf16(x) for x in v)}
def as_dtype(dt):
    for k in t:
        t[k][0] = dt
exec(cedit)
exec(tedit)
json.dump(c, open(d + "/adapter_config.json", "w"))
head, blobs, off = {}, [], 0
for k, (dt, shape, v) in t.items():
    b = v if isinstance(v, bytes) else pack[dt](v)
    head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(head).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(d + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
}

# the base model with an adapter folder merged in double precision, written as F32
merge_here() {
    python3 - "$M" "$1" "$2" <<'PY'
import json, math, shutil, struct, sys
base, ad, out = sys.argv[1:4]
shutil.copytree(base, out)
raw = open(base + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
araw = open(ad + "/adapter_model.safetensors", "rb").read()
an = struct.unpack("<Q", araw[:8])[0]
ahead = json.loads(araw[8:8 + an])
c = json.load(open(ad + "/adapter_config.json"))
scale = c["lora_alpha"] / (math.sqrt(c["r"]) if c.get("use_rslora") else c["r"])
def tensor(h, blob, name):
    e = h[name]
    b, f = e["data_offsets"]
    fmt = {"F32": "f", "F64": "d"}[e["dtype"]]
    return list(struct.unpack("<%d%s" % ((f - b) // struct.calcsize(fmt), fmt), blob[b:f])), e["shape"]
for name in [k for k in ahead if k.endswith(".lora_A.weight")]:
    A, (r, cols) = tensor(ahead, araw[8 + an:], name)
    B, (rows, _) = tensor(ahead, araw[8 + an:], name.replace("lora_A", "lora_B"))
    wname = name[len("base_model.model."):].replace(".lora_A", "")
    W, _ = tensor(head, data, wname)
    for o in range(rows):
        for k in range(r):
            bk = scale * B[o * r + k]
            for j in range(cols):
                W[o * cols + j] += bk * A[k * cols + j]
    b, f = head[wname]["data_offsets"]
    data[b:f] = struct.pack("<%df" % len(W), *W)
open(out + "/model.safetensors", "wb").write(raw[:8 + n] + bytes(data))
PY
}

# max |a - b| / max |b| of two logits .npy files
rel_diff() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
def load(p):
    raw = open(p, "rb").read()
    h = struct.unpack("<H", raw[8:10])[0]
    return struct.unpack("<%df" % ((len(raw) - 10 - h) // 4), raw[10 + h:])
a, b = load(sys.argv[1]), load(sys.argv[2])
print("%.3g" % (max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)))
PY
}

logits_with() { # ADAPTER OUT.npy
    "$LIZARD" forward --model "$M" --adapter "$1" --ids $IDS --logits-out "$2" >/dev/null 2>"$TMP/fwd.err"
}

# 1. every float dtype PEFT writes gives the same logits, those of the folder merged here
make_adapter "$TMP/a32" 'pass'
merge_here "$TMP/a32" "$TMP/merged"
"$LIZARD" forward --model "$TMP/merged" --ids $IDS --logits-out "$TMP/merged.npy" >/dev/null 2>&1 || bad "forward merged"
logits_with "$TMP/a32" "$TMP/F32.npy" && ok || bad "F32 adapter: $(cat "$TMP/fwd.err")"
d=$(rel_diff "$TMP/F32.npy" "$TMP/merged.npy")
python3 -c "import sys; sys.exit(float('$d') > 1e-5)" && ok || bad "F32 adapter vs merged here: $d"
moved=$(rel_diff "$TMP/F32.npy" "$TMP/base.npy")
python3 -c "import sys; sys.exit(float('$moved') < 1e-2)" && ok || bad "the adapter changes nothing: $moved"
echo "adapter: F32 vs merged here $d; vs the base $moved"
for dt in F16 BF16 F64; do
    make_adapter "$TMP/a$dt" 'pass' "as_dtype('$dt')"
    logits_with "$TMP/a$dt" "$TMP/$dt.npy" && cmp -s "$TMP/$dt.npy" "$TMP/F32.npy" && ok ||
        bad "$dt adapter: not the F32 adapter's logits $(cat "$TMP/fwd.err")"
done
# rsLoRA: alpha / sqrt(r): alpha 4 with r 4 scales as alpha 8 without
make_adapter "$TMP/rs" 'c["use_rslora"] = True; c["lora_alpha"] = 4'
logits_with "$TMP/rs" "$TMP/rs.npy" && cmp -s "$TMP/rs.npy" "$TMP/F32.npy" && ok || bad "use_rslora: $(cat "$TMP/fwd.err")"

refused=0
# refuse NAME CONFIG-EDIT TENSOR-EDIT NEEDLE: that adapter is refused in one line with NEEDLE, no output written
refuse() {
    make_adapter "$TMP/$1" "$2" "$3"
    rm -f "$TMP/x.npy"
    expect_error "$4" "$LIZARD" forward --model "$M" --adapter "$TMP/$1" --ids 1,2 --logits-out "$TMP/x.npy"
    [ ! -e "$TMP/x.npy" ] && ok || bad "$1: refused adapter wrote logits"
    refused=$((refused + 1))
}
Q0A=base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
# 2. dtypes with no exact F32 conversion, and values that are not finite
for dt in I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2; do
    refuse "dtype$dt" pass "t['$Q0A'][0] = '$dt'; w = {'I64': 8, 'I32': 4, 'I16': 2}.get('$dt', 1); t['$Q0A'][2] = bytes(512 * w)" \
        "tensor '$Q0A' is $dt: a LoRA factor must be F32, F16, BF16"
done
refuse f64_inexact pass "as_dtype('F64'); t['$Q0A'][2][5] = 0.1" "'$Q0A' is F64 and its element 5 (0.10000000000000001) has no exact F32"
refuse nan pass "t['$Q0A'][2][7] = float('nan')" "tensor '$Q0A' holds a NaN or infinity (element 7)"
refuse inf_bf16 pass "as_dtype('BF16'); t['$Q0A'][2][9] = float('inf')" "holds a NaN or infinity (element 9)"
refuse ninf_f16 pass "as_dtype('F16'); t['$Q0A'][2][0] = float('-inf')" "holds a NaN or infinity (element 0)"
# 3. what merges is what the config targets
V1=base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight
refuse only_q 'c["target_modules"] = ["q_proj"]' pass "model.layers.0.self_attn.v_proj, target_modules does not name it"
refuse regex_q 'c["target_modules"] = r".*\.q_proj"' pass "target_modules does not name it"
refuse layers0 'c["layers_to_transform"] = [0]' pass "model.layers.1.self_attn.q_proj, layers_to_transform does not hold its layer"
refuse layer_int 'c["layers_to_transform"] = 2' pass "layers_to_transform does not hold its layer"
refuse pattern_h 'c["layers_to_transform"] = [0, 1, 2, 3]; c["layers_pattern"] = "h"' pass "layers_pattern finds no layer index"
refuse exclude_v 'c["exclude_modules"] = ["v_proj"]' pass "exclude_modules excludes it"
refuse exclude_re 'c["exclude_modules"] = r"model\.layers\.[13]\..*"' pass "model.layers.1.self_attn.q_proj, exclude_modules excludes it"
refuse no_targets 'del c["target_modules"]' pass '"target_modules" is missing'
refuse null_targets 'c["target_modules"] = None' pass '"target_modules" is missing'
refuse number_targets 'c["target_modules"] = 5' pass '"target_modules" must be a list'
refuse bad_regex 'c["target_modules"] = "(q_proj"' pass "is not a regular expression PCRE2 takes"
refuse lm_head pass "t['base_model.model.lm_head.lora_A.weight'] = ['F32', [4, 128], [0.0] * 512]" "no LoRA factor of a projection"
refuse gate_lizard 'c["target_modules"] = ["q_proj", "v_proj", "gate"]' "t['base_model.model.model.layers.1.self_attn.gate.lora_A.weight'] = ['F32', [4, 128], [0.0] * 512]" "no LoRA factor of a projection"
# 4. fields that would change the model and are not merged
refuse modules_to_save 'c["modules_to_save"] = ["lm_head"]' pass '"modules_to_save" is set: not supported'
refuse bias_all 'c["bias"] = "all"' pass '"bias": only "none"'
refuse bias_lora 'c["bias"] = "lora_only"' pass '"bias": only "none"'
refuse dora 'c["use_dora"] = True' pass '"use_dora" is set'
refuse rank_pattern 'c["rank_pattern"] = {"q_proj": 8}' pass '"rank_pattern" is set'
refuse alpha_pattern 'c["alpha_pattern"] = {"v_proj": 2}' pass '"alpha_pattern" is set'
refuse fan_in 'c["fan_in_fan_out"] = True' pass '"fan_in_fan_out" is set'
refuse replication 'c["layer_replication"] = [[0, 2], [1, 3]]' pass '"layer_replication" is set'
refuse tokens 'c["trainable_token_indices"] = [1, 2]' pass '"trainable_token_indices" is set'
refuse lora_bias 'c["lora_bias"] = True' pass '"lora_bias" is set'
refuse params 'c["target_parameters"] = ["mlp.experts.down_proj"]' pass '"target_parameters" is set'
refuse unknown 'c["magnitude_scale"] = 1.5' pass '"magnitude_scale" is set: a field this version does not know'
refuse peft_type 'c["peft_type"] = "IA3"' pass "peft_type 'IA3'"
refuse rank_text 'c["r"] = "4"' pass '"r" must be a positive integer'
echo "adapter: $refused adapters refused"

# 5. what PEFT accepts is accepted: targets as a regex, "all-linear", full names, layers by index, a
#    targeted module with no factors (a zero B in PEFT), an unknown field that asks for nothing
accept() { # NAME CONFIG-EDIT TENSOR-EDIT: the same logits as the F32 adapter (or, with SAME=no, loads)
    make_adapter "$TMP/$1" "$2" "${3:-pass}"
    logits_with "$TMP/$1" "$TMP/$1.npy" && { [ "${SAME:-yes}" = no ] || cmp -s "$TMP/$1.npy" "$TMP/F32.npy"; } && ok ||
        bad "$1: not accepted as PEFT would: $(cat "$TMP/fwd.err")"
}
accept regex 'c["target_modules"] = r".*\.(q_proj|v_proj)"'
accept regex_layers 'c["target_modules"] = r"model\.layers\.\d+\.self_attn\.[qv]_proj"; c["layers_to_transform"] = [0]'
accept all_linear 'c["target_modules"] = "all-linear"'
accept full_names 'c["target_modules"] = [f"model.layers.{i}.self_attn.{m}" for i in range(4) for m in ("q_proj", "v_proj")]; c["layers_to_transform"] = [9]'
accept layers_list 'c["layers_to_transform"] = [0, 1, 2, 3]; c["layers_pattern"] = "layers"'
accept pattern_list 'c["layers_to_transform"] = [3, 2, 1, 0]; c["layers_pattern"] = ["h", "layers"]'
accept extra_target 'c["target_modules"] = ["q_proj", "v_proj", "k_proj", "down_proj"]'
accept exclude_other 'c["exclude_modules"] = ["o_proj"]'
accept off_fields 'c.update({"future_switch": None, "magnitude_scale": False, "modules_to_save": [], "megatron_config": None, "loftq_config": {}, "peft_version": "0.17.1"})'
SAME=no accept layer_int_one 'c["layers_to_transform"] = 2' "t = {k: v for k, v in t.items() if '.layers.2.' in k}"

echo "adapter_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
