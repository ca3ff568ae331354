#!/usr/bin/env bash
# device_kernel_stalls.sh - on the GPU machine: where the warps of one decode kernel wait (Nsight
# Compute's warp-state and source sections: stall reasons for the kernel, then per SASS instruction the
# executions and stall samples), one launch at batch BATCH (default 256) of the 8B-shaped pure Lizard
# at 2K context. KERNELS: name regexes (default the two persistent decode kernels). Logs to
# $OUT/stalls-<name>.txt (the sections) and $OUT/sass-<name>.csv (the hot instructions).
set -uo pipefail
source tests/gpu/device_env.sh
L=$PWD/.devout/lizard
[ -n "$NCU" ] || { echo "no ncu"; exit 0; }
TMP_NCU=$(mktemp -d)
for k in ${KERNELS:-window_decode_ring_kernel gla_decode_ring_kernel}; do
  LIZARD_NO_GRAPHS=1 timeout 300 "$NCU" --clock-control none -k "regex:$k" --launch-skip ${SKIP:-40} --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters -o "$TMP_NCU/$k" \
    $L bench --device cuda --shape "llama3-8b-${VARIANT:-lizard}" --prompt 0 --batch ${BATCH:-256} --context 2048 --steps 2 \
    --no-ceilings >"$TMP_NCU/$k.log" 2>&1
  echo "ncu exit $? ($k)"; tail -2 "$TMP_NCU/$k.log"
  "$NCU" -i "$TMP_NCU/$k.ncu-rep" --page details >"$OUT/stalls-$k.txt" 2>&1
  grep -E "Duration|Throughput|Warp Cycles|Issued|Eligible|No Eligible|Registers|Achieved" "$OUT/stalls-$k.txt" | head -30
  # per SASS instruction: executions and stall samples (sorted by samples, the 120 hottest)
  "$NCU" -i "$TMP_NCU/$k.ncu-rep" --page source --csv --print-source sass >"$TMP_NCU/$k-sass.csv" 2>&1
  python3 - "$TMP_NCU/$k-sass.csv" "$OUT/sass-$k.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" in c for c in r)), None)
if hdr is None:
    print("no source page:", rows[:3]); open(sys.argv[2], "w").write("".join(",".join(r) + "\n" for r in rows)); sys.exit()
h = rows[hdr]
body = rows[hdr + 1:]
open(sys.argv[2], "w").write("".join(",".join('"%s"' % c for c in r) + "\n" for r in [h] + body))
si = next((i for i, c in enumerate(h) if "Sampling (All" in c), None)
src = next((i for i, c in enumerate(h) if c == "Source"), 1)
print("columns:", h[:12])
if si is not None:
    def num(x):
        try: return float(x.replace(",", ""))
        except: return 0.0
    tot = sum(num(r[si]) for r in body if len(r) > si)
    print(f"{len(body)} instructions, {tot:.0f} stall samples")
    for r in sorted(body, key=lambda r: -num(r[si]) if len(r) > si else 0)[:40]:
        print(f"{num(r[si]):8.0f}  {r[src][:110]}")
PY
done
