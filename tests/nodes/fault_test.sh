#!/usr/bin/env bash
# fault_test.sh LIZARD - a pipeline over 3 emulated hosts (nodes_lib.sh) loses a host mid-generation:
# its link cut (ip link set ... down), or every process on it killed. The job must end non-zero
# within 30 s (the default rank timeout) plus a little, with a line naming the rank and its host.
# Prints the measured end times (docs/running.md "Across nodes").
set -u
LIZARD=$1
. "$(dirname "$0")/nodes_lib.sh" # TMP, ok, bad (test_lib.sh), nodes_start, nodes_mpirun
nodes_start 3 # the hosts, and the tiny model $M
SLACK=8

GEN=(generate --model "$M" --ids 1,2,3 --max-tokens 16000000 --ignore-eos --temperature 0.9 --allow-long-context)

# lose NAME HOW: starts the job, waits until rank 2 (the last host) runs, cuts node-b's link or kills
# every process on node-b, and times the rest
lose() {
    local name=$1 how=$2
    NODES_TIMEOUT=150 nodes_mpirun 3 "$LIZARD" "${GEN[@]}" >/dev/null 2>"$TMP/$name.err" &
    local job=$!
    local started=no
    for _ in $(seq 1 600); do # every host runs its rank (a host lost while Open MPI starts is another story)
        [ "$(nodes_lizards node-a)$(nodes_lizards node-b)$(nodes_lizards node-c)" = 111 ] && started=yes && break
        sleep 0.1
    done
    [ $started = yes ] || echo "across hosts, $name: the job had not started on every host after 60 s" \
        "(lizards on node-a, -b, -c: $(nodes_lizards node-a) $(nodes_lizards node-b) $(nodes_lizards node-c))"
    sleep 3
    if [ "$how" = cut ]; then
        nodes_link node-b down
    else
        for p in $(ip netns pids "${LZ_NODES_PREFIX}node-b"); do kill -9 "$p"; done
    fi
    local start; start=$(date +%s.%N)
    wait "$job"
    local rc=$? took
    took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    echo "across hosts, $name: the job ended after ${took} s, exit $rc:"
    grep -E "lizard: (error|warning)|lost communication|Remote daemon|on node" "$TMP/$name.err" | sed 's/^/    /' | head -6
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && python3 -c "import sys; sys.exit(float(sys.argv[1]) > 30 + float(sys.argv[2]))" \
        "$took" $SLACK && ok || bad "$name: rc=$rc after ${took}s: $(head -c 800 "$TMP/$name.err")"
}

# node-b's link cut: rank 0 (node-a) and rank 2 (node-c) name rank 1 and node-b; mpirun, whose
# keepalive finds node-b's daemon gone, ends the job
lose cut cut
grep -q "rank [02] of 3 (node-[ac]): rank 1 (node-b) has sent nothing" "$TMP/cut.err" && ok ||
    bad "cut: no line names rank 1 (node-b): $(grep lizard "$TMP/cut.err" | head -3)"
grep -q "on node node-b" "$TMP/cut.err" && ok || bad "cut: mpirun does not name node-b"
nodes_link node-b up
# what the cut left behind (node-b's daemon and rank, cut off from their job) goes before the next job,
# whose start counts one lizard a host; then node-b must reach the bridge again
for h in node-a node-b node-c; do for p in $(ip netns pids "${LZ_NODES_PREFIX}$h"); do kill -9 "$p"; done; done
for _ in $(seq 1 50); do
    timeout 2 ip netns exec "${LZ_NODES_PREFIX}node-b" bash -c "exec 3<>/dev/tcp/$NODES_NET.254/9" 2>"$TMP/up.err" ||
        grep -q refused "$TMP/up.err" && break
    sleep 0.2
done

# every process on node-b killed (its Open MPI daemon too)
lose killed kill
grep -q "node-b" "$TMP/killed.err" && ok || bad "killed: node-b not named: $(head -c 600 "$TMP/killed.err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
