#!/usr/bin/env bash
# device_final.sh - on the GPU machine: the GPU suites, the benchmark of the
# LLaMA-3-8B shapes, kernel durations of one prompt and one decode step under
# Nsight Compute, and the plots for docs/benchmarks.md. At most 8 files to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
L=.devout/lizard
{ bash tests/gpu/device_check.sh; cat "$OUT/gpu_ops.log" "$OUT/parity.log"; } > "$OUT/logs.txt" 2>&1
rm -f "$OUT/gpu_ops.log" "$OUT/parity.log" "$OUT/gpu.txt"
grep -E "device_check|test_gpu_ops:|FAILED" "$OUT/logs.txt"
for v in lizard hybrid teacher; do
  prompts=2048,8192,32768
  [ "$v" = lizard ] && prompts=2048,8192,32768,131072
  timeout 150 $L bench --shape "llama3-8b-$v" --prompt "$prompts" --batch 1,16,64,256 \
    --context 2048,32768 --json "$OUT/bench-$v.jsonl" 2>&1 | tee -a "$OUT/logs.txt"
done
{
  echo "== prompt 2048, hybrid: kernel durations"
  timeout 120 ncu --clock-control none -k regex:'chunk|attention|window|feature|gemv|gemm|Kernel|kernel' \
    --launch-skip 300 --launch-count 40 --metrics gpu__time_duration.sum \
    $L bench --shape llama3-8b-hybrid --prompt 2048 --batch 0 --context 1 --no-ceilings 2>&1 |
    grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" | paste - - | sed 's/  */ /g' | cut -c1-160
  echo "== decode batch 1 at 2K, hybrid: kernel durations"
  LIZARD_NO_GRAPHS=1 timeout 120 ncu --clock-control none --launch-skip 2000 --launch-count 60 \
    --metrics gpu__time_duration.sum \
    $L bench --shape llama3-8b-hybrid --prompt 0 --batch 1 --context 2048 --steps 4 --no-ceilings 2>&1 |
    grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" | paste - - | sed 's/  */ /g' | cut -c1-160
} > "$OUT/ncu.txt" 2>&1
tail -5 "$OUT/ncu.txt"
python3 tests/bench/plot_bench.py "$OUT" "$OUT"/bench-*.jsonl docs/bench-data/torch-2026-11-29.jsonl 2>&1 | tail -3
ls "$OUT"
