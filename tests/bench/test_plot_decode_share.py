#!/usr/bin/env python3
"""test_plot_decode_share.py - plot_decode_share_svg.py on a synthetic A/B file: two rounds of two
configs at batches 4 and 8 (and a prompt row, which it must leave out). The points must sit at the
mean share of the rounds (78% and 82% -> 80%: y 185.0 on the 60-100% axis of a 380-pixel plot with
margins 40 and 50), the defaults solid, the other config dashed, and a CONFIG::TEXT legend used."""
import json
import os
import subprocess
import sys
import tempfile

import svg_check

HERE = os.path.dirname(os.path.abspath(__file__))


def row(config, rnd, batch, share, kind="decode"):
    return json.dumps({"variant": "lizard", "config": config, "round": rnd, "kind": kind, "prompt": 0,
                       "batch": batch, "context": 2048, "tok_s": share * 10.0, "bound_tok_s": 1000.0})


def main():
    rows = [row("-", 1, 4, 78), row("-", 2, 4, 82), row("-", 1, 8, 90), row("-", 2, 8, 90),
            row("LIZARD_X=1", 1, 4, 70), row("LIZARD_X=1", 2, 4, 70), row("LIZARD_X=1", 1, 8, 100),
            row("LIZARD_X=1", 2, 8, 100), row("-", 1, 2048, 50, kind="prompt")]
    with tempfile.TemporaryDirectory() as d:
        ab, svg = os.path.join(d, "ab.jsonl"), os.path.join(d, "out.svg")
        open(ab, "w").write("\n".join(rows) + "\n")
        subprocess.run([sys.executable, os.path.join(HERE, "plot_decode_share_svg.py"), svg, ab, "LIZARD_X=1::old"],
                       check=True)
        text = open(svg).read()
    # x: batch 4 at the left margin (60), 8 at the right end of the plot (720 - 300 = 420);
    # y: 80% -> 185.0, 90% -> 112.5, 70% -> 257.5, 100% -> 40.0
    want = ['points="60.0,185.0 420.0,112.5"', 'points="60.0,257.5 420.0,40.0"', ">lizard<", ">lizard, old<",
            'stroke-dasharray="5,4"', ">4<", ">8<"]
    return svg_check.verdict("test_plot_decode_share", text, want, (">2048<", "LIZARD_X"), text.count("<polyline") == 2)


if __name__ == "__main__":
    sys.exit(main())
