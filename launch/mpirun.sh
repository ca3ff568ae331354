#!/usr/bin/env bash
# mpirun.sh NRANKS lizard-args... - one model as a pipeline of NRANKS ranks, one GPU each.
#   launch/mpirun.sh 2 generate --model DIR --prompt "Hello" --device cuda --placement by-type
# Extra mpirun options (a hostfile for several hosts) go in MPIRUN_ARGS, e.g.
#   MPIRUN_ARGS="--hostfile hosts.txt" launch/mpirun.sh 8 ...   (hosts.txt: "node1 slots=4" per line)
# Under Slurm: srun -n 8 --gpus-per-task=1 build/lizard ... works the same way.
set -euo pipefail
n=${1:?usage: mpirun.sh NRANKS lizard-args...}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): shared machines can be put out of service by it
exec mpirun -np "$n" ${MPIRUN_ARGS:-} -x NCCL_NVLS_ENABLE=0 -x LD_LIBRARY_PATH "$here/build/lizard" "$@"
