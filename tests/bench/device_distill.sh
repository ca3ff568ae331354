#!/usr/bin/env bash
# device_distill.sh - on the GPU machine (binaries in .devout/: bench_gpu_train):
# distillation training tokens/s for LLaMA-3-8B-shaped Lizard layers (hidden 4096,
# 32 query / 8 kv heads, head_dim 128, window 64, 4 meta logits; batches of
# 4 x 2048 tokens) on one GPU, and on two GPUs with the layers split between
# them (layers train independently: each GPU runs 16 of the 32 at once, so the
# model's rate is the slower GPU's). The teacher's forward is not timed
# (bench_gpu_train's header says what each line is). Each on the fp32 GLA path and
# the bf16 one (LIZARD_TRAIN_GLA=bf16). Logs to $OUT; ~1 minute.
set -uo pipefail
source tests/gpu/device_env.sh
B=${BENCH:-.devout/bench_gpu_train}
LOG=$OUT/distill_bench.log # one file: the machine brings back few
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$LOG"
n_gpu=$(nvidia-smi -L | wc -l)
TMPL=$(mktemp -d)
[ -n "${E2E_ONLY:-}" ] && n_gpu=0 # only the end-to-end run below
for f in 128 64; do
  [ -n "${E2E_ONLY:-}" ] && break
  for path in fp32 bf16; do
    LIZARD_TRAIN_GLA=$path CUDA_VISIBLE_DEVICES=0 timeout 120 $B --feature-dim $f --label "1-gpu $path f=$f" \
      2>&1 | tee -a "$LOG"
  done
done
if [ "$n_gpu" -ge 2 ]; then
  for path in fp32 bf16; do
    for g in 0 1; do
      LIZARD_TRAIN_GLA=$path CUDA_VISIBLE_DEVICES=$g timeout 120 $B --feature-dim 128 --model-layers 16 \
        --label "2-gpu $path gpu$g (16 of 32 layers)" >"$TMPL/2gpu_$path$g.log" 2>&1 &
    done
    wait
    cat "$TMPL/2gpu_${path}0.log" "$TMPL/2gpu_${path}1.log"
    # the model's rate: the slower GPU's "for 16 layers" figure, per line kind
    python3 - "$TMPL/2gpu_${path}0.log" "$TMPL/2gpu_${path}1.log" "$path" <<'PY'
import re, sys
rates = {}
for p in sys.argv[1:3]:
    for line in open(p):
        m = re.match(r"\s+(\S.*?)\s{2,}.*?(\d+) tok/s for 16 layers", line)
        if m:
            rates.setdefault(m.group(1), []).append(int(m.group(2)))
for kind, r in rates.items():
    print(f"2 GPUs {sys.argv[3]} f=128, {kind}: {min(r)} tok/s for 32 layers (per GPU: {r})")
PY
  done | tee -a "$LOG"
else
  [ -n "${E2E_ONLY:-}" ] || echo "device_distill: one GPU visible: no two-GPU run"
fi

# End to end: `lizard distill --device cuda` (teacher and training on the GPU) on a LLaMA-3-8B-shaped
# teacher cut to its first 4 layers (random weights from `lizard init`; 8B-shaped layers, so the
# 32-layer rate is the 4-layer rate / 8), random token ids, 5 steps of 4 x 2048 tokens.
L=${LIZARD:-.devout/lizard}
M=/tmp/distill8b
if [ ! -e $M/4/config.json ]; then
  rm -rf $M && mkdir -p $M
  t0=$(date +%s)
  timeout 150 $L init --config llama3-8b-teacher --out $M/32 >/dev/null 2>&1 || echo "device_distill: init failed"
  echo "device_distill: lizard init llama3-8b-teacher: $(( $(date +%s) - t0 )) s"
  python3 - $M/32 $M/4 4 <<'PY'
import json, os, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
cfg = json.load(open(f"{src}/config.json"))
cfg["num_hidden_layers"] = n
json.dump(cfg, open(f"{dst}/config.json", "w"), indent=2)
for f in os.listdir(src):  # tokenizer and generation files as they are
    if f != "config.json" and not f.endswith(".safetensors") and not f.endswith(".index.json"):
        open(f"{dst}/{f}", "wb").write(open(f"{src}/{f}", "rb").read())
# the tensors, from one file or from shards (model.safetensors.index.json), into one model.safetensors
idx = f"{src}/model.safetensors.index.json"
files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
keep = []  # (name, entry, file, data start)
for fname in files:
    with open(f"{src}/{fname}", "rb") as fin:
        hn = struct.unpack("<Q", fin.read(8))[0]
        for k, v in json.loads(fin.read(hn)).items():
            if k != "__metadata__" and (".layers." not in k or int(k.split(".layers.")[1].split(".")[0]) < n):
                keep.append((k, v, fname, 8 + hn))
out, off = {}, 0
for k, v, _, _ in keep:
    a, b = v["data_offsets"]
    out[k] = dict(v, data_offsets=[off, off + b - a]); off += b - a
hb = json.dumps(out).encode(); hb += b" " * (-len(hb) % 8)
with open(f"{dst}/model.safetensors", "wb") as fo:
    fo.write(struct.pack("<Q", len(hb))); fo.write(hb)
    for k, v, fname, base in keep:
        a, b = v["data_offsets"]
        with open(f"{src}/{fname}", "rb") as fin:
            fin.seek(base + a); fo.write(fin.read(b - a))
import numpy as np
np.save(f"{dst}/../ids.npy", np.random.default_rng(0).integers(0, cfg["vocab_size"], 300000, dtype=np.int32))
PY
  rm -rf $M/32
fi
# e2e LOG LABEL FLAGS...: one 5-step distillation of the 4-layer teacher under $LAUNCH (empty: one
# process) with the distill FLAGS, its best step rate
# (of steps 2..5) printed for 4 layers and scaled to 32
e2e() {
  local log=$1 label=$2; shift 2
  rm -rf $M/out
  timeout 200 $LAUNCH $L distill --teacher $M/4 --data $M/ids.npy --out $M/out --seq-len 2048 --batch 4 \
    --tokens 40960 --eval-batches 1 --log-every 1 --device cuda "$@" 2>&1 | tee "$log" | grep -E "step|error" | tail -2
  python3 - "$log" "$label" <<'PY'
import re, sys
r = [float(m.group(1)) for m in re.finditer(r"step \d+/\d+ .*?(\d+) tok/s", open(sys.argv[1]).read())]
if r:
    best = max(r[1:] or r)
    print(f"end to end ({sys.argv[2]}): {best:.0f} tok/s for 4 8B-shaped layers "
          f"= {best / 8:.0f} tok/s for 32 layers (best of steps 2-{len(r)})")
PY
}
LAUNCH=""
for run in "fp32 fp32" "bf16 fp32" "bf16 bf16"; do
  read -r path tdt <<<"$run"
  e2e "$TMPL/e2e_$path.log" "$path GLA, teacher on the GPU in $tdt" --gla-precision $path --teacher-dtype $tdt
done | tee -a "$LOG"
# the same under mpirun on two GPUs: each rank runs 2 of the 4 teacher layers and trains them on its GPU
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  LAUNCH="mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE=0"
  e2e "$TMPL/e2e_mpi.log" "mpirun -np 2, bf16 GLA, bf16 teacher, 2 layers per GPU" --gla-precision bf16 \
    --teacher-dtype bf16
fi | tee -a "$LOG"
rm -rf "$TMPL"
