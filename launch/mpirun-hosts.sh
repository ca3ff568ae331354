#!/usr/bin/env bash
# mpirun-hosts.sh HOSTFILE NRANKS PROGRAM ARGS... - a pipeline across hosts started by mpirun over ssh:
#   launch/mpirun-hosts.sh launch/hosts.example 8 build/lizard serve --model DIR --device cuda --host 0.0.0.0
# Before anything starts, checks that HOSTFILE's slots hold NRANKS and that every host that gets a rank
# answers (one line naming the host, exit 2). Then Open MPI fills the slots in order (rank r on the host
# of slot r, as `lizard plan --hosts HOSTFILE` assumes), TCP keepalive on its own connections so that
# mpirun notices a host that vanished (12-20 s), NCCL_* and LIZARD_* passed to every rank.
# Environment:
#   LAUNCH_NET      the subnet or interface MPI uses between hosts (btl_tcp_if_include, oob_tcp_if_include),
#                   e.g. 10.0.0.0/16 or ib0; default: Open MPI's choice
#   LAUNCH_AGENT    what starts a command on a host (default: ssh -o BatchMode=yes -o ConnectTimeout=5)
#   MPIRUN_ARGS     further mpirun options
set -euo pipefail
hostfile=${1:?usage: mpirun-hosts.sh HOSTFILE NRANKS PROGRAM ARGS...}
n=${2:?usage: mpirun-hosts.sh HOSTFILE NRANKS PROGRAM ARGS...}
shift 2
agent=${LAUNCH_AGENT:-ssh -o BatchMode=yes -o ConnectTimeout=5}
fail() { echo "mpirun-hosts.sh: $*" >&2; exit 2; }
[ -r "$hostfile" ] || fail "$hostfile: cannot read the hostfile"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || fail "NRANKS '$n': expected a positive number"

# the hosts that get ranks, in slot order (lines "HOST [slots=N]", # comments)
hosts=() slots=0
while read -r host rest; do
    host=${host%%#*}
    [ -n "$host" ] || continue
    k=1
    [[ "$rest" =~ (^|[[:space:]])slots=([0-9]+) ]] && k=${BASH_REMATCH[2]}
    [ $slots -lt "$n" ] && hosts+=("$host")
    slots=$((slots + k))
done <"$hostfile"
[ $slots -ge "$n" ] || fail "$hostfile: $n ranks asked but its hosts provide $slots slots"
for host in "${hosts[@]}"; do
    out=$(timeout 20 $agent "$host" true 2>&1) || fail "$hostfile: host $host does not answer ($agent): $(echo "$out" | head -1)"
done

net=()
[ -n "${LAUNCH_NET:-}" ] && net=(--mca btl_tcp_if_include "$LAUNCH_NET" --mca oob_tcp_if_include "$LAUNCH_NET")
pass=()
for v in $(env | sed -n 's/^\(\(NCCL\|LIZARD\)_[A-Za-z0-9_]*\)=.*/\1/p'); do pass+=(-x "$v"); done
exec mpirun --hostfile "$hostfile" -np "$n" --map-by slot --mca plm_rsh_agent "$agent" "${net[@]}" \
    --mca oob_tcp_keepalive_time 8 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 6 \
    -x NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} "${pass[@]}" ${MPIRUN_ARGS:-} "$@"
