#!/usr/bin/env bash
# device_distill_check.sh - on the GPU machine, from binaries in .devout/
# (lizard, test_gpu_train, bench_gpu_train, lib/): the CUDA training kernels
# against the CPU reference, `lizard distill --device cuda` against
# `--device cpu`, then the distillation speed (tests/bench/device_distill.sh).
# Logs to $OUT; under 2 minutes.
set -uo pipefail
source tests/gpu/device_env.sh
fail=0
.devout/test_gpu_train >"$OUT/gpu_train.log" 2>&1 || fail=1
grep -E "CHECK failed|bound|checks" "$OUT/gpu_train.log" | tail -20
timeout 300 bash tests/gpu/distill_device_test.sh .devout/lizard 2>&1 | tee "$OUT/distill_device.log" | tail -8
grep -q "distill_device_test: passed" "$OUT/distill_device.log" || fail=1
bash tests/bench/device_distill.sh 2>&1 | grep -v "^ *$"
echo "device_distill_check: fail=$fail"
exit $fail
