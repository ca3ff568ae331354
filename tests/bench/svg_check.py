"""svg_check.py - the verdict of the plot scripts' tests (test_plot_*.py): which expected strings an
SVG lacks and which unwanted ones it holds, printed under the test's name; 0 when neither and the
test's own extra check (ok) holds, else 1."""


def verdict(name, text, want, unwanted, ok=True):
    missing = [w for w in want if w not in text]
    present = [w for w in unwanted if w in text]
    if missing or present or not ok:
        print(f"{name}: missing", missing, "unwanted", present, "" if ok else "(and its own check failed)")
        return 1
    print(f"{name}: ok")
    return 0
