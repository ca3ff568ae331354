#!/usr/bin/env python3
"""Decode throughput as a share of its bound against the batch, as an SVG (no plotting library, so it
runs on the dev machine): one line per (variant, config) of an A/B file from
tests/bench/device_decode_ab.sh (decode rows, the mean over its rounds), the defaults solid and any
other config dashed. Where a reader should see a cliff in the curve, not hunt for it in a table.
A config's legend text can be given as CONFIG::TEXT ("-" for the defaults).
usage: plot_decode_share_svg.py OUT.svg AB.jsonl [CONFIG::TEXT ...]"""
import collections
import json
import sys

import svg_lines

W, H, L, R, T, B = 720, 380, 60, 300, 40, 50  # size and margins (the legend sits in the right one)
COLORS = {"teacher": "#d62728", "hybrid": "#9467bd", "lizard": "#2ca02c"}
Y0, Y1 = 60, 100  # the share axis, %


def shares(ab_path):
    """{(variant, config): [(batch, mean share %)]} over the file's decode rows."""
    acc = collections.defaultdict(list)
    for row in map(json.loads, filter(str.strip, open(ab_path))):
        if row.get("kind") == "decode" and row.get("bound_tok_s"):
            acc[(row["variant"], row["config"], row["batch"])].append(100.0 * row["tok_s"] / row["bound_tok_s"])
    lines = collections.defaultdict(list)
    for (variant, config, batch), vals in acc.items():
        lines[(variant, config)].append((batch, sum(vals) / len(vals)))
    return {k: sorted(v) for k, v in lines.items()}


def main():
    out, ab = sys.argv[1], sys.argv[2]
    names = dict(a.split("::", 1) for a in sys.argv[3:])
    title = "LLaMA-3-8B shape, decode at 2K context, one H200, bf16"
    lines = shares(ab)
    batches = sorted({b for pts in lines.values() for b, _ in pts})
    x0, x1 = batches[0], batches[-1]

    def px(b):
        return L + (b - x0) / max(x1 - x0, 1) * (W - L - R)

    def py(s):
        return H - B - (min(max(s, Y0), Y1) - Y0) / (Y1 - Y0) * (H - T - B)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>', f'<text x="{L}" y="22" font-size="13">{title}</text>']
    for s in range(Y0, Y1 + 1, 5):  # horizontal grid and y labels; the 90% in darker grey
        svg.append(f'<line x1="{L}" x2="{W - R}" y1="{py(s):.1f}" y2="{py(s):.1f}" stroke="{"#999" if s == 90 else "#ddd"}"/>')
        svg.append(f'<text x="{L - 6}" y="{py(s) + 4:.1f}" text-anchor="end">{s}%</text>')
    for b in batches:
        svg.append(f'<text x="{px(b):.1f}" y="{H - B + 16}" text-anchor="middle">{b}</text>')
    svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">sequences in the batch</text>')
    svg.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
               'text-anchor="middle">share of the bound</text>')
    ordered = sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][1] != "-", kv[0][1]))
    for i, ((variant, config), pts) in enumerate(ordered):
        default = "" if config == "-" else ", " + config.replace("LIZARD_", "").replace("+", " ")
        label = variant + (", " + names[config] if config in names else default)
        svg_lines.series(svg, pts, px, py, COLORS.get(variant, "black"), config != "-", label, W - R + 12, T + 16 * i)
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
