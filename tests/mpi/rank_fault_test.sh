#!/usr/bin/env bash
# rank_fault_test.sh LIZARD - a rank stopped (SIGSTOP) or killed in the middle
# of a generation or a distillation, or stopped while a server is idle, ends
# the whole job with a non-zero exit within the rank timeout (default 30 s)
# and a few seconds, with a line naming the silent rank, its host and what
# the reporting rank was waiting for; prints the measured end times
# (docs/running.md "Faults").
# A rank that runs another lizard build is refused by name.
set -u
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun
require_mpirun
SLACK=10

"$LIZARD" init --config tiny-hybrid --out "$TMP/tiny" >/dev/null 2>&1 || { bad "init tiny-hybrid"; exit 1; }

# rank_pid TAG RANK: the pid of rank RANK among the processes whose command line holds TAG
rank_pid() {
    for p in $(pgrep -f -- "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}

# fault NAME NP RANK SIGNAL DEADLINE ARGS...: starts the job on the model $TMP/NAME (its processes are told
# apart by that path; a link to $MODEL, default $TMP/tiny, given as $MODEL_FLAG, default --model), waits until
# it runs, sends SIGNAL to RANK, and expects it to end non-zero within DEADLINE + SLACK seconds; the line that
# names the silent rank goes to $TMP/NAME.line
fault() {
    local name=$1 np=$2 rank=$3 sig=$4 deadline=$5; shift 5
    local tag="$TMP/$name"
    ln -s "${MODEL:-$TMP/tiny}" "$tag"
    timeout 200 mpirun -np "$np" "$LIZARD" "$@" "${MODEL_FLAG:---model}" "$tag" >/dev/null 2>"$TMP/$name.err" &
    local job=$! victim=""
    for _ in $(seq 1 100); do # running: every rank's process exists and the job is past loading
        victim=$(rank_pid "$tag" "$rank")
        [ -n "$victim" ] && [ -n "$(rank_pid "$tag" $((np - 1)))" ] && break
        sleep 0.1
    done
    sleep 4 # past MPI_Init (Open MPI's own start, before lizard's heartbeat) on a loaded machine too
    [ -n "$victim" ] && kill "-$sig" "$victim"
    local start; start=$(date +%s.%N)
    wait "$job"
    local rc=$? took; took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    grep -m1 "lizard: error: rank" "$TMP/$name.err" >"$TMP/$name.line"
    echo "fault $name: SIG$sig to rank $rank of $np: the job ended after ${took} s, exit $rc: $(cat "$TMP/$name.line")"
    [ -n "$victim" ] && [ "$rc" -ne 0 ] && python3 -c "import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))" \
        "$took" $((deadline + SLACK)) && ok || bad "$name: rc=$rc after ${took}s (victim '$victim'): $(head -c 600 "$TMP/$name.err")"
}
GEN=(generate --ids 1,2,3 --max-tokens 16000000 --ignore-eos --temperature 0.9 --allow-long-context)

# rank 0 stopped: the other rank notices that it fell silent (default timeout), whatever it was
# doing when rank 0 stopped (the line says what: idle, or which wait of which step)
fault stop0 2 0 STOP 30 "${GEN[@]}"
grep -Eq "rank 1 of 2 \(.*\): rank 0 \(.*\) sent nothing for 3[0-9] s.*while this rank was .*\(--rank-timeout 30\)" \
    "$TMP/stop0.line" && ok || bad "stop0: $(cat "$TMP/stop0.line")"
# a middle rank stopped: the lowest rank that lives names it and what it was waiting for, in one line (ranks 0
# and 2 both see the silence; each printed its line)
fault stop1 3 1 STOP 30 "${GEN[@]}"
grep -Eq "rank 0 of 3 \(.*\): rank 1 \(.*\) sent nothing for [0-9]* s.*while this rank was " \
    "$TMP/stop1.line" && ok || bad "stop1: $(cat "$TMP/stop1.line")"
[ "$(grep -c "lizard: error: rank" "$TMP/stop1.err")" = 1 ] && [ "$(grep -c "lizard: warning: rank" "$TMP/stop1.err")" = 1 ] &&
    ok || bad "stop1: not one line each: $(grep "lizard:" "$TMP/stop1.err")"
# a middle rank killed: mpirun sees it go
fault kill1 3 1 KILL 0 "${GEN[@]}"
grep -q "process rank 1 .* on node .* exited on signal 9" "$TMP/kill1.err" && ok || bad "kill1: $(tail -3 "$TMP/kill1.err")"
# the flag beats the environment; a server with no request in flight notices a stopped rank too
LIZARD_STEP_TIMEOUT=600 fault serve_idle 2 1 STOP 4 --rank-timeout 4 serve --port 0
grep -q "rank 0 of 2 (.*): rank 1 (.*) sent nothing for [4-9] s.*between steps.*(--rank-timeout 4)" \
    "$TMP/serve_idle.line" && ok || bad "serve_idle: $(cat "$TMP/serve_idle.line")"
# a rank stopped during distillation: the other names it, whichever wait for it (hidden states, losses) it was in
"$LIZARD" init --config tiny-teacher --out "$TMP/teacher" >/dev/null 2>&1 || bad "init tiny-teacher"
MODEL=$TMP/teacher MODEL_FLAG=--teacher fault distill 2 0 STOP 4 --rank-timeout 4 distill --seq-len 32 --batch 2 \
    --data "$(dirname "$0")/../fixtures/corpus/finetune_slice.txt" --tokens 100000000 --out "$TMP/out-distill"
grep -Eq "rank 1 of 2 \(.*\): rank 0 \(.*\) sent nothing for [4-9] s.*while this rank was " "$TMP/distill.line" &&
    ok || bad "distill: $(cat "$TMP/distill.line")"

# bad values: one line naming the flag or the variable, exit 2
expect_error "--rank-timeout soon: expected seconds" "$LIZARD" --rank-timeout soon info --model "$TMP/tiny"
LIZARD_STEP_TIMEOUT=-1 mpirun -np 2 -x LIZARD_STEP_TIMEOUT "$LIZARD" generate --model "$TMP/tiny" --ids 1 --max-tokens 1 \
    >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "lizard: error: LIZARD_STEP_TIMEOUT=-1: expected seconds" "$TMP/err" && ok ||
    bad "LIZARD_STEP_TIMEOUT=-1: rc=$rc $(head -2 "$TMP/err")"

# rank 1 runs another build (a copy of the executable with one byte more, as an old copy on one node
# would differ): refused by name before anything loads, the whole job ends
cp "$LIZARD" "$TMP/lizard-other" && printf 'x' >>"$TMP/lizard-other"
timeout 60 mpirun -np 2 sh -c "[ \$OMPI_COMM_WORLD_RANK = 1 ] && b=\"$TMP/lizard-other\" || b=\"$LIZARD\"; exec \"\$b\" generate --model \"$TMP/tiny\" --ids 1 --max-tokens 1" \
    >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "rank 1 (.*) runs a different lizard build than rank 0" "$TMP/err" && ok ||
    bad "different builds: rc=$rc $(grep -m2 error "$TMP/err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
