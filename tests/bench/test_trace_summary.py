#!/usr/bin/env python3
"""test_trace_summary.py - trace_summary.py on a synthetic LIZARD_TRACE file whose timeline is known.

Four replays of a two-layer graph (so every launch's %gridid recurs, as under CUDA graphs), each
layer three launches: a GLA-like kernel (blocks stamp a wait and a mark), a GEMV (a wait, then the
end mark), and a one-block norm (a wait). One layer of one replay has a different pattern (the norm
missing) and must be left out. The printed medians must be the synthetic ones.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LAYER_NS = 100_000  # a layer: 100 us


def records():
    """(grid, t0, t1, block, n_blocks, tu, line, smid) for every stamp, times in ns."""
    out = []
    t = 1_000_000
    for replay in range(4):
        for layer in range(2):
            base = t
            g = 10 + layer * 3  # grid ids repeat in every replay
            for b in range(4):  # GLA: entered at 0, wait returns at 2 us + b, mark at 10 us + b
                out.append((g, base, base + 2_000 + b * 1_000, b, 4, 0, 150, b))
                out.append((g, base + 10_000 + b * 1_000, base + 10_000 + b * 1_000, b, 4, 0, 311, b))
            for b in range(8):  # GEMV: wait 20 us -> 21 us, end at 30 + b us
                out.append((g + 1, base + 20_000, base + 21_000, b, 8, 1, 177, b))
                out.append((g + 1, base + 30_000 + b * 1_000, base + 30_000 + b * 1_000, b, 8, 1, 255, b))
            if not (replay == 2 and layer == 1):  # the odd layer out: no norm
                out.append((g + 2, base + 40_000, base + 45_000, 0, 1, 2, 94, 0))
            t += LAYER_NS
        t += 5_000_000  # the next replay: far beyond --gap
    return out


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.txt")
        with open(path, "w") as f:
            f.write("# tu 0 /x/gla_decode.cu\n# tu 1 /x/gemv_fused.cu\n# tu 2 /x/basic.cu\n")
            for r in records():
                f.write(" ".join(map(str, r)) + "\n")
        res = subprocess.run([sys.executable, os.path.join(HERE, "trace_summary.py"), path],
                             capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("trace_summary failed: " + res.stderr)
    text = res.stdout
    print(text)
    # 23 launches (one norm missing); 8 layers cut at the GLA launches, the last without a successor:
    # 7 layers, 6 of the common pattern; a replay's last layer runs to the next replay (5.1 ms here)
    want = [
        "23 launches, 7 layers, 6 of the common pattern",
        "median 100.00 us, min 100.00, max 5100.00",
        "launch 0: 4 blocks, on 4 SMs",
        "gla_decode.cu:150w                2.00     4.00     5.00 (first entered at 0.00)",
        "gla_decode.cu:311                10.00    12.00    13.00",
        "launch 1: 8 blocks, on 8 SMs",
        "gemv_fused.cu:177w               21.00    21.00    21.00 (first entered at 20.00)",
        "gemv_fused.cu:255                30.00    34.00    37.00",
        "launch 2: 1 blocks, on 1 SMs",
        "basic.cu:94w                     45.00    45.00    45.00 (first entered at 40.00)",
    ]
    flat = " ".join(text.split())  # (column widths aside)
    missing = [w for w in want if " ".join(w.split()) not in flat]
    if missing:
        sys.exit("test_trace_summary: not in the summary: %s" % missing)
    print("test_trace_summary: %d lines checked, 0 failed" % len(want))


if __name__ == "__main__":
    main()
