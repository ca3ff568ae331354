#!/usr/bin/env python3
"""test_plot_kernel_bars.py - plot_kernel_bars_svg.py on two synthetic kernel listings of a 2-layer
prompt run twice: the per-layer figures (total / (2 x layers)), the kernels left out (GEMMs, the
lm_head, one-block launches, a kernel only one listing names) and the panel's sums must be the
synthetic ones."""
import os
import subprocess
import sys
import tempfile

import svg_check

HERE = os.path.dirname(os.path.abspath(__file__))

BEFORE = """12 kernels, 999 us in all
nvjet_sm90_tst_256x128 grid (2, 66, 1)         8 calls   800.0 us    100.00 us each
rope_kernel<__nv_bfloat16> grid (2048, 40, 1)  4 calls   400.0 us    100.00 us each
rmsnorm_vec_kernel<float> grid (2048, 1, 1)    8 calls    80.0 us     10.00 us each
<unnamed>::attention_kernel grid (16, 32, 1)   4 calls   200.0 us     50.00 us each
gemv_kernel<float, 1> grid (16032, 1, 1)       2 calls   500.0 us    250.00 us each
rmsnorm_vec_kernel<float> grid (1, 1, 1)       4 calls    12.0 us      3.00 us each
only_before_kernel grid (8, 1, 1)              4 calls    40.0 us     10.00 us each
"""
AFTER = """9 kernels, 555 us in all
nvjet_sm90_tst_256x128 grid (2, 66, 1)         8 calls   800.0 us    100.00 us each
rope_kernel<__nv_bfloat16, 8> grid (2048, 1, 1)  4 calls    52.0 us     13.00 us each
rmsnorm_vec_kernel<float> grid (2048, 1, 1)    8 calls    80.0 us     10.00 us each
<unnamed>::attention_kernel grid (16, 32, 1)   4 calls   200.0 us     50.00 us each
"""


def main():
    with tempfile.TemporaryDirectory() as d:
        b, a, svg = (os.path.join(d, n) for n in ("b.txt", "a.txt", "out.svg"))
        open(b, "w").write(BEFORE)
        open(a, "w").write(AFTER)
        subprocess.run([sys.executable, os.path.join(HERE, "plot_kernel_bars_svg.py"), svg, "2", f"demo:{b}:{a}"],
                       check=True)
        text = open(svg).read()
    # a layer: rope 400 / 4 = 100 -> 13, rmsnorm 80 / 4 = 20 (two launches a layer), attention 50
    want = ["demo: 170 -> 83 us", ">rope_kernel<", "100.0 -> 13.0", ">rmsnorm_vec_kernel<", "20.0 -> 20.0",
            ">attention_kernel<", "50.0 -> 50.0"]
    return svg_check.verdict("test_plot_kernel_bars", text, want, ("nvjet", "gemv_kernel", "only_before", "3.0 ->"))


if __name__ == "__main__":
    sys.exit(main())
