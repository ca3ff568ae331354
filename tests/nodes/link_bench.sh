#!/usr/bin/env bash
# link_bench.sh LIZARD [full] - decode tokens/s and time per step of a pipeline across emulated hosts
# (nodes_lib.sh) against the bandwidth of every host's link (tc tbf) and, where the kernel has netem,
# its delay, at batch 1 and 64, with the bytes per token each hop carries. Without "full" (CI, ctest
# nodes.links, ~40 s): 2 hosts, no limit and 1 Mbit/s (and 2 ms each way with netem), checked: a hop
# carries one activation row per token, the narrow link shows in batch 64's step, the delay in batch
# 1's. With "full" (by hand, minutes): 2 and 3 hosts over a grid of rates (and delays). Records go to
# $LINK_BENCH_OUT (JSON lines; default a temporary file); plot_links.py turns them into docs/running.md's
# table and SVG.
set -u
LIZARD=$1
MODE=${2:-ci}
. "$(dirname "$0")/nodes_lib.sh" # TMP, ok, bad (test_lib.sh), nodes_start, nodes_mpirun, nodes_shape
OUT=${LINK_BENCH_OUT:-$TMP/links.jsonl}
: >"$OUT"
nodes_start 3
if [ "$MODE" = full ]; then
    HOSTS="2 3" STEPS=40 LINKS=("none" "rate 10gbit" "rate 1gbit" "rate 100mbit" "rate 10mbit" "rate 1mbit")
    nodes_have_netem && LINKS+=("delay 0.2ms rate 10gbit" "delay 0.5ms rate 10gbit" "delay 1ms rate 1gbit"
                                "delay 2ms rate 1gbit" "delay 5ms rate 1gbit")
else
    HOSTS="2" STEPS=20 LINKS=("none" "rate 1mbit")
    nodes_have_netem && LINKS+=("delay 2ms rate 1gbit")
fi
nodes_have_netem || echo "link_bench: this kernel has no sch_netem: bandwidth limits only (tbf), no added delay"

for n in $HOSTS; do
    for link in "${LINKS[@]}"; do
        nodes_shape "$([ "$link" = none ] || echo "$link")" || { bad "cannot shape the links with '$link'"; continue; }
        nodes_mpirun "$n" "$LIZARD" bench --shape tiny-hybrid --device cpu --prompt 16 --batch 1,64 --context 64 \
            --steps $STEPS --json "$TMP/one.jsonl" >/dev/null 2>"$TMP/err" || { bad "$n hosts, $link: $(grep -m2 error "$TMP/err")"; continue; }
        python3 - "$TMP/one.jsonl" "$n" "$link" >>"$OUT" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
for i, r in enumerate(recs):
    if r["kind"] != "decode":
        continue
    ranks = [q for q in recs[i + 1:i + 1 + r["ranks"]] if q["kind"] == "rank"]
    hop = max(q["activation_bytes_per_token"] for q in ranks)
    print(json.dumps({"hosts": int(sys.argv[2]), "link": sys.argv[3], "batch": r["batch"], "tok_s": r["tok_s"],
                      "ms_per_step": 1000.0 * r["batch"] / r["tok_s"], "bytes_per_token_per_hop": hop}))
PY
    done
done
nodes_shape ""
python3 "$(dirname "$0")/plot_links.py" "$OUT"

# the checks: a hop carries one activation row per token (128 floats); 1 Mbit/s shows in batch 64's step
# (64 x 512 bytes take 262 ms at that rate, more than the step computes); where netem works, 2 ms each way show in batch 1's step
python3 - "$OUT" <<'PY' && ok || bad "link bench checks failed"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
step = {(r["hosts"], r["link"], r["batch"]): r["ms_per_step"] for r in recs}
hops = {r["bytes_per_token_per_hop"] for r in recs}
base1, base64 = step.get((2, "none", 1), 0), step.get((2, "none", 64), 0)
narrow, delayed = step.get((2, "rate 1mbit", 64), 0), step.get((2, "delay 2ms rate 1gbit", 1))
ok = hops == {512.0} and base64 > 0 and narrow - base64 >= 100.0 and (delayed is None or delayed - base1 >= 3.0)
if not ok:
    print(f"bytes per hop {hops}; batch 64: {base64} ms per step, {narrow} at 1 Mbit/s; "
          f"batch 1: {base1}, {delayed} with 2 ms each way", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
