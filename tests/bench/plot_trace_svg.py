#!/usr/bin/env python3
"""One decode layer's kernel timeline as an SVG (no plotting library needed): the text that
tests/bench/trace_summary.py prints, one panel for each section of the file (a line starting "== "
names a section; a file without one is a single panel). For every launch, a pale bar from the first
block's first stamp (or arrival at its PDL wait) to the wait's return, a solid bar
from the wait's return to the last block's last stamp, and a tick at the median block's last stamp
(a kernel with no mark at its end shows only as far as its last stamp).
usage: plot_trace_svg.py OUT.svg SUMMARY.txt"""
import re
import sys

W, L, R, ROW, TOP, GAP = 900, 215, 30, 22, 30, 40  # size, margins, row height
LAUNCH = re.compile(r"launch (\d+): (\d+) blocks")
SITE = re.compile(r"\s+(\S+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)(?: \(first entered at ([-\d.]+)\))?")


def parse(path):
    """[(title, [launch dicts])]: name, blocks, enter, wait (median return), end (last), mid (median end)."""
    panels, title, launches = [], "", []
    for line in open(path):
        if line.startswith("== "):
            if launches:
                panels.append((title, launches))
            title, launches = line[3:].strip(), []
        elif LAUNCH.match(line):
            n = LAUNCH.match(line)
            launches.append({"index": int(n.group(1)), "blocks": int(n.group(2)), "sites": []})
        elif launches and SITE.match(line):
            s = SITE.match(line)
            launches[-1]["sites"].append((s.group(1),) + tuple(float(s.group(i)) for i in (2, 3, 4)) +
                                         (float(s.group(5)) if s.group(5) else None,))
    if launches:
        panels.append((title, launches))
    for _, ls in panels:
        for l in ls:
            sites = l["sites"]
            waits = [s for s in sites if s[0].endswith("w")]
            l["name"] = sites[0][0].split(".")[0] if sites else "?"
            l["start"] = min(s[1] for s in sites)
            entered = waits[0][4] if waits and waits[0][4] is not None else l["start"]
            l["enter"] = min(entered, l["start"])  # its first stamp, or the first block at the wait
            l["wait"] = waits[0][2] if waits else l["start"]
            l["end"] = max(s[3] for s in sites)
            last_site = max(sites, key=lambda s: s[3])
            l["mid"] = last_site[2]
    return panels


def main():
    out, path = sys.argv[1], sys.argv[2]
    panels = parse(path)
    t_max = max(l["end"] for _, ls in panels for l in ls)
    t_max = 10 * int(t_max / 10 + 1)
    x = lambda t: L + (W - L - R) * t / t_max
    height = TOP + sum(GAP + ROW * len(ls) for _, ls in panels) + 30
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (W, height), '<rect width="100%" height="100%" fill="white"/>']
    y = TOP
    for title, ls in panels:
        svg.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (10, y + 14, title))
        y += GAP - 10
        for t in range(0, t_max + 1, 10):
            svg.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x(t), y, x(t), y + ROW * len(ls)))
            svg.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#666">%d</text>' % (x(t), y + ROW * len(ls) + 13, t))
        for l in ls:
            svg.append('<text x="%d" y="%d">%d %s, %d blocks</text>' % (10, y + 15, l["index"], l["name"], l["blocks"]))
            if l["wait"] > l["enter"]:
                svg.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#c6dbef"/>' %
                           (x(l["enter"]), y + 4, x(l["wait"]) - x(l["enter"]), ROW - 8))
            svg.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#2171b5"/>' %
                       (x(l["wait"]), y + 4, max(1.0, x(l["end"]) - x(l["wait"])), ROW - 8))
            svg.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#fd8d3c" stroke-width="3"/>' %
                       (x(l["mid"]), y + 2, x(l["mid"]), y + ROW - 2))
            y += ROW
        y += 20
    svg.append('<text x="%d" y="%d" fill="#444">us from the layer\'s first stamp. Pale: started, before its PDL wait '
               'returns; dark: from then to the last block\'s last stamp; orange: the median block\'s.</text>' % (10, height - 6))
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
