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
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=${BENCH:-.devout/bench_gpu_train}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/distill_gpus.txt"
n_gpu=$(nvidia-smi -L | wc -l)
for f in 128 64; do
  for path in fp32 bf16; do
    LIZARD_TRAIN_GLA=$path CUDA_VISIBLE_DEVICES=0 timeout 120 $B --feature-dim $f --label "1-gpu $path f=$f" \
      2>&1 | tee -a "$OUT/distill_bench.log"
  done
done
if [ "$n_gpu" -ge 2 ]; then
  for path in fp32 bf16; do
    for g in 0 1; do
      LIZARD_TRAIN_GLA=$path CUDA_VISIBLE_DEVICES=$g timeout 120 $B --feature-dim 128 --model-layers 16 \
        --label "2-gpu $path gpu$g (16 of 32 layers)" >"$OUT/distill_2gpu_$path$g.log" 2>&1 &
    done
    wait
    cat "$OUT/distill_2gpu_${path}0.log" "$OUT/distill_2gpu_${path}1.log" | tee -a "$OUT/distill_bench.log"
    # the model's rate: the slower GPU's "for 16 layers" figure, per line kind
    python3 - "$OUT/distill_2gpu_${path}0.log" "$OUT/distill_2gpu_${path}1.log" "$path" <<'PY'
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
  done | tee -a "$OUT/distill_bench.log"
else
  echo "device_distill: one GPU visible: no two-GPU run"
fi
