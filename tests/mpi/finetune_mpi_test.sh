#!/usr/bin/env bash
# finetune_mpi_test.sh LIZARD - `lizard finetune` as a pipeline: under mpirun -np 1, 2 and 3 (each rank
# its layers, 1F1B micro-batches) the same seed gives the losses, gradient norms, held-out loss and
# merged weights of one process, bit for bit (LoRA dropout on, MLP targeted, batch 3 > ranks - 1).
set -u
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun
SRC=$(cd "$(dirname "$0")/../.." && pwd)
M=$TMP/model
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 && ok || bad "init tiny-hybrid"
A=(finetune --model "$M" --data "$SRC/tests/fixtures/corpus/finetune_slice.txt" --seq-len 32 --batch 3
   --tokens 960 --lr 3e-3 --lora-dropout 0.1 --lora-targets q,k,v,o,up --eval-batches 1 --log-every 1000)
"$LIZARD" "${A[@]}" --out "$TMP/one" --log "$TMP/one.jsonl" 2>"$TMP/one.err" && ok || bad "one process: $(tail -1 "$TMP/one.err")"
for n in 1 2 3; do
    run $n "$LIZARD" "${A[@]}" --out "$TMP/p$n" --log "$TMP/p$n.jsonl" 2>"$TMP/p$n.err" && ok ||
        bad "mpirun -np $n: $(tail -1 "$TMP/p$n.err")"
    python3 - "$TMP/one.jsonl" "$TMP/p$n.jsonl" <<'PY' && ok || bad "mpirun -np $n: the log differs"
import json, sys
def rows(p):
    return [(r.get("step"), r.get("loss"), r.get("grad_norm"), r.get("valid_loss")) for r in map(json.loads, open(p))]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == 12 and a == b, (a, b)
PY
    cmp -s "$TMP/one/model.safetensors" "$TMP/p$n/model.safetensors" && ok || bad "mpirun -np $n: weights differ"
done
# every rank refuses (each says so, naming itself), exit 2, nothing written
run 5 "$LIZARD" "${A[@]}" --out "$TMP/p5" 2>"$TMP/p5.err"
[ $? -eq 2 ] && grep -q "more ranks than the model's 4 layers" "$TMP/p5.err" && [ ! -e "$TMP/p5" ] && ok ||
    bad "mpirun -np 5: $(head -2 "$TMP/p5.err")"
echo "finetune_mpi_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
