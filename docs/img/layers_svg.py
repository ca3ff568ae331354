#!/usr/bin/env python3
"""layers_svg.py - draws docs/img/layers.svg, the map of the code's layers in docs/architecture.md:
one box per CMake library (its folders inside), an arrow from each library to each one it links
(CMakeLists.txt), every arrow pointing down. Usage: python3 docs/img/layers_svg.py [OUT.svg]"""
import os
import re
import sys

# (row, column span start, span width, library, folders, what it holds); rows from the top, 7 columns
BOXES = [
    (0, 0, 7, "lizard_lib", "runtime/cli", "the commands: init, info, tokenize, forward, generate, bench, plan, distill, finetune, eval, serve"),
    (1, 0, 3, "lizard_serve", "runtime/serve", "OpenAI-compatible HTTP, scheduler, sessions"),
    (1, 3, 4, "lizard_train", "runtime/train", "distill (stage 1), finetune (stage 2)"),
    (2, 0, 4, "lizard_engine", "runtime/engine", "one model: loading, prefill/decode, the generation loop"),
    (2, 5, 2, "lizard_tokenizer", "runtime/tokenizer", "text <-> ids"),
    (3, 0, 4, "lizard_pipeline", "runtime/pipeline", "plans, step headers, hand-offs between ranks, stage transfers"),
    (4, 0, 3, "lizard_session", "runtime/session", "a sequence's state as messages and files"),
    (4, 4, 1, "lizard_world", "runtime/world", "MPI ranks, watchdog"),
    (5, 0, 2, "lizard_stages", "stages", "the model as layers: decoder layer, step"),
    (5, 2, 1, "lizard_sampler", "runtime/sampler", "the next token's draw"),
    (5, 3, 1, "lizard_proto", "proto (protoc-c)", "messages"),
    (6, 0, 3, "lizard_kernels", "kernels (ops.h, cpu/, cuda/)", "the op table and its backends"),
    (7, 0, 7, "lizard_core", "runtime/core", "errors, knobs, dtypes, config, safetensors, npy, JSON"),
]


def links(cmake=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")):
    """(from, to) for each library a lizard_* library links (CMakeLists.txt's target_link_libraries)."""
    pairs = []
    for lib, deps in re.findall(r"target_link_libraries\((lizard_\w+)\s+PUBLIC\s+([^)]*)\)", open(cmake).read()):
        pairs += [(lib, d) for d in deps.split() if d.startswith("lizard_")]
    return pairs


COL, ROW, BOX_H, MARGIN = 160, 96, 60, 20


def box_geometry(row, col, span):
    x = MARGIN + col * COL + 6
    y = MARGIN + row * ROW
    return x, y, span * COL - 12, BOX_H


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def draw():
    geo = {b[3]: box_geometry(b[0], b[1], b[2]) for b in BOXES}
    width = MARGIN * 2 + max(b[1] + b[2] for b in BOXES) * COL
    height = MARGIN * 2 + (max(b[0] for b in BOXES) + 1) * ROW - (ROW - BOX_H)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for src, dst in links():
        sx, sy, sw, sh = geo[src]
        dx, dy, dw, _ = geo[dst]
        # from the source's bottom to the target's top, at the middle of the columns they share (if any)
        lo, hi = max(sx, dx), min(sx + sw, dx + dw)
        x1 = x2 = (lo + hi) / 2 if lo < hi else None
        if x1 is None:
            x1, x2 = sx + sw / 2, dx + dw / 2
        if src == "lizard_lib":
            x1 = x2 = dx + dw / 2
        assert dy > sy + sh, f"{src} -> {dst} would not point down"
        out.append(f'<line x1="{x1:.0f}" y1="{sy + sh}" x2="{x2:.0f}" y2="{dy - 2}" stroke="#555" '
                   'stroke-width="1.5" marker-end="url(#arrow)"/>')
    for row, col, span, lib, folders, what in BOXES:
        x, y, w, h = geo[lib]
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="#eef4fb" stroke="#35618f"/>')
        out.append(f'<text x="{x + w / 2:.0f}" y="{y + 20}" text-anchor="middle" font-size="14" '
                   f'font-weight="bold">{esc(folders)}</text>')
        out.append(f'<text x="{x + w / 2:.0f}" y="{y + 37}" text-anchor="middle" font-size="11">{esc(what)}</text>')
        out.append(f'<text x="{x + w / 2:.0f}" y="{y + 52}" text-anchor="middle" font-size="10" '
                   f'fill="#666">{lib}</text>')
    out.append('</svg>')
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/img/layers.svg"
    with open(path, "w") as f:
        f.write(draw())
