#!/usr/bin/env bash
# device_generation.sh - on the GPU machine (binaries of tests/gpu/pack_devout.sh): the generation loop
# on the CUDA backend, against the CPU and against itself, on the teacher of tests/quality and the
# hybrid fixture: greedy fp32 ids equal the CPU's; a batch gives each prompt's ids of a run alone;
# sampling repeats with its seed and sequence i of a batch is the run with seed + i; serve answers a
# completion with generate's text. One line a check; exits 1 if any failed. LIZARD, DEVICE: the
# binary and the device under test (a dry run on the CPU: LIZARD=build-cpu/lizard DEVICE=cpu).
set -uo pipefail
source tests/gpu/device_env.sh
L=${LIZARD:-.devout/lizard} D=${DEVICE:-cuda} T=tests/quality/teacher H=tests/fixtures/hybrid50/model
fail=0
check() { if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: $2 | $3"; fail=1; fi; }
gen() { timeout 120 "$L" generate --format json "$@" 2>>"$OUT/generation.err"; }
ids() { python3 -c 'import json,sys; print("\n".join(str(json.loads(l)["ids"]) for l in sys.stdin if l.strip()))'; }

for p in "The history of the city" "In the year 1850, the"; do
  check "teacher greedy, cuda fp32 = cpu: '$p'" "$(gen --model $T --prompt "$p" --max-tokens 48 | ids)" \
    "$(gen --model $T --prompt "$p" --max-tokens 48 --device $D --dtype fp32 | ids)"
done
check "hybrid fixture greedy, cuda fp32 = cpu" "$(gen --model $H --ids 1,2,3,4,5 --max-tokens 32 | ids)" \
  "$(gen --model $H --ids 1,2,3,4,5 --max-tokens 32 --device $D --dtype fp32 | ids)"

printf '%s\n' "The history of the city" "A long time ago" "In the year 1850, the" >"$OUT/prompts.txt"
alone=$(while read -r p; do gen --model $T --prompt "$p" --max-tokens 24 --device $D --dtype fp32 | ids; done <"$OUT/prompts.txt")
check "teacher batch of 3 = each alone, cuda fp32" "$alone" \
  "$(gen --model $T --prompts-file "$OUT/prompts.txt" --max-tokens 24 --device $D --dtype fp32 | ids)"

s1=$(gen --model $T --prompt "Once" --max-tokens 32 --temperature 0.8 --top-p 0.95 --seed 7 --device $D | ids)
check "sampled twice with seed 7, cuda bf16" "$s1" \
  "$(gen --model $T --prompt "Once" --max-tokens 32 --temperature 0.8 --top-p 0.95 --seed 7 --device $D | ids)"
two=$(gen --model $T --prompt "Once" --max-tokens 32 --temperature 0.8 --top-p 0.95 --seed 7 --batch 2 --device $D | ids)
check "batch of 2, sequence 1 = seed 8 alone, cuda bf16" "$(echo "$two" | sed -n 2p)" \
  "$(gen --model $T --prompt "Once" --max-tokens 32 --temperature 0.8 --top-p 0.95 --seed 8 --device $D | ids)"

timeout 120 "$L" serve --model $T --device $D --dtype fp32 --port 8391 >"$OUT/serve.log" 2>&1 &
srv=$!
want=$(gen --model $T --prompt "The history of the city" --max-tokens 24 --device $D --dtype fp32 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')
got=$(python3 - <<'EOF'
import json, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen("http://127.0.0.1:8391/health", timeout=1); break
    except Exception:
        time.sleep(0.2)
req = urllib.request.Request("http://127.0.0.1:8391/v1/completions", method="POST",
    headers={"Content-Type": "application/json"},
    data=json.dumps({"prompt": "The history of the city", "max_tokens": 24, "temperature": 0}).encode())
print(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"])
EOF
)
check "serve completion = generate, cuda fp32" "$got" "$want"
kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null
echo "device_generation: fail=$fail"
exit $fail
