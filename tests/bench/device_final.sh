#!/usr/bin/env bash
# device_final.sh - on the GPU machine: the GPU suites, the benchmark of the
# LLaMA-3-8B shapes, and the plots for docs/benchmarks.md. At most 8 files to $OUT.
# SKIP_CHECKS=1: the benchmark alone; BENCH_ARGS: more `lizard bench` flags.
set -uo pipefail
source tests/gpu/device_env.sh
L=.devout/lizard
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  { bash tests/gpu/device_check.sh; cat "$OUT/gpu_ops.log" "$OUT/parity.log"; } > "$OUT/logs.txt" 2>&1
  rm -f "$OUT/gpu_ops.log" "$OUT/parity.log" "$OUT/gpu.txt"
  grep -E "device_check|test_gpu_ops:|FAILED" "$OUT/logs.txt"
fi
for v in lizard hybrid teacher; do
  prompts=2048,8192,32768
  [ "$v" = lizard ] && prompts=2048,8192,32768,131072
  timeout 150 $L bench --device cuda --shape "llama3-8b-$v" --prompt "$prompts" --batch 1,16,64,256 \
    --context 2048,32768 ${BENCH_ARGS:-} --json "$OUT/bench-$v.jsonl" 2>&1 | tee -a "$OUT/logs.txt"
done
# the default's cuBLAS at 2-8 tokens (the test itself gives them to the GEMV) must stay correct too
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  for e in LIZARD_GEMV_TOKENS=1; do
    env $e timeout 300 .devout/test_gpu_ops > "$OUT/extra.log" 2>&1; echo "$e: $(tail -1 "$OUT/extra.log")"
    cat "$OUT/extra.log" >> "$OUT/logs.txt"; rm -f "$OUT/extra.log"
  done
fi
# batches 2-8 (not in the table's batch list), batch 1 again beside them; one file (at most 8 come back)
for v in lizard hybrid teacher; do
  rm -f "$OUT/tmp.jsonl"
  timeout 60 $L bench --device cuda --shape "llama3-8b-$v" --prompt 0 --batch 1,2,4,8 --context 2048 --steps 64 \
    --json "$OUT/tmp.jsonl" 2>&1 | grep decode | tee -a "$OUT/logs.txt"
  [ -f "$OUT/tmp.jsonl" ] && sed "s/^{/{\"variant\": \"$v\", /" "$OUT/tmp.jsonl" >>"$OUT/small.jsonl"
done
rm -f "$OUT/tmp.jsonl"
# WITH_TORCH=1: also the HF transformers baseline (about two minutes)
if [ "${WITH_TORCH:-0}" = 1 ]; then
  timeout 150 python3 tests/bench/torch_baseline.py --prompt 2048,8192,32768 --batch 1,16 --context 2048 \
    >"$OUT/torch.jsonl" 2>>"$OUT/logs.txt"
fi
python3 tests/bench/plot_bench.py "$OUT" "$OUT"/bench-*.jsonl docs/bench-data/torch-2026-11-29.jsonl 2>&1 | tail -3
ls "$OUT"
