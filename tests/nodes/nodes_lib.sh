# nodes_lib.sh - sourced by the across-nodes tests: emulated hosts as Linux
# network namespaces joined by veth links to a bridge, Open MPI started on
# them through netns_agent.sh instead of ssh, TCP only. Everything it makes
# carries this shell's pid in its name and is removed at exit, also on
# failure. The hosts' addresses exist only on those links (a /24 that no
# route of this machine uses); the hosts have no default route, so their
# traffic stays between them and the bridge's own address in the root
# namespace (which test 2's curl uses).
#
# nodes_start N: the suite's start (mpirun or skip, N hosts, the tiny-hybrid model at $M from $LIZARD)
# nodes_up N: hosts node-a, node-b, ... with addresses $NODES_NET.1, .2, ...;
#   the bridge is $NODES_NET.254. Skips the suite (exit 77) where namespaces cannot be made.
# nodes_mpirun N PROGRAM ARGS...: N ranks over the hosts (one slot each, rank r on the r-th host)
# nodes_link HOST up|down; nodes_shape "delay 2ms rate 1gbit" | "rate 10mbit" (every host's link; "" removes it)

NODES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$NODES_DIR/../test_lib.sh" # TMP, ok, bad, require_mpirun
NODES_TAG=lz$$
export LZ_NODES_PREFIX=${NODES_TAG}-
NODES_HOSTS=()

nodes_down() {
    for h in "${NODES_HOSTS[@]}"; do
        local ns=$LZ_NODES_PREFIX$h
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    ip link del "${NODES_TAG}br" 2>/dev/null
    NODES_HOSTS=()
}

# a 10.x.y.0/24 that no address or route of this machine touches
nodes_pick_net() {
    local used; used=$(ip -4 route show table all 2>/dev/null; ip -4 addr 2>/dev/null)
    for i in $(seq 0 60); do
        local n=10.$((200 + ($$ + i) % 50)).$((($$ / 50 + i * 7) % 250)).
        echo "$used" | grep -q "${n%.}" || { echo "${n%.}"; return 0; }
    done
    return 1
}

nodes_up() {
    local n=$1
    [ "$(id -u)" = 0 ] || { echo "not root: cannot create network namespaces: skipped"; exit 77; }
    command -v ip >/dev/null && command -v unshare >/dev/null ||
        { echo "ip (iproute2) or unshare (util-linux) missing: skipped"; exit 77; }
    NODES_NET=$(nodes_pick_net) || { echo "no free 10.x.y.0/24 for the emulated hosts: skipped"; exit 77; }
    trap 'nodes_down; rm -rf "$TMP"' EXIT
    local br=${NODES_TAG}br
    if ! ip link add "$br" type bridge 2>"$TMP/netns.err"; then
        echo "cannot create a bridge ($(head -1 "$TMP/netns.err")): skipped"; exit 77
    fi
    ip addr add "$NODES_NET.254/24" dev "$br" && ip link set "$br" up || { echo "bridge setup failed"; exit 1; }
    local names=(a b c d e f)
    for i in $(seq 1 "$n"); do
        local h=node-${names[$((i - 1))]}
        local ns=$LZ_NODES_PREFIX$h
        if ! ip netns add "$ns" 2>"$TMP/netns.err"; then
            echo "cannot create network namespaces ($(head -1 "$TMP/netns.err")): skipped"; exit 77
        fi
        NODES_HOSTS+=("$h")
        ip link add "${NODES_TAG}v$i" type veth peer name eth0 netns "$ns" &&
            ip link set "${NODES_TAG}v$i" master "$br" up &&
            ip -n "$ns" addr add "$NODES_NET.$i/24" dev eth0 &&
            ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up ||
            { echo "cannot link $h to the bridge"; exit 1; }
    done
    for h in "${NODES_HOSTS[@]}"; do # every host reaches the bridge: a TCP connect answered (refused is fine)
        timeout 5 ip netns exec "$LZ_NODES_PREFIX$h" bash -c "exec 3<>/dev/tcp/$NODES_NET.254/9" 2>"$TMP/netns.err" ||
            grep -q refused "$TMP/netns.err" || { echo "$h cannot reach the bridge: $(head -1 "$TMP/netns.err")"; exit 1; }
    done
    NODES_HOSTFILE=$TMP/hostfile
    printf '%s slots=1\n' "${NODES_HOSTS[@]}" >"$NODES_HOSTFILE"
}

nodes_start() {
    require_mpirun
    nodes_up "$1"
    M=$TMP/tiny
    "$LIZARD" init --config tiny-hybrid --out "$M" >/dev/null 2>&1 || { bad "init tiny-hybrid"; exit 1; }
}

# nodes_mpirun N PROGRAM ARGS...: launch/mpirun-hosts.sh over the hosts' hostfile (or NODES_HOSTFILE_USED),
# with netns_agent.sh for ssh, TCP only on their subnet; bounded by NODES_TIMEOUT seconds (default 120)
nodes_mpirun() {
    LAUNCH_AGENT="$NODES_DIR/netns_agent.sh" LAUNCH_NET="$NODES_NET.0/24" \
        MPIRUN_ARGS="--allow-run-as-root --mca plm_rsh_no_tree_spawn 1 --mca pml ob1 --mca btl tcp,self" \
        timeout "${NODES_TIMEOUT:-120}" "$NODES_DIR/../../launch/mpirun-hosts.sh" "${NODES_HOSTFILE_USED:-$NODES_HOSTFILE}" "$@"
}

# nodes_lizards HOST: how many lizard processes run on HOST
nodes_lizards() {
    local n=0
    for p in $(ip netns pids "$LZ_NODES_PREFIX$1"); do grep -qx lizard "/proc/$p/comm" 2>/dev/null && n=$((n + 1)); done
    echo $n
}

nodes_link() { ip link set "${NODES_TAG}v$(($(nodes_index "$1") + 1))" "$2"; }
nodes_index() { local i; for i in "${!NODES_HOSTS[@]}"; do [ "${NODES_HOSTS[$i]}" = "$1" ] && echo "$i"; done; }

# nodes_shape SPEC: every host's link shaped by SPEC, e.g. "delay 2ms rate 1gbit" (netem, which needs the
# kernel's sch_netem) or "rate 10mbit" (tbf, a token bucket of 1 ms of traffic); "" removes it
nodes_shape() {
    for h in "${NODES_HOSTS[@]}"; do
        local ns=$LZ_NODES_PREFIX$h
        ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null
        case "$1" in
        "") ;;
        *delay*) ip netns exec "$ns" tc qdisc add dev eth0 root netem $1 || return 1 ;;
        rate\ *)
            local bits; bits=$(python3 -c "import sys; v=sys.argv[1].lower(); m={'kbit':1e3,'mbit':1e6,'gbit':1e9}
print(int(float(v[:-4]) * m[v[-4:]]))" "${1#rate }") || return 1
            local burst=$((bits / 8 / 1000 > 16384 ? bits / 8 / 1000 : 16384))
            ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "${1#rate }" burst "$burst" latency 100ms || return 1 ;;
        *) return 1 ;;
        esac
    done
}
nodes_have_netem() { ip netns exec "$LZ_NODES_PREFIX${NODES_HOSTS[0]}" tc qdisc add dev lo root netem delay 1ms 2>/dev/null &&
    ip netns exec "$LZ_NODES_PREFIX${NODES_HOSTS[0]}" tc qdisc del dev lo root; }
