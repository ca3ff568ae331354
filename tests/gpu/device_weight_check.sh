#!/usr/bin/env bash
# device_weight_check.sh - on the GPU machine (after tests/gpu/pack_devout.sh, carry .devpack): a model
# folder with a NaN or an infinity is refused at load on the CUDA backend, in bf16 and fp32, naming the
# tensor and the element that the device check (kernels/cuda/weight_check.cu) found; an F32 weight
# beyond bf16's range is refused with --dtype bf16 as such and loads with --dtype fp32; clean folders
# load and give the CPU's greedy ids. Prints one line per case and a summary; exit 1 on a failure.
set -u
. tests/gpu/device_env.sh
L=.devout/lizard
T=$(mktemp -d)
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
"$L" init --config tiny-hybrid --out "$T/m" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
for kind in nan-weight inf-norm nan-embed-last; do
    python3 tests/cli/corrupt_model.py "$T/m" "$T/$kind" "$kind"
done
python3 - "$T/m" "$T/big" <<'PY' # one F32 weight element beyond bf16's largest (3.39e38)
import json, shutil, struct, sys
src, dst = sys.argv[1:3]
shutil.copytree(src, dst)
p = dst + "/model.safetensors"
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
a = json.loads(raw[8:8 + n])["model.layers.2.mlp.down_proj.weight"]["data_offsets"][0]
raw[8 + n + a + 4 * 5:8 + n + a + 4 * 6] = struct.pack("<f", 3.4e38)
open(p, "wb").write(bytes(raw))
PY
cpu=$("$L" generate --model "$T/m" --ids 1,2,3 --max-tokens 8 --ignore-eos --format json 2>/dev/null)
for dtype in bf16 fp32; do
    expect() { # FOLDER NEEDLE
        local t0 t1 rc; t0=$(date +%s.%N)
        "$L" forward --model "$T/$1" --device cuda --dtype "$dtype" --ids 1,2 --logits-out "$T/x.npy" >/dev/null 2>"$T/err"
        rc=$?; t1=$(date +%s.%N)
        [ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q -- "$2" "$T/err" && ok "$dtype $1: $(cat "$T/err")" ||
            bad "$dtype $1: exit $rc: $(cat "$T/err")"
    }
    expect nan-weight "tensor 'model.layers.1.mlp.up_proj.weight': element 7 is a NaN or an infinity"
    expect inf-norm "tensor 'model.norm.weight': element 3 is a NaN or an infinity"
    expect nan-embed-last "tensor 'model.embed_tokens.weight': element 65535 is a NaN or an infinity"
    gpu=$("$L" generate --model "$T/m" --device cuda --dtype "$dtype" --ids 1,2,3 --max-tokens 8 --ignore-eos --format json 2>"$T/err")
    [ -n "$gpu" ] && ok "$dtype clean folder loads: $gpu (cpu $cpu)" || bad "$dtype clean folder: $(cat "$T/err")"
done
dtype=bf16 expect big "element 5 (3.4e+38) is beyond the range of BF16"
"$L" forward --model "$T/big" --device cuda --dtype fp32 --ids 1,2 --logits-out "$T/x.npy" >/dev/null 2>"$T/err" &&
    ok "fp32 big: loads" || bad "fp32 big: $(cat "$T/err")"
# the check's cost on a larger load: the teacher of tests/quality, bf16 and fp32, 3 runs each
for dtype in bf16 fp32; do
    for i in 1 2 3; do
        t0=$(date +%s.%N)
        "$L" forward --model tests/quality/teacher --device cuda --dtype "$dtype" --ids 1 --logits-out "$T/x.npy" >/dev/null 2>&1
        echo "teacher $dtype forward (load + 1 token): $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s"
    done
done
echo "device_weight_check: $pass passed, $fail failed"
[ $fail -eq 0 ]
