#!/usr/bin/env bash
# device_linear_probe.sh - on the GPU machine: one decode step's linear-layer launches at batch BATCH
# (default 16) of the 8B-shaped VARIANT (default lizard), each launch on its own (Nsight Compute:
# duration, DRAM bytes and rate, warp stall reasons), under each of CONFIGS ("-" for the defaults, or
# environment assignments joined by '+'), so that one layer's products can be compared launch by
# launch. Logs to $OUT/linear-probe-*.txt.
set -uo pipefail
source tests/gpu/device_env.sh
L=$PWD/.devout/lizard
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
v=${VARIANT:-lizard}
for cfg in ${CONFIGS:--}; do
  envs=(); [ "$cfg" = - ] || envs=(${cfg//+/ })
  tag=${cfg//[^A-Za-z0-9_]/_}
  env "${envs[@]}" LIZARD_NO_GRAPHS=1 timeout 300 "$NCU" --clock-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    -k "${KERNELS:-regex:^(?!random_kernel).*}" --launch-skip ${SKIP:-800} --launch-count ${COUNT:-24} \
    $L bench --device cuda --shape "llama3-8b-$v" --prompt 0 --batch ${BATCH:-16} --context 2048 --steps 2 --no-ceilings \
    >"$OUT/linear-probe-$v-b${BATCH:-16}-$tag.txt" 2>&1
  echo "ncu exit $? ($v $cfg)"
  python3 - "$OUT/linear-probe-$v-b${BATCH:-16}-$tag.txt" <<'PY'
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.match(r"\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line)
    if m:
        name = m.group(1)[:60]; vals = {}
        continue
    for key in ("Duration", "DRAM Throughput", "Memory Throughput", "Grid Size", "Warp Cycles Per Issued Instruction"):
        if name and re.match(r"\s+" + key + r"\s", line):
            parts = line.split()
            vals[key] = parts[-2] + parts[-1] if not parts[-1][0].isdigit() else parts[-1]
    if name and "Duration" in vals and "DRAM Throughput" in vals and "Grid Size" in vals and "Warp Cycles Per Issued Instruction" in vals:
        print("%-60s %s" % (name, "  ".join("%s %s" % (k.split()[0], vals[k]) for k in ("Duration", "DRAM Throughput", "Grid Size", "Warp Cycles Per Issued Instruction"))))
        name = None
PY
done
