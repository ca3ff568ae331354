"""svg_lines.py - what the line plots of tests/bench share: one series as a polyline with its points,
and its entry in a legend down the right margin (plot_prompt_svg.py, plot_decode_share_svg.py)."""


def series(svg, pts, px, py, color, dashed, label, legend_x, legend_y):
    """Appends to svg (a list of elements) the series pts [(x, y)] mapped by px and py, solid or dashed,
    and its legend entry (a line sample and the label) at (legend_x, legend_y)."""
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
    svg.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
    svg += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>' for x, y in pts]
    svg.append(f'<line x1="{legend_x}" x2="{legend_x + 24}" y1="{legend_y}" y2="{legend_y}" stroke="{color}" '
               f'stroke-width="2"{dash}/>')
    svg.append(f'<text x="{legend_x + 30}" y="{legend_y + 4}">{label}</text>')
