#!/usr/bin/env bash
# device_big_session.sh - on a 2-GPU machine (binaries in .devout/): a session
# over 2 GiB through a pipeline. The LLaMA-3-8B-shaped 50% hybrid (random
# weights from `lizard init`) reads a ~31K-token prompt under mpirun -np 2,
# generates 2 tokens and saves (a version-3 file of ~2.1 GB: its softmax
# layers' KV cache); a by-type 2-rank job continues it for 2 more; the 4 ids
# must equal one uninterrupted 4-token run. Prints "device_big_session: fail=N".
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
L=${LIZARD:-$PWD/.devout/lizard} M=${MODEL:-/tmp/h8b} TMP=$(mktemp -d) fail=0
MPI="mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE=0"
if [ ! -e "$M/config.json" ]; then
  t0=$(date +%s)
  $L init --config llama3-8b-hybrid --out "$M" >/dev/null 2>&1 || { echo "init failed"; exit 1; }
  echo "init llama3-8b-hybrid: $(( $(date +%s) - t0 )) s"
fi
# a text of about 31K tokens in the model's tokenizer
python3 - "$TMP/p.txt" <<'PY'
import random, sys
r = random.Random(7)
words = "the lizard rock sun desert tail scale eye tongue insect shadow stone heat basks waits hunts on a".split()
open(sys.argv[1], "w").write(" ".join(r.choice(words) for _ in range(20000)))
PY
n=$($L tokenize --model "$M" --file "$TMP/p.txt" 2>/dev/null | tr ',' '\n' | wc -l)
python3 - "$TMP/p.txt" "$n" 31000 <<'PY'
import sys
p, n, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = open(p).read()
words = t.split(" ")
k = max(1, int(len(words) * want / max(n, 1)))
while len(words) < k:
    words += words
open(p, "w").write(" ".join(words[:k]))
PY
echo "prompt: $($L tokenize --model "$M" --file "$TMP/p.txt" 2>/dev/null | tr ',' '\n' | wc -l) tokens"
G="--device cuda --temperature 0.9 --seed 3 --ignore-eos --format json --prompt-file $TMP/p.txt --prefill-chunk 4096"
ids() { python3 -c "import json,sys; print(','.join(str(i) for f in sys.argv[1:] for i in json.load(open(f))['ids']))" "$@"; }
t0=$(date +%s)
timeout 300 $MPI $L generate --model "$M" $G --max-tokens 4 >"$TMP/whole" 2>"$TMP/err0" || { echo "FAIL whole: $(tail -2 "$TMP/err0")"; fail=1; }
t1=$(date +%s)
timeout 300 $MPI $L generate --model "$M" $G --max-tokens 2 --session "$TMP/s.lzs" >"$TMP/p1" 2>"$TMP/err1" || { echo "FAIL save: $(tail -2 "$TMP/err1")"; fail=1; }
t2=$(date +%s)
echo "session file: $(stat -c %s "$TMP/s.lzs" 2>/dev/null) bytes, first byte $(head -c 1 "$TMP/s.lzs" | od -An -tx1) (0d = version 2)"
timeout 300 $MPI $L generate --model "$M" --device cuda --temperature 0.9 --seed 3 --ignore-eos --format json \
  --max-tokens 2 --session "$TMP/s.lzs" --placement by-type >"$TMP/p2" 2>"$TMP/err2" || { echo "FAIL continue: $(tail -2 "$TMP/err2")"; fail=1; }
t3=$(date +%s)
w=$(ids "$TMP/whole" 2>/dev/null) j=$(ids "$TMP/p1" "$TMP/p2" 2>/dev/null)
if [ -n "$w" ] && [ "$w" = "$j" ]; then echo "ok   2 + 2 tokens over a >2 GiB session (balanced -> by-type) == 4: $w"
else echo "FAIL 2 + 2 != 4: '$j' vs '$w'"; fail=1; fi
echo "seconds: whole $((t1 - t0)), save run $((t2 - t1)), continue run $((t3 - t2))"
rm -rf "$TMP"
echo "device_big_session: fail=$fail"
