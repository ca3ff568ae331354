#!/usr/bin/env bash
# device_bench.sh - on the GPU machine: `lizard bench` on the LLaMA-3-8B shapes
# (teacher, 50% hybrid, pure Lizard) and the HF transformers baseline. Results
# (JSON lines + logs) go to $OUT; docs/benchmarks.md is written from them.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
for v in lizard hybrid teacher; do
  prompts=2048,8192,32768
  [ "$v" = lizard ] && prompts=2048,8192,32768,131072
  timeout 200 .devout/lizard bench --shape "llama3-8b-$v" --prompt "$prompts" --batch 1,16,64,256 \
    --context 2048,32768 --json "$OUT/bench-$v.jsonl" 2>&1 | tee "$OUT/bench-$v.log"
done
timeout 150 python3 tests/bench/torch_baseline.py --prompt 2048,8192,32768 --batch 1,16 --context 2048 \
  > "$OUT/torch.jsonl" 2> "$OUT/torch.err"
cat "$OUT/torch.jsonl"; tail -3 "$OUT/torch.err"
