#!/usr/bin/env bash
# temporary: the trace build of the final commit: a bad LIZARD_TRACE_US refused, a trace written and read
set -uo pipefail
mkdir -p .tp && tar -C .tp -xzf .devpack/trace.tgz
export LD_LIBRARY_PATH=$PWD/.tp/lib:${LD_LIBRARY_PATH:-}
LIZARD_TRACE=$OUT/t.txt LIZARD_TRACE_US=abc .tp/lizard bench --shape llama3-8b-lizard --prompt 0 --batch 1 --context 2048 --steps 16 --no-ceilings; echo "bad value rc=$?"
LIZARD_TRACE=$OUT/t.txt LIZARD_TRACE_US=8000 .tp/lizard bench --shape llama3-8b-lizard --prompt 0 --batch 1 --context 2048 --steps 64 --no-ceilings 2>&1 | tail -3; echo "rc=$?"
python3 tests/bench/trace_summary.py $OUT/t.txt | head -12
rm -f $OUT/t.txt
