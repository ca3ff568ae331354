"""study_report.py - the study's rows (study.jsonl, written by study.py) as a Markdown table and two SVG
plots: perplexity against the fraction of softmax layers retained (after stage 1 and after stage 2, one
colour per window length) and passkey accuracy against context length (one line per model).
Python standard library only; `python3 launch/study_report.py RESULTS` redraws them from RESULTS/study.jsonl."""
import json
import math
import os
import shutil
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
BEGIN, END = "<!-- study results: begin -->", "<!-- study results: end -->"
STAGE_NAMES = {"teacher": "teacher", "stage1": "stage 1", "stage2": "stage 2"}


def ok_rows(rows):
    return [r for r in rows if r["status"] == "ok"]


def contexts(rows, key):
    """The window lengths / passkey contexts the rows were measured at, ascending."""
    return sorted({int(c) for r in ok_rows(rows) for c in r[key]})


def table(rows, about):
    """Markdown: one line per row; perplexity cells carry the ratio to the teacher's at that length."""
    teacher = next((r for r in ok_rows(rows) if r["stage"] == "teacher"), None)
    ppl_c, pk_c = contexts(rows, "ppl"), contexts(rows, "passkey")
    head = ["configuration", "softmax layers", "stage"] + [f"ppl @{c}" for c in ppl_c] + \
           [f"passkey @{c}" for c in pk_c] + ["train s"]
    out = [about, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        stage = STAGE_NAMES[r["stage"]]
        if r["status"] != "ok":
            cells = [r["config"], "", f"{stage}: {r['status']}"] + ["—"] * (len(head) - 3)
        else:
            layers = ",".join(map(str, r["softmax_layers"])) or "none"
            ppl = []
            for c in map(str, ppl_c):
                cell = f"{r['ppl'][c]:.2f}" if c in r["ppl"] else "—"
                if teacher and r is not teacher and c in r["ppl"] and c in teacher["ppl"]:
                    cell += f" ({r['ppl'][c] / teacher['ppl'][c]:.2f}×)"
                ppl.append(cell)
            pk = [f"{r['passkey'][c]:.2f}" if c in r["passkey"] else "—" for c in map(str, pk_c)]
            cells = [r["config"], f"{layers} ({r['retained']:.0%})", stage] + ppl + pk + [f"{r['seconds']['train']:.0f}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def line_chart(title, xlabel, ylabel, series, xlog=False, ylim=None):
    """SVG text of a line chart. series: [(label, [(x, y)], color, dashed, lines)]; lines False draws the
    points alone (squares)."""
    W, H, L, R, T, B = 760, 420, 70, 230, 40, 55
    pts = [p for s in series for p in s[1]]
    fx = (lambda x: math.log2(x)) if xlog else (lambda x: x)
    xs, ys = [fx(x) for x, _ in pts] or [0, 1], [y for _, y in pts] or [0, 1]
    x0, x1 = min(xs), max(xs)
    y0, y1 = ylim if ylim else (min(ys), max(ys))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - 1, y1 + 1
    pad = 0.05 * (y1 - y0)
    y0, y1 = (y0 - pad, y1 + pad) if not ylim else (y0, y1)
    px = lambda x: L + (fx(x) - x0) / (x1 - x0) * (W - L - R)  # noqa: E731
    py = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)  # noqa: E731
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2:.0f}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2:.0f}" y="{H - 15}" text-anchor="middle">{escape(xlabel)}</text>',
           f'<text x="18" y="{(T + H - B) / 2:.0f}" text-anchor="middle" '
           f'transform="rotate(-90 18 {(T + H - B) / 2:.0f})">{escape(ylabel)}</text>']
    for x in sorted({x for x, _ in pts}):
        svg.append(f'<line x1="{px(x):.1f}" y1="{H - B}" x2="{px(x):.1f}" y2="{H - B + 5}" stroke="black"/>')
        svg.append(f'<text x="{px(x):.1f}" y="{H - B + 18}" text-anchor="middle">{x:g}</text>')
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        svg.append(f'<line x1="{L - 5}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{L - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
    for k, (label, points, color, dashed, lines) in enumerate(series):
        points = sorted(points, key=lambda p: p[0])
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        if lines and len(points) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
            svg.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in points:
            svg.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}"/>' if lines else
                       f'<rect x="{px(x) - 4:.1f}" y="{py(y) - 4:.1f}" width="8" height="8" fill="{color}"/>')
        ly = T + 10 + 18 * k
        svg.append(f'<line x1="{W - R + 15}" y1="{ly}" x2="{W - R + 39}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="2"{dash}/>')
        svg.append(f'<text x="{W - R + 45}" y="{ly + 4}">{escape(label)}</text>')
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def ppl_plot(rows):
    """Perplexity against the retained fraction: per window length, stage 1 dashed, stage 2 solid (the
    teacher at 1.0 ends both lines); the layers chosen by error as squares."""
    good = ok_rows(rows)
    teacher = [r for r in good if r["stage"] == "teacher"]
    series = []
    for k, c in enumerate(map(str, contexts(rows, "ppl"))):
        color = COLORS[k % len(COLORS)]
        for stage, dashed in (("stage1", True), ("stage2", False)):
            line = [(r["retained"], r["ppl"][c]) for r in good
                    if (r["stage"] == stage and r["selection"] != "by error" or r["stage"] == "teacher") and c in r["ppl"]]
            if len(line) > len(teacher):
                series.append((f"{STAGE_NAMES[stage]}, window {c}", line, color, dashed, True))
            chosen = [(r["retained"], r["ppl"][c]) for r in good
                      if r["stage"] == stage and r["selection"] == "by error" and c in r["ppl"]]
            if chosen:
                series.append((f"{STAGE_NAMES[stage]}, by error, {c}", chosen, color, dashed, False))
    return line_chart("Held-out perplexity against softmax layers retained", "fraction of layers kept as softmax",
                      "perplexity", series)


def passkey_plot(rows):
    """Passkey accuracy against context: the teacher and each configuration's last stage measured."""
    last = {}
    for r in ok_rows(rows):
        last[r["config"]] = r
    series = [(r["config"] if r["stage"] == "teacher" else f"{r['config']}, {STAGE_NAMES[r['stage']]}",
               [(int(c), a) for c, a in r["passkey"].items()], COLORS[k % len(COLORS)], r["stage"] == "stage1", True)
              for k, r in enumerate(last.values())]
    return line_chart("Passkey retrieval against context length", "context (tokens)", "accuracy", series, xlog=True,
                      ylim=(0, 1))


def write_all(rows, res, about):
    open(os.path.join(res, "study.md"), "w").write(table(rows, about))
    open(os.path.join(res, "study-ppl.svg"), "w").write(ppl_plot(rows))
    open(os.path.join(res, "study-passkey.svg"), "w").write(passkey_plot(rows))


def update_docs(rows, res, docs, about):
    """docs/img/study-*.svg and the part of docs/quality.md between the study markers."""
    path = os.path.join(docs, "quality.md")
    text = open(path).read()
    if BEGIN not in text or END not in text:
        sys.exit(f"--update-docs: {path} lacks the markers {BEGIN} ... {END}")
    os.makedirs(os.path.join(docs, "img"), exist_ok=True)
    for name in ("study-ppl.svg", "study-passkey.svg"):
        shutil.copyfile(os.path.join(res, name), os.path.join(docs, "img", name))
    part = table(rows, about) + "\n![perplexity against retained fraction](img/study-ppl.svg)\n" \
                                "![passkey accuracy against context](img/study-passkey.svg)\n"
    head, rest = text.split(BEGIN, 1)
    open(path, "w").write(head + BEGIN + "\n" + part + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    res = sys.argv[1]
    rows = [json.loads(l) for l in open(os.path.join(res, "study.jsonl"))]
    write_all(rows, res, f"results in `{res}`")
