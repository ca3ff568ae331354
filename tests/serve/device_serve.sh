#!/usr/bin/env bash
# device_serve.sh - on a GPU machine (binaries in .devout/): `lizard serve`
# on one GPU and as a 2-GPU pipeline answers greedy completions with the ids
# `lizard generate` gives on the same device; a live sequence moved between
# placements on 2 GPUs continues with the same ids. Log to $OUT/serve.txt.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; TMP=$(mktemp -d)
LIZARD=$PWD/.devout/lizard
source tests/serve/lib.sh
log=$OUT/serve.txt
MPI="mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
$LIZARD init --config tiny-hybrid --out "$TMP/tiny" >/dev/null 2>&1
P=12,34,56,78,90,11,22,33
want=$($LIZARD generate --model "$TMP/tiny" --ids $P --max-tokens 16 --ignore-eos --format json --device cuda 2>/dev/null |
       python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))")
echo "generate on 1 GPU: $want" >>"$log"
for launch in "" "$MPI"; do
  LAUNCH=$launch
  start_server "$TMP/server.log" --model "$TMP/tiny" --device cuda || { echo "server failed: $(cat "$TMP/server.log")" >>"$log"; continue; }
  code=$(req POST /v1/completions "{\"prompt\": [$P], \"max_tokens\": 16, \"ignore_eos\": true, \"return_token_ids\": true, \"temperature\": 0}")
  got=$(jget "$TMP/body" "','.join(map(str, d['choices'][0]['token_ids']))")
  echo "serve (${launch:+2 GPUs}${launch:-1 GPU}): HTTP $code ids $got $([ "$got" = "$want" ] && echo SAME || echo DIFFERENT)" >>"$log"
  code=$(req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": true}')
  echo "chat stream: HTTP $code, $(grep -c '^data: ' "$TMP/body") events, last: $(tail -c 40 "$TMP/body" | tr '\n' ' ')" >>"$log"
  stop_server; echo "server exit $?" >>"$log"
done
g1=$($LIZARD generate --model "$TMP/tiny" --ids $P --max-tokens 16 --ignore-eos --format json --device cuda --temperature 0.7 --seed 4 2>/dev/null)
g2=$(timeout 120 $MPI $LIZARD generate --model "$TMP/tiny" --ids $P --max-tokens 16 --ignore-eos --format json --device cuda \
     --temperature 0.7 --seed 4 --move-after 6 --move-placement by-type 2>>"$log")
echo "moved live sequence on 2 GPUs: $([ "$g1" = "$g2" ] && echo SAME || echo "DIFFERENT $g1 vs $g2")" >>"$log"
cat "$log"
