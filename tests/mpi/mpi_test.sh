#!/usr/bin/env bash
# mpi_test.sh LIZARD - the model as a pipeline of MPI ranks on the CPU backend:
# forward logits byte-identical to one process for 1..4 ranks and both
# planners; greedy and batched generation identical with a hand-written
# interleaved plan; a bad plan, a rank that fails while loading, and a rank
# killed mid-run all end the whole job with a non-zero exit within 10 s; a stalled rank
# (stopped) within the step watchdog's timeout.
set -u
LIZARD=$1
FIX=$(cd "$(dirname "$0")/../fixtures" && pwd)
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun

H=$FIX/hybrid50/model
IDS=305,265,245,226,40,81,264,106,271,56,111,312
"$LIZARD" forward --model "$H" --ids $IDS --logits-out "$TMP/one.npy" 2>/dev/null || bad "single-process forward"
for n in 1 2 3 4; do
  for pl in balanced by-type; do
    run $n "$LIZARD" forward --model "$H" --ids $IDS --logits-out "$TMP/$n-$pl.npy" --placement $pl \
      >/dev/null 2>"$TMP/err" || { bad "np $n $pl: $(grep error "$TMP/err" | head -2)"; continue; }
    cmp -s "$TMP/one.npy" "$TMP/$n-$pl.npy" && ok || bad "np $n $pl: logits differ from one process"
  done
done

# a rank owning two non-adjacent runs of layers; greedy ids identical
printf '# interleaved\nrank 0: embed 0, 2\nrank 1: 1, 3 head\n' >"$TMP/plan.txt"
"$LIZARD" generate --model "$H" --ids $IDS --max-tokens 12 --format json --ignore-eos >"$TMP/g1" 2>/dev/null
run 2 "$LIZARD" generate --model "$H" --ids $IDS --max-tokens 12 --format json --ignore-eos --plan "$TMP/plan.txt" \
  >"$TMP/g2" 2>"$TMP/err" && cmp -s "$TMP/g1" "$TMP/g2" && ok || bad "interleaved plan: $(cat "$TMP/g2") vs $(cat "$TMP/g1")"

# many sequences at once, sampled, pure Lizard with per-head maps
L=$FIX/lizard_perhead/model
"$LIZARD" generate --model "$L" --ids $IDS --batch 3 --max-tokens 8 --temperature 0.7 --format json --ignore-eos \
  >"$TMP/b1" 2>/dev/null
run 3 "$LIZARD" generate --model "$L" --ids $IDS --batch 3 --max-tokens 8 --temperature 0.7 --format json \
  --ignore-eos >"$TMP/b3" 2>/dev/null && cmp -s "$TMP/b1" "$TMP/b3" && ok || bad "batched generation on 3 ranks differs"

# different prompts, greedy, through 3 stages with the rows circulating as 3 groups (the last stage picks
# the ids): the same ids as one process; with --max-tokens 1 each prompt keeps its own first token
"$LIZARD" init --config tiny-hybrid --out "$TMP/tiny" >/dev/null 2>&1 || bad "init tiny-hybrid"
printf 'the cat sat\nhello there friend\na\nlizards are fast and small\nwhy\n' >"$TMP/p5.txt"
"$LIZARD" generate --model "$TMP/tiny" --prompts-file "$TMP/p5.txt" --max-tokens 6 --format json --ignore-eos \
  >"$TMP/q1" 2>/dev/null
run 3 "$LIZARD" generate --model "$TMP/tiny" --prompts-file "$TMP/p5.txt" --max-tokens 6 --format json --ignore-eos \
  >"$TMP/q3" 2>"$TMP/err" && cmp -s "$TMP/q1" "$TMP/q3" && ok || bad "greedy prompts on 3 ranks differ: $(grep error "$TMP/err")"
"$LIZARD" generate --model "$TMP/tiny" --prompts-file "$TMP/p5.txt" --max-tokens 1 --format json --ignore-eos \
  >"$TMP/q0" 2>/dev/null
firsts() { python3 -c "import json,sys; print([json.loads(l)['ids'][0] for l in open(sys.argv[1])])" "$1"; }
[ "$(firsts "$TMP/q0")" = "$(firsts "$TMP/q1")" ] && ok || bad "first tokens: $(firsts "$TMP/q0") vs $(firsts "$TMP/q1")"

# a session with bf16 S and z written by 2 ranks (each rank rounds its own layers) continues in one process
run 2 "$LIZARD" generate --model "$L" --ids $IDS --max-tokens 3 --ignore-eos --format json --session "$TMP/b.lzs" \
  --session-dtype bf16 >/dev/null 2>"$TMP/err" &&
  "$LIZARD" generate --model "$L" --max-tokens 3 --ignore-eos --format json --session "$TMP/b.lzs" >/dev/null 2>>"$TMP/err" &&
  ok || bad "bf16 session across ranks: $(grep error "$TMP/err")"

# a live sequence moved mid-generation (balanced on 3 ranks -> by-type; 2 ranks -> an interleaved plan):
# the same sampled tokens as one uninterrupted process; a plan that does not fit the job is refused
"$LIZARD" generate --model "$H" --ids $IDS --max-tokens 12 --format json --ignore-eos --temperature 0.8 --seed 3 \
  >"$TMP/m0" 2>/dev/null
run 3 "$LIZARD" generate --model "$H" --ids $IDS --max-tokens 12 --format json --ignore-eos --temperature 0.8 --seed 3 \
  --move-after 5 --move-placement by-type >"$TMP/m1" 2>"$TMP/err"
cmp -s "$TMP/m0" "$TMP/m1" && grep -q "moved the sequence at position" "$TMP/err" && ok || bad "moved to by-type: $(cat "$TMP/m1" "$TMP/err")"
run 2 "$LIZARD" generate --model "$H" --ids $IDS --max-tokens 12 --format json --ignore-eos --temperature 0.8 --seed 3 \
  --move-after 7 --move-plan "$TMP/plan.txt" >"$TMP/m2" 2>"$TMP/err"
cmp -s "$TMP/m0" "$TMP/m2" && ok || bad "moved to an interleaved plan: $(cat "$TMP/m2" "$TMP/err")"
printf 'rank 0: embed 0\nrank 1: 1\nrank 2: 2, 3 head\n' >"$TMP/plan3.txt"
run 2 "$LIZARD" generate --model "$H" --ids $IDS --max-tokens 12 --ignore-eos --move-after 4 --move-plan "$TMP/plan3.txt" \
  >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] && grep -q "plan3.txt" "$TMP/err" && ok || bad "move to a 3-rank plan in a 2-rank job: rc=$rc $(grep error "$TMP/err")"

# the benchmark through the pipeline: every figure and every rank's line
run 3 "$LIZARD" bench --shape tiny-hybrid --device cpu --prompt 100 --batch 1,5 --context 40 --steps 3 \
  --prefill-chunk 16 --json "$TMP/bench.jsonl" >"$TMP/bench" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^decode' "$TMP/bench")" = 2 ] && [ "$(grep -c '^prompt' "$TMP/bench")" = 1 ] &&
  [ "$(grep -c 'rank 2:' "$TMP/bench")" = 3 ] && [ "$(grep -c '"kind": "rank"' "$TMP/bench.jsonl")" = 9 ] && ok ||
  bad "pipelined bench: rc=$rc $(cat "$TMP/bench" "$TMP/err" | head -5)"

# a session written by 2 ranks (balanced), continued by 3 (by-type), then by one process: the same tokens as one run.
# A step's exit status and stderr go into the failure line (a run that failed prints no ids).
"$LIZARD" generate --model "$H" --ids $IDS --max-tokens 9 --temperature 0.9 --seed 5 --ignore-eos --format json >"$TMP/s0" 2>/dev/null
whole=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ids'])" "$TMP/s0")
steps="" # "name rc=N" of every step
step() { # step NAME CMD...: stdout to $TMP/NAME, stderr to $TMP/NAME.err
    local name=$1; shift
    "$@" >"$TMP/$name" 2>"$TMP/$name.err"
    steps="$steps $name rc=$?"
}
joined_ids() { python3 -c "import json,sys; print(sum((json.load(open(f))['ids'] for f in sys.argv[1:]), []))" "$@" 2>&1 | tail -1; }
step_errors() { for f in "$@"; do grep -v '^$' "$TMP/$f.err" | head -3; done | head -c 1500; }
step s1 run 2 "$LIZARD" generate --model "$H" --ids $IDS --max-tokens 3 --temperature 0.9 --seed 5 --ignore-eos --format json \
  --session "$TMP/p.lzs"
step s2 run 3 "$LIZARD" generate --model "$H" --max-tokens 3 --temperature 0.9 --seed 5 --ignore-eos --format json \
  --session "$TMP/p.lzs" --placement by-type
step s3 "$LIZARD" generate --model "$H" --max-tokens 3 --temperature 0.9 --seed 5 --ignore-eos --format json \
  --session "$TMP/p.lzs"
joined=$(joined_ids "$TMP/s1" "$TMP/s2" "$TMP/s3")
[ "$joined" = "$whole" ] && ok || bad "session across plans: $joined vs $whole;$steps; $(step_errors s1 s2 s3)"
# the same in version 3 (chunked, forced by LIZARD_SESSION_CHUNK_BYTES, which also makes the stage records
# cross ranks in pieces of 512 bytes): 2 ranks write it, 3 ranks continue it
# (writing it chunked again), one process finishes it
rm -f "$TMP/q.lzs"
steps=""
export LIZARD_SESSION_CHUNK_BYTES=512
step c1 run 2 "$LIZARD" generate --model "$H" --ids $IDS --max-tokens 3 --temperature 0.9 --seed 5 --ignore-eos \
  --format json --session "$TMP/q.lzs"
[ -s "$TMP/q.lzs" ] && [ "$(head -c 1 "$TMP/q.lzs" | od -An -tx1 | tr -d ' ')" != "0d" ] && ok ||
  bad "2 ranks: not a chunked session file;$steps; $(step_errors c1)"
step c2 run 3 "$LIZARD" generate --model "$H" --max-tokens 3 --temperature 0.9 --seed 5 --ignore-eos --format json \
  --session "$TMP/q.lzs" --placement by-type
unset LIZARD_SESSION_CHUNK_BYTES
step c3 "$LIZARD" generate --model "$H" --max-tokens 3 --temperature 0.9 --seed 5 --ignore-eos --format json \
  --session "$TMP/q.lzs"
joined=$(joined_ids "$TMP/c1" "$TMP/c2" "$TMP/c3")
[ "$joined" = "$whole" ] && ok || bad "chunked session across plans: $joined vs $whole;$steps; $(step_errors c1 c2 c3)"

# a plan that does not match the job: refused, with the file named
run 3 "$LIZARD" forward --model "$H" --ids 1 --logits-out "$TMP/x.npy" --plan "$TMP/plan.txt" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] && grep -q "plan.txt" "$TMP/err" && [ ! -e "$TMP/x.npy" ] && ok || bad "mismatched plan: rc=$rc $(grep error "$TMP/err")"

# rank 1 reads another model folder than rank 0 (a stale copy on another node): refused, rank 1 named
ln -s "$FIX/hybrid50/model" "$TMP/node0" && ln -s "$FIX/lizard_perhead/model" "$TMP/node1"
run 2 sh -c "exec \"$LIZARD\" forward --model \"$TMP/node\$OMPI_COMM_WORLD_RANK\" --ids 1,2 --logits-out \"$TMP/z.npy\"" \
  >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] && grep -q "rank 1 loaded a different model than rank 0" "$TMP/err" && [ ! -e "$TMP/z.npy" ] && ok ||
  bad "different models on the ranks: rc=$rc $(grep error "$TMP/err" | head -2)"

# rank 1 fails while loading its layers (layer 3's tensor is broken): everyone stops, rank 1 named
cp -r "$H" "$TMP/broken"
python3 - "$TMP/broken/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
data = open(p, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
t = h["model.layers.3.mlp.up_proj.weight"]
t["shape"] = [t["shape"][1], t["shape"][0]]
b = json.dumps(h).encode()
b += b" " * ((8 - len(b) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(b)) + b + data[8 + n:])
PY
start=$(date +%s)
run 2 "$LIZARD" forward --model "$TMP/broken" --ids $IDS --logits-out "$TMP/y.npy" >/dev/null 2>"$TMP/err"
rc=$? took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $took -le 10 ] && grep -q "rank 1 of 2.*model.layers.3.mlp.up_proj.weight" "$TMP/err" && ok ||
  bad "failing rank: rc=$rc after ${took}s: $(grep error "$TMP/err" | head -2)"

# a rank killed in the middle of a long generation: the job ends non-zero within 10 s
N=$FIX/lizard_nonorm/model
run 2 "$LIZARD" generate --model "$N" --ids $IDS --max-tokens 1000000 --ignore-eos >/dev/null 2>"$TMP/err" &
job=$!
sleep 3
victim=$(pgrep -f "lizard generate --model $N" | grep -v "^$job\$" | tail -1)
[ -n "$victim" ] && kill -9 "$victim"
start=$(date +%s)
for _ in $(seq 1 20); do kill -0 $job 2>/dev/null || break; sleep 0.5; done
wait $job
rc=$? took=$(( $(date +%s) - start ))
[ -n "$victim" ] && [ $rc -ne 0 ] && [ $took -le 10 ] && ok || bad "killed rank: rc=$rc after ${took}s (victim '$victim')"
pkill -9 -f "lizard generate --model $N" 2>/dev/null

# a rank that stalls without exiting (SIGSTOP: like a hung kernel or a frozen host): the other rank's
# step watchdog (LIZARD_STEP_TIMEOUT) names itself and the step and ends the job
LIZARD_STEP_TIMEOUT=2 run 2 -x LIZARD_STEP_TIMEOUT "$LIZARD" generate --model "$N" --ids $IDS --max-tokens 1000000 \
  --ignore-eos >/dev/null 2>"$TMP/err" &
job=$!
sleep 3
victim=$(pgrep -f "lizard generate --model $N" | grep -v "^$job\$" | tail -1)
[ -n "$victim" ] && kill -STOP "$victim"
start=$(date +%s)
for _ in $(seq 1 30); do kill -0 $job 2>/dev/null || break; sleep 0.5; done
wait $job
rc=$? took=$(( $(date +%s) - start ))
[ -n "$victim" ] && [ $rc -ne 0 ] && [ $took -le 12 ] && grep -q "rank [01] of 2 (.*): rank [01] (.*) sent nothing for [0-9]* s.*(LIZARD_STEP_TIMEOUT=2)" "$TMP/err" && ok ||
  bad "stalled rank: rc=$rc after ${took}s (victim '$victim'): $(grep lizard: "$TMP/err" | head -2)"
[ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
pkill -9 -f "lizard generate --model $N" 2>/dev/null
LIZARD_STEP_TIMEOUT=soon run 2 -x LIZARD_STEP_TIMEOUT "$LIZARD" generate --model "$N" --ids $IDS --max-tokens 2 \
  >/dev/null 2>"$TMP/err" && bad "LIZARD_STEP_TIMEOUT=soon accepted" ||
  { grep -q "LIZARD_STEP_TIMEOUT=soon" "$TMP/err" && ok || bad "bad timeout: $(head -2 "$TMP/err")"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
