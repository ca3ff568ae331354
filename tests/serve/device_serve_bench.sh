#!/usr/bin/env bash
# device_serve_bench.sh - on a 2-GPU machine (binaries in .devout/): serving
# throughput and latency of `mpirun -np 2 lizard serve` for the LLaMA-3-8B-shaped
# pure Lizard and 50% hybrid models (random weights written by `lizard init`),
# CLIENTS concurrent streams of 4K context each (prompt PROMPT random ids + MAX_TOKENS
# generated). One JSON line per run to $OUT/serve-bench.jsonl.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; TMP=${TMPDIR:-/tmp}/serve-bench; mkdir -p "$TMP"
LIZARD=$PWD/.devout/lizard
source tests/serve/lib.sh
PROMPT=${PROMPT:-3840} MAX_TOKENS=${MAX_TOKENS:-256} SECONDS_EACH=${SECONDS_EACH:-45}
MPI="mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
for v in ${VARIANTS:-lizard hybrid}; do
  [ -f "$TMP/$v/config.json" ] || $LIZARD init --config "llama3-8b-$v" --out "$TMP/$v" >/dev/null 2>&1 || exit 1
  # init writes no 128K-token tokenizer: the one tests/fixtures/tokenizers/gen_tokenizer_fixtures.py
  # --bench-out trains (LLaMA-3 layout, 128000 + 256 special tokens); prompts are sent as ids anyway
  zcat "${TOKENIZER_GZ:-.devout/bench128k.json.gz}" >"$TMP/$v/tokenizer.json" || exit 1
  for clients in ${CLIENTS:-128 512}; do
    LAUNCH=$MPI
    t0=$(date +%s)
    start_server "$OUT/serve-$v-$clients.log" --model "$TMP/$v" --device cuda --max-batch "$clients" \
      --max-context 4096 --max-prompt-tokens "$PROMPT" --max-tokens "$MAX_TOKENS" --queue-size 4096 \
      --prefill-chunk ${CHUNK:-4096} --prefix-cache 0 || { echo "server failed: $(tail -3 "$OUT/serve-$v-$clients.log")"; continue; }
    echo "$v: server up in $(( $(date +%s) - t0 )) s"
    python3 tests/serve/bench_serve.py "$PORT" "$clients" "$PROMPT" "$MAX_TOKENS" "$SECONDS_EACH" ${TEMPERATURE:-0} |
      sed "s/^{/{\"variant\": \"$v\", \"gpus\": 2, /" | tee -a "$OUT/serve-bench.jsonl"
    curl -s "$URL/metrics" | grep -E "^lizard_(state_bytes|requests|queue)" | head -8
    stop_server; echo "server exit $?"
  done
done
