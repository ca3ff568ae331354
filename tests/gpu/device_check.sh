#!/usr/bin/env bash
# device_check.sh - on the GPU machine: the GPU suites from binaries built on the
# dev machine and carried in .devout/ (lizard, test_gpu_ops, test_parity, lib/).
# Logs go to $OUT.
set -uo pipefail
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
fail=0
timeout 300 .devout/test_gpu_ops >"$OUT/gpu_ops.log" 2>&1 || fail=1 # (a hang costs minutes, not the call)
tail -25 "$OUT/gpu_ops.log"
bash tests/gpu/parity_all.sh || fail=1
grep -E "checks|rel err" "$OUT/parity.log" | tail -60
echo "device_check: fail=$fail"
