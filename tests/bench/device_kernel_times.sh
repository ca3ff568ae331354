#!/usr/bin/env bash
# device_kernel_times.sh - on the GPU machine: the time of every kernel of one
# decode step at batch BATCH (default 1) (Nsight Compute, gpu__time_duration, clocks left alone),
# summed by kernel, for the 8B-shaped teacher and pure Lizard at 2K context,
# beside the step time the benchmark measures with CUDA graphs. The difference
# is launch and dependency gaps; the sum against weight bytes / copy rate shows
# which kernels are below the bandwidth. Logs to $OUT/kernels-*.txt.
set -uo pipefail
source tests/gpu/device_env.sh
L=$PWD/.devout/lizard
TMP_NCU=$(mktemp -d)
for v in ${VARIANTS:-teacher lizard}; do
  timeout 60 $L bench --device cuda --shape "llama3-8b-$v" --prompt 0 --batch ${BATCH:-1} --context 2048 --steps 32 2>&1 | grep decode
  [ -n "$NCU" ] || { echo "no ncu"; continue; }
  # skip the first (eager, warm-up) step's kernels; random weight fills are filtered out by name
  LIZARD_NO_GRAPHS=1 timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    -k 'regex:^(?!random_kernel).*' --launch-skip ${SKIP:-800} --launch-count ${COUNT:-800} \
    $L bench --device cuda --shape "llama3-8b-$v" --prompt 0 --batch ${BATCH:-1} --context 2048 --steps 2 --no-ceilings \
    >"$TMP_NCU/ncu-$v.csv" 2>"$TMP_NCU/ncu-$v.err"
  echo "ncu exit $? ($v)"; tail -2 "$TMP_NCU/ncu-$v.err"
  python3 - "$TMP_NCU/ncu-$v.csv" <<'PY' | tee "$OUT/kernels-$v-b${BATCH:-1}.txt"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print("no kernel rows"); sys.exit(0)
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
gi = h.index("Grid Size")
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")) * {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3}.get(r[ui], 1)
    name = r[ki].split("(")[0].split("<")[0].replace("void ", "")
    key = f"{name} grid {r[gi]}"
    tot[key] += v; cnt[key] += 1
print(f"{sum(cnt.values())} kernels, {sum(tot.values()):.0f} us in all")
for k, v in tot.most_common():
    print(f"{k:58s} {cnt[k]:5d} calls {v:9.1f} us  {v / cnt[k]:8.2f} us each")
PY
done
