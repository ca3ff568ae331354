#!/usr/bin/env python3
"""trace_summary.py - a decode step's timeline from a LIZARD_TRACE file (kernels/cuda/trace.cuh).

Every stamp is one block's: where it left griddepcontrol.wait (a wait, "w") or passed an
lz_trace_mark (a mark), with its launch (%gridid, which a CUDA graph's replays repeat) and its call
site. This splits the stamps into launches (a grid id's stamps more than --gap us apart are different
replays), orders the launches by their first stamp, cuts them into layers at the launches whose sites
contain --cycle (default: the GLA decode kernel), keeps the layers with the most common pattern, and
prints for each launch of the pattern and each of its sites the median over those layers of the
first, the median and the last block's stamp (us from the layer's first stamp).

usage: trace_summary.py TRACE [--cycle SUBSTRING] [--gap US]
"""
import argparse
import collections
import os
import statistics


def load(path, gap_ns):
    tus, grids = {}, collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.startswith("# tu "):
                _, _, i, name = line.split(None, 3)
                tus[int(i)] = os.path.basename(name.strip())
                continue
            grid, t0, t1, block, n_blocks, tu, ln, smid = map(int, line.split())
            site = "%s:%d%s" % (tus.get(tu, "?"), ln, "w" if t1 != t0 else "")
            grids[grid].append((t1, t0, site, n_blocks, smid))
    launches = []
    for stamps in grids.values():
        stamps.sort()
        cur = [stamps[0]]
        for s in stamps[1:]:
            if s[0] - cur[-1][0] > gap_ns:
                launches.append(cur)
                cur = []
            cur.append(s)
        launches.append(cur)
    return sorted(launches, key=lambda st: min(s[1] for s in st))


def sites_of(launch):
    by = collections.defaultdict(list)
    for t1, _, site, _, _ in launch:
        by[site].append(t1)
    return {k: sorted(v) for k, v in by.items()}


def name_of(launch):
    return " ".join(sorted(sites_of(launch)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--cycle", default="gla_decode.cu")
    ap.add_argument("--gap", type=float, default=1000.0)
    a = ap.parse_args()
    launches = load(a.trace, a.gap * 1e3)
    names = [name_of(l) for l in launches]
    cuts = [i for i, n in enumerate(names) if a.cycle in n]
    if len(cuts) < 3:
        raise SystemExit("trace_summary: fewer than 3 launches match --cycle %s" % a.cycle)
    layers = [list(range(cuts[i], cuts[i + 1])) for i in range(len(cuts) - 1)]
    pattern = collections.Counter(tuple(names[j] for j in ly) for ly in layers).most_common(1)[0][0]
    same = [ly for ly in layers if tuple(names[j] for j in ly) == pattern]
    starts = [min(s[1] for s in launches[ly[0]]) for ly in same]
    period = [(min(s[1] for s in launches[ly[-1] + 1]) - t) / 1e3 for ly, t in zip(same, starts)
              if ly[-1] + 1 < len(launches)]
    print("%d launches, %d layers, %d of the common pattern; a layer (first stamp to the next layer's): "
          "median %.2f us, min %.2f, max %.2f" % (len(launches), len(layers), len(same), statistics.median(period),
                                                  min(period), max(period)))
    print("median over those layers, us from the layer's first stamp: first / median / last block")
    for j in range(len(pattern)):
        first = launches[same[0][j]]
        print("launch %d: %d blocks, on %d SMs" % (j, first[0][3], len({s[4] for s in first})))
        per_site = collections.defaultdict(lambda: ([], [], [], []))
        for ly, t in zip(same, starts):
            l = launches[ly[j]]
            for site, ts in sites_of(l).items():
                f, m, z, e = per_site[site]
                f.append((ts[0] - t) / 1e3), m.append((ts[len(ts) // 2] - t) / 1e3), z.append((ts[-1] - t) / 1e3)
            for site in {s[2] for s in l if s[2].endswith("w")}:
                per_site[site][3].append((min(s[1] for s in l if s[2] == site) - t) / 1e3)
        for site, (f, m, z, e) in sorted(per_site.items(), key=lambda kv: statistics.median(kv[1][0])):
            enter = " (first entered at %.2f)" % statistics.median(e) if e else ""
            print("  %-28s %8.2f %8.2f %8.2f%s" % (site, statistics.median(f), statistics.median(m),
                                                 statistics.median(z), enter))


if __name__ == "__main__":
    main()
