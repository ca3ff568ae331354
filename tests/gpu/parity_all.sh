#!/usr/bin/env bash
# parity_all.sh - on the GPU machine (after tests/gpu/device_env.sh): every parity fixture on the CUDA
# backend in fp32 and bf16 (.devout/test_parity), appended to $OUT/parity.log. Prints a FAILED line for
# each run that failed and exits non-zero if any did. PARITY_TIMEOUT: the seconds one run may take
# (default 120), so that a hang costs minutes, not the device call.
set -uo pipefail
fail=0
for c in $(dirname tests/fixtures/*/expect.json); do
  for dt in fp32 bf16; do
    timeout "${PARITY_TIMEOUT:-120}" .devout/test_parity "$c" cuda "$dt" >>"$OUT/parity.log" 2>&1 ||
      { fail=1; echo "FAILED: $c $dt"; }
  done
done
exit $fail
