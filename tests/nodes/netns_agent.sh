#!/usr/bin/env bash
# netns_agent.sh HOST COMMAND... - Open MPI's launcher agent (--mca plm_rsh_agent) for emulated hosts:
# instead of ssh HOST COMMAND, runs COMMAND (one shell line, as ssh would) in the network namespace
# ${LZ_NODES_PREFIX}HOST, with its own UTS namespace whose host name is HOST, so that every rank
# and Open MPI see the host they would see on a cluster.
set -u
host=$1
shift
exec ip netns exec "${LZ_NODES_PREFIX:?}$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
