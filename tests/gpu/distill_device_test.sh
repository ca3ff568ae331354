#!/usr/bin/env bash
# distill_device_test.sh LIZARD - on a GPU machine: `lizard distill --device cuda`
# against `--device cpu` on a tiny teacher that `lizard init` writes, 10 steps
# each, in two settings (2 chunks per sequence with a partial one, softmax maps
# per head, normaliser; and one short chunk, shared exp maps, no normaliser, no
# meta logits). Compares every step's per-layer MSE and the final Lizard tensors
# (relative L2 <= 1e-3 each; both paths are fp32 and differ in summation order
# only, and 10 AdamW steps move each weight by at most ~lr per step). Runs:
#   cuda:  the layer steps on the GPU, the teacher on the CPU (--teacher-device cpu);
#   gput:  the teacher on the GPU too (the default of --device cuda in one process);
#   bf16:  --gla-precision bf16 (bound 3e-2: bf16 keeps 8 bits);
#   tb16:  --teacher-dtype bf16: the teacher's activations in bf16 (bound 5e-2: the bf16
#          inference path is held to 3e-2 of fp32 per forward, test_parity);
#   mpi2:  mpirun -np 2 --device cuda: layers split over 2 ranks, one GPU each
#          (both on GPU 0 when only one is visible), each rank's teacher layers on its GPU;
#   mpib:  the same with --teacher-dtype bf16 (bound 5e-2);
# and gput again: byte-identical weights.
# Exit 0 when all agree, 1 otherwise, 77 when no GPU is visible.
set -u
LIZARD=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "distill_device_test: skipped: no GPU"; exit 77; }
fail=0
"$LIZARD" init --config tiny-teacher --out "$TMP/teacher" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
python3 - "$TMP/data.txt" <<'PY'
import random, sys
rng = random.Random(20260101)
words = "the lizard rock sun desert tail scale eye tongue insect shadow stone heat basks waits hunts on a".split()
open(sys.argv[1], "w").write(" ".join(rng.choice(words) for _ in range(20000)))
PY
settings=(
  "--seq-len 100 --batch 2 --tokens 2000 --window 16 --feature-dim 16 --meta-tokens 2 --softmax-layers 3"
  "--seq-len 40 --batch 3 --tokens 1200 --window 64 --feature-dim 8 --meta-tokens 0 --feature-map exp --map-heads shared --no-gla-normalize"
)
MPI="mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
for run in "0 cuda 1e-3 --teacher-device cpu" "1 cuda 1e-3 --teacher-device cpu" "0 gput 1e-3" \
           "0 bf16 3e-2 --gla-precision bf16" "0 tb16 5e-2 --teacher-dtype bf16" "0 mpi2 1e-3" \
           "0 mpib 5e-2 --teacher-dtype bf16"; do
  read -r i name bound extra <<<"$run"
  for dev in cpu cuda; do
    out=$([ $dev = cpu ] && echo cpu$i || echo $name$i)
    [ -e "$TMP/$out.jsonl" ] && continue # the cpu run of a setting is shared
    launch=""
    [ "${name#mpi}" != "$name" ] && [ $dev = cuda ] && launch=$MPI
    # shellcheck disable=SC2086
    $launch "$LIZARD" distill --teacher "$TMP/teacher" --data "$TMP/data.txt" --out "$TMP/$out" ${settings[$i]} \
      --lr 1e-2 --eval-batches 1 --log "$TMP/$out.jsonl" --log-every 1000 --device $dev \
      $([ $dev = cuda ] && echo $extra) 2>"$TMP/$out.err" \
      || { echo "FAIL: distill --device $dev $extra ($name, setting $i): $(tail -2 "$TMP/$out.err")"; fail=1; }
  done
  python3 - "$TMP/cpu$i" "$TMP/$name$i" "$bound" <<'PY' || fail=1
import json, math, struct, sys
from array import array

def tensors(path):
    raw = open(path + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F32" or "self_attn" not in name:
            continue
        if not any(k in name for k in ("feature_map", "gate", "meta_logits", "window_alpha")):
            continue
        a, b = t["data_offsets"]
        out[name] = array("f", raw[8 + n + a:8 + n + b])
    return out

def rel(x, y):
    num = sum((p - q) ** 2 for p, q in zip(x, y))
    den = sum(q * q for q in y)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)

cpu, gpu, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
bad = 0
steps = [[json.loads(l) for l in open(p + ".jsonl")] for p in (cpu, gpu)]
worst_mse = 0.0
for a, b in zip(*steps):
    for layer, m in a["mse"].items():
        e = abs(b["mse"][layer] - m) / max(abs(m), 1e-30)
        worst_mse = max(worst_mse, e)
        if e > bound:
            bad += 1
            print(f"FAIL: {a.get('step', a.get('eval'))} layer {layer} mse cpu {m} cuda {b['mse'][layer]}")
tc, tg = tensors(cpu), tensors(gpu)
if not tc or set(tc) != set(tg):
    bad += 1
    print(f"FAIL: tensor names differ or none: {sorted(tc)[:4]} / {sorted(tg)[:4]}")
worst_w = 0.0
for name in sorted(tc):
    e = rel(tg.get(name, []), tc[name])
    worst_w = max(worst_w, e)
    if e > bound:
        bad += 1
        print(f"FAIL: {name}: rel err {e:.3g}")
print(f"{gpu.rsplit('/', 1)[1]} vs {cpu.rsplit('/', 1)[1]}: {len(steps[0])} log lines, {len(tc)} tensors; largest rel diff: mse {worst_mse:.3g}, "
      f"tensors {worst_w:.3g}; {'ok' if bad == 0 else 'FAILED'}")
sys.exit(1 if bad else 0)
PY
  grep "tok/s" "$TMP/$name$i.err" | tail -1
done
# the GPU path repeats bit for bit (no atomics, fixed summation orders)
# shellcheck disable=SC2086
"$LIZARD" distill --teacher "$TMP/teacher" --data "$TMP/data.txt" --out "$TMP/again" ${settings[0]} --lr 1e-2 \
  --eval-batches 1 --log-every 1000 --device cuda 2>/dev/null \
  && cmp -s "$TMP/again/model.safetensors" "$TMP/gput0/model.safetensors" \
  && echo "repeat of gput0: byte-identical model.safetensors" || { echo "FAIL: a repeated cuda run differs"; fail=1; }
echo "distill_device_test: $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
