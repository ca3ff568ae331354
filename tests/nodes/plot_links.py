#!/usr/bin/env python3
"""plot_links.py RECORDS.jsonl [OUT.svg] - link_bench.sh's records as a markdown table (stdout) and,
with OUT.svg, a plot of decode time per step against the link rate between hosts (one line per hosts x
batch; links with added delay are in the table only). Plain SVG: no plotting library needed."""
import json
import math
import re
import sys


def delay_ms(link):
    m = re.search(r"delay ([0-9.]+)ms", link)
    return float(m.group(1)) if m else 0.0


def table(recs):
    print("| hosts | link (netem on every host) | batch | tok/s | ms per step | bytes per token per hop |")
    print("|---|---|---|---|---|---|")
    for r in recs:
        print(f"| {r['hosts']} | {r['link']} | {r['batch']} | {r['tok_s']:.1f} | {r['ms_per_step']:.2f} | "
              f"{r['bytes_per_token_per_hop']:.0f} |")


def rate_bits(link):
    m = re.search(r"rate ([0-9.]+)([kmg])bit", link)
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] if m else None


def svg(recs, path):
    """ms per step against the link's rate (log scale; "none" at the right), links without added delay."""
    W, H, L, B, T, R = 640, 400, 60, 50, 30, 190
    series = {}
    for r in recs:
        if delay_ms(r["link"]) > 0:
            continue
        bits = rate_bits(r["link"])
        series.setdefault(f"{r['hosts']} hosts, batch {r['batch']}", []).append(
            (math.log10(bits) if bits else None, r["ms_per_step"]))
    xs = [p[0] for s in series.values() for p in s if p[0] is not None] or [6.0]
    lo, none_x = min(xs), max(xs) + 1.0
    ymax = max(p[1] for s in series.values() for p in s) * 1.1
    x = lambda v: L + (W - L - R) * (v - lo) / (none_x - lo or 1.0)
    y = lambda v: H - B - (H - B - T) * v / ymax
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">link rate between hosts (tc tbf)</text>',
           f'<text x="14" y="{(T + H - B) / 2}" transform="rotate(-90 14 {(T + H - B) / 2})" text-anchor="middle">'
           'decode ms per step</text>']
    names = {3: "1 Mbit/s", 4: "10 Mbit/s", 5: "100 kbit/s", 6: "1 Mbit/s", 7: "10 Mbit/s", 8: "100 Mbit/s",
             9: "1 Gbit/s", 10: "10 Gbit/s"}
    for e in range(int(math.floor(lo)), int(none_x)):
        out.append(f'<text x="{x(e)}" y="{H - B + 16}" text-anchor="middle">{names.get(e, f"1e{e}")}</text>')
    out.append(f'<text x="{x(none_x)}" y="{H - B + 16}" text-anchor="middle">no limit</text>')
    for i in range(6):
        yv = ymax * i / 5
        out.append(f'<text x="{L - 6}" y="{y(yv) + 4}" text-anchor="end">{yv:.0f}</text>')
    for k, (name, pts) in enumerate(sorted(series.items())):
        c = colours[k % len(colours)]
        pts = sorted((none_x if p[0] is None else p[0], p[1]) for p in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                   + " ".join(f"{x(p[0]):.1f},{y(p[1]):.1f}" for p in pts) + '"/>')
        out += [f'<circle cx="{x(p[0]):.1f}" cy="{y(p[1]):.1f}" r="3" fill="{c}"/>' for p in pts]
        out.append(f'<text x="{W - R + 10}" y="{T + 18 * k + 4}" fill="{c}">{name}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    table(recs)
    if len(sys.argv) > 2:
        svg(recs, sys.argv[2])
