#!/usr/bin/env bash
# device_pipeline.sh - on a machine with 2 GPUs: the parity fixtures as a
# 2-rank pipeline (one GPU each, activations over NCCL) against one GPU:
# fp32 logits and greedy ids, bf16 logits within rounding. Logs to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
L=$PWD/.devout/lizard
MPI="mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
nvidia-smi --query-gpu=index,name --format=csv,noheader
fail=0
for c in hybrid50 lizard_perhead llama3 mistral; do
  M=tests/fixtures/$c/model
  ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('tests/fixtures/$c/expect.json'))['prompt_ids'])))")
  for dt in fp32 bf16; do
    $L forward --model $M --ids $ids --device cuda --dtype $dt --logits-out "$OUT/one.npy" 2>>"$OUT/log.txt"
    timeout 120 $MPI $L forward --model $M --ids $ids --device cuda --dtype $dt --logits-out "$OUT/two.npy" \
      >>"$OUT/log.txt" 2>&1 || { echo "FAILED: $c $dt pipeline"; fail=1; continue; }
    python3 - "$OUT/one.npy" "$OUT/two.npy" "$c $dt" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
err = float(np.linalg.norm(a - b) / np.linalg.norm(a))
print(f"{sys.argv[3]:24s} 2 GPUs vs 1: rel err {err:.2e}", "OK" if err < 1e-5 else "DIFFERENT")
PY
  done
  g1=$($L generate --model $M --ids $ids --device cuda --dtype fp32 --max-tokens 8 --format json --ignore-eos 2>/dev/null)
  g2=$(timeout 120 $MPI $L generate --model $M --ids $ids --device cuda --dtype fp32 --max-tokens 8 --format json \
       --ignore-eos --placement by-type 2>>"$OUT/log.txt")
  [ "$g1" = "$g2" ] && echo "$c greedy by-type on 2 GPUs: same ids" || { echo "$c greedy: $g1 vs $g2"; fail=1; }
done
echo "device_pipeline: fail=$fail"
