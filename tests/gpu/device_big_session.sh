#!/usr/bin/env bash
# device_big_session.sh - on a 2-GPU machine (binaries in .devout/): a session
# over 2 GiB through a pipeline. The LLaMA-3-8B-shaped 50% hybrid (random
# weights from `lizard init`) reads a 34K-token prompt (random ids) under mpirun -np 2,
# generates 2 tokens and saves (a version-3 file of 2.25 GB: its softmax
# layers' KV cache); a by-type 2-rank job continues it for 2 more; the 4 ids
# must equal one uninterrupted 4-token run. DEVICE=cpu MODEL=dir WANT=n
# MPI_EXTRA=--oversubscribe LIZARD=path runs the same on a CPU machine. Prints "device_big_session: fail=N".
set -uo pipefail
source tests/gpu/device_env.sh
L=${LIZARD:-$PWD/.devout/lizard} M=${MODEL:-/tmp/h8b} TMP=$(mktemp -d) fail=0
DEVICE=${DEVICE:-cuda} WANT=${WANT:-34000}
MPI="mpirun --allow-run-as-root ${MPI_EXTRA:-} -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE=0"
if [ ! -e "$M/config.json" ]; then
  t0=$(date +%s)
  $L init --config llama3-8b-hybrid --out "$M" >/dev/null 2>&1 || { echo "init failed"; exit 1; }
  echo "init llama3-8b-hybrid: $(( $(date +%s) - t0 )) s"
fi
# WANT random two-digit ids (no tokenizer needed; 3 bytes each keeps --ids under the 128 KiB an argument may hold)
IDS=$(python3 -c "import random; r = random.Random(7); print(','.join(str(r.randrange(10, 100)) for _ in range($WANT)))")
G="--device $DEVICE --temperature 0.9 --seed 3 --ignore-eos --format json --prefill-chunk 4096"
ids() { python3 -c "import json,sys; print(','.join(str(i) for f in sys.argv[1:] for i in json.load(open(f))['ids']))" "$@"; }
t0=$(date +%s)
timeout 300 $MPI $L generate --model "$M" $G --ids "$IDS" --max-tokens 4 >"$TMP/whole" 2>"$TMP/err0" || { echo "FAIL whole: $(grep -v "^\[" "$TMP/err0" | head -3)"; fail=1; }
t1=$(date +%s)
timeout 300 $MPI $L generate --model "$M" $G --ids "$IDS" --max-tokens 2 --session "$TMP/s.lzs" >"$TMP/p1" 2>"$TMP/err1" || { echo "FAIL save: $(grep -v "^\[" "$TMP/err1" | head -3)"; fail=1; }
t2=$(date +%s)
echo "session file: $(stat -c %s "$TMP/s.lzs" 2>/dev/null) bytes, first byte $(head -c 1 "$TMP/s.lzs" | od -An -tx1) (0d = version 2)"
timeout 300 $MPI $L generate --model "$M" --device $DEVICE --temperature 0.9 --seed 3 --ignore-eos --format json \
  --max-tokens 2 --session "$TMP/s.lzs" --placement by-type >"$TMP/p2" 2>"$TMP/err2" || { echo "FAIL continue: $(grep -v "^\[" "$TMP/err2" | head -3)"; fail=1; }
t3=$(date +%s)
w=$(ids "$TMP/whole" 2>/dev/null) j=$(ids "$TMP/p1" "$TMP/p2" 2>/dev/null)
if [ -n "$w" ] && [ "$w" = "$j" ]; then echo "ok   2 + 2 tokens over a >2 GiB session (balanced -> by-type) == 4: $w"
else echo "FAIL 2 + 2 != 4: '$j' vs '$w'"; fail=1; fi
echo "seconds: whole $((t1 - t0)), save run $((t2 - t1)), continue run $((t3 - t2))"
rm -rf "$TMP"
echo "device_big_session: fail=$fail"
