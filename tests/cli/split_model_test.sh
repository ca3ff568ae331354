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
  MLP_DELTA=${2:-0} PYTHONDONTWRITEBYTECODE=1 python3 - "$SRC/launch" "$D" "$1" <<'EOF'
import json, os, shutil, sys
sys.path.insert(0, sys.argv[1])
from split_model import FILES, read_safetensors, tensor_bytes, write_safetensors
src, out = sys.argv[2:]
os.makedirs(out, exist_ok=True)
index = json.load(open(os.path.join(src, "model.safetensors.index.json")))["weight_map"]
tensors = {}
for shard in sorted(set(index.values())):
    header, data = read_safetensors(os.path.join(src, shard))
    for name, t in header.items():
        tensors[name] = (name, t["dtype"], t["shape"], bytearray(tensor_bytes(header, data, name)))
if os.environ["MLP_DELTA"] == "1":
    tensors["model.layers.3.mlp.up_proj.weight"][3][0] ^= 1
write_safetensors(os.path.join(out, "model.safetensors"), [tensors[n] for n in sorted(tensors)])
for name in FILES:
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
