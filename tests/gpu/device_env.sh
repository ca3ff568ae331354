# device_env.sh - sourced by the device scripts on the GPU machine, from the repository root: the
# binaries of tests/gpu/pack_devout.sh unpacked into .devout/ (once for each pack), their libraries on
# the loader's path, $OUT made, and NCU set to Nsight Compute's ncu where the machine has one.
if [ -f .devpack/devout.txz ] && [ .devpack/devout.txz -nt .devout/.unpacked ]; then
  bash tests/gpu/unpack_devout.sh && touch .devout/.unpacked
fi
export LD_LIBRARY_PATH=$PWD/.devout/lib:${LD_LIBRARY_PATH:-}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
