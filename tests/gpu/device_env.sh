# device_env.sh - sourced by the device scripts on the GPU machine, from the repository root: the
# binaries of tests/gpu/pack_devout.sh unpacked into .devout/ (once for each pack), their libraries on
# the loader's path, $OUT made, NCU set to Nsight Compute's ncu where the machine has one, and what
# the scripts share: say (a line to the screen and $OUT/summary.txt), left (seconds to DEADLINE from
# START), phase N [MIN] (PHASES names N and MIN seconds are left), say_machine (GPU, commit, date).
if [ -f .devpack/devout.txz ] && [ .devpack/devout.txz -nt .devout/.unpacked ]; then
  bash tests/gpu/unpack_devout.sh && touch .devout/.unpacked
fi
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)

say() { echo "$*" | tee -a "$OUT/summary.txt"; }
left() { echo $((DEADLINE - (SECONDS - START))); }
phase() { case "$PHASES" in *"$1"*) [ "$(left)" -ge "${2:-0}" ] || { say "phase $1 skipped: $(left) s left"; return 1; } ;;
                            *) return 1 ;; esac; }
say_machine() {
  say "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
  git log -1 --format='commit %H %s' 2>/dev/null | tee -a "$OUT/summary.txt"
  date -u +%Y-%m-%dT%H:%MZ | tee -a "$OUT/summary.txt"
}
