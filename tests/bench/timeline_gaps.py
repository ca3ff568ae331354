#!/usr/bin/env python3
"""timeline_gaps.py - one decode step from an Nsight Systems GPU trace (nsys stats -r cuda_gpu_trace
-f csv): the step's span, its kernels' summed durations, and by kernel name the mean duration and
the mean gap from the previous kernel's end to its start (negative: it overlapped, as programmatic
dependent launch allows). The step is the last one between two argmax_rows kernels."""
import collections
import csv
import sys


def main(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if any("Start" in c for c in r))
    h = rows[head]
    si = next(i for i, c in enumerate(h) if c.startswith("Start"))
    di = next(i for i, c in enumerate(h) if c.startswith("Duration"))
    ni = next(i for i, c in enumerate(h) if c.strip() == "Name")
    ks = []
    for r in rows[head + 1:]:
        if len(r) <= max(si, di, ni) or not r[si].replace(".", "").isdigit():
            continue
        name = r[ni].split("(")[0].split("<")[0].replace("void ", "").strip()
        if "memcpy" in name.lower() or "memset" in name.lower():
            continue
        ks.append((float(r[si]), float(r[di]), name))
    ks.sort()
    ends = [i for i, k in enumerate(ks) if k[2].startswith("argmax_rows") or k[2].startswith("sample_rows")]
    if len(ends) < 2:
        print("timeline: fewer than two steps found")
        return
    step = ks[ends[-2] + 1: ends[-1] + 1]
    span = step[-1][0] + step[-1][1] - step[0][0]
    busy = sum(k[1] for k in step)
    print(f"timeline: one step {span / 1e3:.1f} us, {len(step)} kernels, their durations sum to {busy / 1e3:.1f} us")
    dur, gap, cnt = collections.Counter(), collections.Counter(), collections.Counter()
    prev_end = step[0][0]
    for s, d, n in step:
        dur[n] += d
        gap[n] += s - prev_end
        cnt[n] += 1
        prev_end = s + d
    for n, _ in dur.most_common():
        print(f"  {n:40s} {cnt[n]:4d} x {dur[n] / cnt[n] / 1e3:8.2f} us, gap before {gap[n] / cnt[n] / 1e3:7.2f} us")


if __name__ == "__main__":
    main(sys.argv[1])
