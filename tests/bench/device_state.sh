#!/usr/bin/env bash
# device_state.sh - on the GPU machine: one sequence's state as a session
# message (lizard bench --state), LLaMA-3-8B shapes on one GPU: the pure Lizard
# model at 2K and the 50% hybrid at 4K. GB/s of message bytes per phase:
# serialise (device -> message in memory), restore (message -> device),
# file save (serialise + atomic write with fsync), file load (read + restore).
# Logs and JSON to $OUT; about 30 s.
set -uo pipefail
source tests/gpu/device_env.sh
L=.devout/lizard
for run in "lizard 2048" "hybrid 4096"; do
  set -- $run
  timeout 60 $L bench --device cuda --shape "llama3-8b-$1" --prompt 0 --batch 0 --context "$2" --no-ceilings --state \
    --json "$OUT/state-$1.jsonl" > "$OUT/state-$1.log" 2>&1
  echo "llama3-8b-$1 (rc $?): $(grep -E '^state|error' "$OUT/state-$1.log")"
done
