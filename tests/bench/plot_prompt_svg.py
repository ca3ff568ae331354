#!/usr/bin/env python3
"""Prompt throughput against prompt length as an SVG (no plotting library needed, so it runs on
the dev machine): lines of `lizard bench --json` rows, one per (variant, config) of an A/B file
from tests/bench/device_decode_ab.sh with PROMPTS, and the HF transformers baseline's rows.
usage: plot_prompt_svg.py OUT.svg AB.jsonl [TORCH.jsonl]"""
import json
import math
import sys

import svg_lines

W, H, L, R, T, B = 720, 400, 70, 240, 40, 50  # size and margins (the legend sits in the right one)
COLORS = {"teacher": "#d62728", "hybrid": "#9467bd", "lizard": "#2ca02c", "hf": "#7f7f7f"}


def series(ab_path, torch_path):
    lines = {}
    for row in map(json.loads, filter(str.strip, open(ab_path))):
        if row.get("kind") == "prompt":
            cfg = "" if row["config"] == "-" else ", " + row["config"].replace("LIZARD_", "")
            key = (row["variant"], row["variant"] + cfg, cfg != "")  # (color, label, dashed)
            lines.setdefault(key, []).append((row["prompt"], row["tok_s"]))
    if torch_path:
        for row in map(json.loads, filter(str.strip, open(torch_path))):
            if row.get("kind") == "hf-prompt":
                key = ("hf", "HF transformers SDPA, teacher", False)
                lines.setdefault(key, []).append((row["prompt"], row["tok_s"]))
    return {k: sorted(v) for k, v in lines.items()}


def main():
    out, ab = sys.argv[1], sys.argv[2]
    lines = series(ab, sys.argv[3] if len(sys.argv) > 3 else None)
    xs = [p for pts in lines.values() for p, _ in pts]
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    y1 = 5000 * math.ceil(max(t for pts in lines.values() for _, t in pts) / 5000)

    def px(p):
        return L + (math.log2(p) - x0) / (x1 - x0) * (W - L - R)

    def py(t):
        return H - B - t / y1 * (H - T - B)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="13">LLaMA-3-8B shape, prompt throughput, one H200, bf16</text>']
    for k in range(0, int(y1) + 1, 5000):  # horizontal grid and y labels
        svg.append(f'<line x1="{L}" x2="{W - R}" y1="{py(k):.1f}" y2="{py(k):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{L - 6}" y="{py(k) + 4:.1f}" text-anchor="end">{k // 1000}K</text>')
    for p in sorted(set(xs)):
        svg.append(f'<text x="{px(p):.1f}" y="{H - B + 16}" text-anchor="middle">{p // 1024}K</text>')
    svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">prompt tokens</text>')
    svg.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
               'text-anchor="middle">prompt tokens/s</text>')
    for i, ((variant, label, dashed), pts) in enumerate(sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][2]))):
        svg_lines.series(svg, pts, px, py, COLORS.get(variant, "black"), dashed, label, W - R + 12, T + 16 * i)
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
