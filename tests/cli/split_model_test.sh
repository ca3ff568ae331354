#!/usr/bin/env bash
# split_model_test.sh - launch/split_model.py: launch/default-model made whole again (one
# model.safetensors) and split against tests/quality/teacher gives back its own shard and index byte
# for byte, a link that resolves to the teacher's second shard, and the same greedy text; a model
# whose MLP differs from the teacher's, or no model at all, is refused with one line and exit 2.
# Usage: split_model_test.sh LIZARD SRC
set -uo pipefail
LIZARD=$1 SRC=$2
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error
D=$SRC/launch/default-model T=$SRC/tests/quality/teacher SPLIT="python3 $SRC/launch/split_model.py"

# whole: every tensor of the folder's shards in one file (MLP_DELTA=1: one byte of an MLP weight changed)
whole() {
  MLP_DELTA=${2:-0} python3 - "$D" "$1" <<'EOF'
import json, os, shutil, struct, sys
src, out = sys.argv[1:]
os.makedirs(out, exist_ok=True)
index = json.load(open(os.path.join(src, "model.safetensors.index.json")))["weight_map"]
tensors = {}
for shard in sorted(set(index.values())):
    raw = open(os.path.join(src, shard), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    for name, t in header.items():
        a, b = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], bytearray(raw[8 + n + a:8 + n + b]))
if os.environ["MLP_DELTA"] == "1":
    tensors["model.layers.3.mlp.up_proj.weight"][2][0] ^= 1
header, blobs, off = {}, [], 0
for name in sorted(tensors):
    dtype, shape, blob = tensors[name]
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
text = json.dumps(header).encode()
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
    shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
EOF
}

whole "$TMP/whole" || bad "could not make the default model whole"
$SPLIT "$TMP/whole" "$T" "$TMP/split" >"$TMP/split.out" 2>&1 && ok || bad "split: $(cat "$TMP/split.out")"
cmp -s "$TMP/split/model-00001-of-00002.safetensors" "$D/model-00001-of-00002.safetensors" && ok ||
  bad "the split's own shard differs from launch/default-model's"
cmp -s "$TMP/split/model.safetensors.index.json" "$D/model.safetensors.index.json" && ok ||
  bad "the split's index differs from launch/default-model's"
[ -L "$TMP/split/model-00002-of-00002.safetensors" ] &&
  cmp -s "$TMP/split/model-00002-of-00002.safetensors" "$T/model-00002-of-00002.safetensors" && ok ||
  bad "the second shard is not a link to the teacher's"
for m in whole split; do
  "$LIZARD" generate --model "$TMP/$m" --prompt "The lizard is" --max-tokens 12 --temperature 0 \
    >"$TMP/$m.txt" 2>"$TMP/$m.err" || bad "generate on the $m model: $(tail -1 "$TMP/$m.err")"
done
[ -s "$TMP/whole.txt" ] && cmp -s "$TMP/whole.txt" "$TMP/split.txt" && ok ||
  bad "greedy text differs: '$(cat "$TMP/whole.txt")' against '$(cat "$TMP/split.txt")'"

whole "$TMP/mlp" 1 || bad "could not make the changed model"
expect_error "model.layers.3.mlp.up_proj.weight: differs from the teacher's" $SPLIT "$TMP/mlp" "$T" "$TMP/mlp-split"
[ ! -e "$TMP/mlp-split" ] && ok || bad "a refused split left an output folder"
expect_error "model.safetensors: No such file" $SPLIT "$TMP/none" "$T" "$TMP/none-split"
expect_error "no weight_map" $SPLIT "$TMP/whole" "$TMP/whole" "$TMP/x"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
