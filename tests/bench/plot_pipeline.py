#!/usr/bin/env python3
"""Plot for docs/benchmarks.md: throughput on 1 GPU against a 2-GPU pipeline,
from the JSON lines tests/bench/device_scaleout.sh writes (b8.jsonl).
usage: plot_pipeline.py b8.jsonl OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    runs = [("teacher", "b8-teacher-1", "b8-teacher-2-balanced"), ("hybrid", "b8-hybrid-1", "b8-hybrid-2-balanced"),
            ("lizard", "b8-lizard-1", "b8-lizard-2-balanced")]
    cases = [("decode", 1), ("decode", 64), ("decode", 256), ("prompt", 32768)]
    fig, axes = plt.subplots(1, len(cases), figsize=(14, 3.6))
    for ax, (kind, size) in zip(axes, cases):
        for i, (variant, one, two) in enumerate(runs):
            def rate(run):
                for r in rows:
                    if r.get("run") == run and r.get("kind") == kind and \
                            (r.get("batch") == size if kind == "decode" else r.get("prompt") == size):
                        return r["tok_s"]
                return 0
            a, b = rate(one), rate(two)
            ax.bar([i - 0.2], [a], 0.4, color="tab:gray", label="1 GPU" if i == 0 else None)
            ax.bar([i + 0.2], [b], 0.4, color="tab:blue", label="2 GPUs (pipeline)" if i == 0 else None)
            if a:
                ax.text(i + 0.2, b, f"{b / a:.2f}x", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(runs)), [r[0] for r in runs])
        ax.set_title(f"{kind} {'batch ' + str(size) if kind == 'decode' else str(size // 1024) + 'K prompt'}")
        ax.set_ylabel("tokens/s")
    axes[0].legend(fontsize=8)
    fig.suptitle("LLaMA-3-8B shapes, bf16, H200: one GPU against two pipeline stages (balanced plan)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
