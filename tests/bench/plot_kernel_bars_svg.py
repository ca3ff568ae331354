#!/usr/bin/env python3
"""Per-layer kernel time of one prompt, before and after, as horizontal bars in an SVG (no plotting
library needed, so it runs on the dev machine). Inputs are kernel listings as the device probes
print them from Nsight Compute (a header line, then "NAME grid (...)  N calls  T us  E us each"), of
a bench run that prefills the prompt twice (a warm-up and the timed run) over LAYERS layers; cuBLAS's
GEMMs (nvjet), the lm_head and one-block launches are left out, and kernels that only one listing
names: the bars are what a layer spends outside the matmuls.
usage: plot_kernel_bars_svg.py OUT.svg LAYERS TITLE:BEFORE.txt:AFTER.txt [TITLE:BEFORE:AFTER ...]"""
import re
import sys

ROW, BAR, LEFT, RIGHT, TOP = 22, 8, 230, 90, 50
LINE = re.compile(r"^(\S.*?) grid \(([^)]*)\)\s+(\d+) calls\s+([\d.]+) us")


def per_layer(path, layers):
    """{kernel name: us a layer}, two prefills of `layers` layers each"""
    out = {}
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        name, grid, calls, total = m.group(1), m.group(2), int(m.group(3)), float(m.group(4))
        if name.startswith("nvjet") or calls < 2 * layers or grid == "1, 1, 1":
            continue  # GEMMs, the lm_head (2 calls), one-block launches
        name = re.sub(r"<.*", "", name.replace("<unnamed>::", ""))
        out[name] = out.get(name, 0.0) + total / (2 * layers)
    return out


def main():
    out_path, layers = sys.argv[1], int(sys.argv[2])
    panels = []
    for spec in sys.argv[3:]:
        title, before, after = spec.split(":")
        b, a = per_layer(before, layers), per_layer(after, layers)
        # kernels in both listings (a listing may stop at its largest kernels)
        names = sorted(set(b) & set(a), key=lambda n: -max(b[n], a[n]))
        b, a = {n: b[n] for n in names}, {n: a[n] for n in names}
        panels.append((title, names, b, a))
    vmax = max(max(list(b.values()) + list(a.values())) for _, _, b, a in panels)
    width = 760
    height = TOP + sum(30 + ROW * len(n) for _, n, _, _ in panels) + 30
    scale = (width - LEFT - RIGHT) / vmax
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14">us a layer outside the GEMMs, before (grey) and after (colour)</text>']
    y = TOP
    for title, names, b, a in panels:
        svg.append(f'<text x="10" y="{y}" font-weight="bold">{title}: {sum(b.values()):.0f} -> {sum(a.values()):.0f} us</text>')
        y += 12
        for n in names:
            vb, va = b.get(n, 0.0), a.get(n, 0.0)
            svg.append(f'<text x="{LEFT - 6}" y="{y + 12}" text-anchor="end">{n}</text>')
            svg.append(f'<rect x="{LEFT}" y="{y + 2}" width="{vb * scale:.1f}" height="{BAR}" fill="#bbbbbb"/>')
            svg.append(f'<rect x="{LEFT}" y="{y + 2 + BAR}" width="{va * scale:.1f}" height="{BAR}" fill="#2c7fb8"/>')
            svg.append(f'<text x="{LEFT + max(vb, va) * scale + 4:.1f}" y="{y + 14}">{vb:.1f} -> {va:.1f}</text>')
            y += ROW
        y += 18
    svg.append("</svg>")
    open(out_path, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
