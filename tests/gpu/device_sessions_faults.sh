#!/usr/bin/env bash
# device_sessions_faults.sh - on a 2-GPU machine (binaries in .devout/):
#  1. sessions on the GPU: k tokens, saved, then n - k more == n tokens in one
#     run (sampled), for the teacher, hybrid and pure Lizard tiny presets, on one
#     GPU and as a 2-GPU pipeline, and a session written on 2 GPUs (by-type)
#     continued on 1 GPU;
#  2. failures on GPUs: a rank killed in an NCCL pipeline, a rank whose weights
#     are broken, a rank given no GPU: the job ends non-zero within 10 s.
# Prints one line per check and "device_sessions_faults: fail=N". DEVICE=cpu
# LIZARD=path MPI_EXTRA=--oversubscribe runs the same checks on a CPU machine.
set -uo pipefail
source tests/gpu/device_env.sh
export NCCL_NVLS_ENABLE=0
L=${LIZARD:-$PWD/.devout/lizard} DEVICE=${DEVICE:-cuda} TMP=$(mktemp -d) fail=0
MPI="mpirun --allow-run-as-root ${MPI_EXTRA:-} -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
ids() { python3 -c "import json,sys; print(','.join(str(i) for f in sys.argv[1:] for i in json.load(open(f))['ids']))" "$@"; }
check() { if [ "$1" = "$2" ]; then echo "ok   $3"; else echo "FAIL $3: $1 vs $2"; fail=$((fail + 1)); fi; }
G="--device $DEVICE --dtype fp32 --temperature 0.9 --seed 4 --ignore-eos --format json"
for preset in tiny-teacher tiny-hybrid tiny-lizard; do
  M=$TMP/$preset; $L init --config $preset --out "$M" >/dev/null 2>&1
  $L generate --model "$M" --ids 5,6,7,8 --max-tokens 10 $G >"$TMP/whole" 2>/dev/null
  for launch in "" "$MPI"; do
    rm -f "$TMP/s.lzs"
    timeout 120 $launch $L generate --model "$M" --ids 5,6,7,8 --max-tokens 4 $G --session "$TMP/s.lzs" >"$TMP/p1" 2>>"$TMP/log"
    timeout 120 $launch $L generate --model "$M" --max-tokens 6 $G --session "$TMP/s.lzs" >"$TMP/p2" 2>>"$TMP/log"
    check "$(ids "$TMP/p1" "$TMP/p2")" "$(ids "$TMP/whole")" "$preset session 4 + 6 == 10 on $([ -n "$launch" ] && echo "2 ranks" || echo "1 rank")"
  done
  rm -f "$TMP/s.lzs"
  timeout 120 $MPI $L generate --model "$M" --ids 5,6,7,8 --max-tokens 4 $G --placement by-type --session "$TMP/s.lzs" >"$TMP/p1" 2>>"$TMP/log"
  $L generate --model "$M" --max-tokens 6 $G --session "$TMP/s.lzs" >"$TMP/p2" 2>>"$TMP/log"
  check "$(ids "$TMP/p1" "$TMP/p2")" "$(ids "$TMP/whole")" "$preset session written on 2 GPUs (by-type), continued on 1"
done
within10() { # $1: label, rest: the command (run in the background by the caller's job)
  local rc=$1 took=$2 label=$3
  if [ "$rc" -ne 0 ] && [ "$took" -le 10 ]; then echo "ok   $label (rc $rc, ${took}s)"; else echo "FAIL $label: rc $rc after ${took}s"; fail=$((fail + 1)); fi
}
M=$TMP/tiny-lizard
$MPI $L generate --model "$M" --ids 5,6,7 --max-tokens 100000000 --ignore-eos --device $DEVICE >/dev/null 2>"$TMP/kill.err" &
job=$!; sleep 8
victim=$(pgrep -f "lizard generate --model $M" | grep -v "^$job\$" | tail -1)
[ -n "$victim" ] && kill -9 "$victim"; start=$(date +%s)
for _ in $(seq 1 30); do kill -0 $job 2>/dev/null || break; sleep 0.5; done
kill -0 $job 2>/dev/null && kill -9 $job; wait $job; rc=$?
within10 $rc $(( $(date +%s) - start )) "a rank killed mid-generation on 2 GPUs"
pkill -9 -f "lizard generate --model $M" 2>/dev/null
python3 - "$M" "$TMP/broken" <<'PY'
import json, os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
p = os.path.join(dst, "model.safetensors")
data = open(p, "rb").read(); n = struct.unpack("<Q", data[:8])[0]; h = json.loads(data[8:8 + n])
name = sorted(k for k in h if k.startswith("model.layers.3.") and k.endswith("up_proj.weight"))[0]
h[name]["shape"] = h[name]["shape"][::-1] if h[name]["shape"][0] != h[name]["shape"][1] else [1, h[name]["shape"][0] * h[name]["shape"][1]]
b = json.dumps(h).encode(); b += b" " * ((8 - len(b) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(b)) + b + data[8 + n:])
PY
start=$(date +%s)
timeout 60 $MPI $L generate --model "$TMP/broken" --ids 5,6,7 --max-tokens 4 --device $DEVICE >/dev/null 2>"$TMP/broken.err"
within10 $? $(( $(date +%s) - start )) "a rank with broken weights on 2 GPUs: $(grep -m1 -o 'rank 1 of 2[^:]*' "$TMP/broken.err")"
[ "$DEVICE" = cuda ] || { echo "device_sessions_faults: fail=$fail"; exit $(( fail > 0 )); }
start=$(date +%s)
timeout 60 mpirun --allow-run-as-root -np 1 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE $L generate --model "$M" --ids 5 --max-tokens 2 --device $DEVICE \
  : -np 1 -x CUDA_VISIBLE_DEVICES= $L generate --model "$M" --ids 5 --max-tokens 2 --device $DEVICE >/dev/null 2>"$TMP/nogpu.err"
within10 $? $(( $(date +%s) - start )) "a rank with no GPU: $(grep -m1 -o 'error: .*' "$TMP/nogpu.err" | cut -c1-100)"
echo "device_sessions_faults: fail=$fail"
[ "$fail" -eq 0 ]
