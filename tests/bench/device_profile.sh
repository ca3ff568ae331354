#!/usr/bin/env bash
# device_profile.sh - on the GPU machine: GPU suites, the linear-layer shapes
# (1..2048 tokens: our GEMV, then cuBLAS), a per-op profile (LIZARD_PROFILE=1: syncs around
# every op) of a prompt and of decode steps, then the benchmark. Logs to $OUT.
set -uo pipefail
source tests/gpu/device_env.sh
bash tests/gpu/device_check.sh 2>&1 | tail -3
L=.devout/lizard
timeout 60 $L bench --device cuda --shape llama3-8b-hybrid --prompt 0 --batch 0 --context 1 --no-ceilings --linear-shapes \
  2>&1 | grep linear | cut -c1-200 | head -60
LIZARD_PROFILE=1 timeout 60 $L bench --device cuda --shape llama3-8b-hybrid --prompt 2048 --batch 0 --context 1 --no-ceilings 2>&1 | tail -17
LIZARD_PROFILE=1 timeout 60 $L bench --device cuda --shape llama3-8b-hybrid --prompt 0 --batch 1 --context 2048 --steps 8 --no-ceilings 2>&1 | tail -17
for v in lizard hybrid teacher; do
  prompts=2048,8192,32768
  [ "$v" = lizard ] && prompts=2048,8192,32768,131072
  timeout 150 $L bench --device cuda --shape "llama3-8b-$v" --prompt "$prompts" --batch 1,16,64,256 \
    --context 2048,32768 --json "$OUT/bench-$v.jsonl" 2>&1 | tee "$OUT/bench-$v.log" | grep -v "^linear"
done
