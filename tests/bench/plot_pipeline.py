#!/usr/bin/env python3
"""Plot for docs/benchmarks.md: throughput on 1 GPU against a 2-GPU pipeline,
from the JSON lines tests/bench/device_scaleout.sh writes (b8.jsonl, each line
tagged with its run: b8-VARIANT-1, b8-VARIANT-2-balanced). Decode panels at the
same total batch, and with the rows per stage held (2 GPUs at twice the batch,
each stage's micro-batch the size of the 1-GPU batch) when those runs exist.
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

    def rate(run, kind, size):
        for r in rows:
            if r.get("run") == run and r.get("kind") == kind and \
                    (r.get("batch") == size if kind == "decode" else r.get("prompt") == size):
                return r["tok_s"]
        return 0

    # (title, kind, size on 1 GPU, size on 2 GPUs)
    cases = [("decode, batch 1", "decode", 1, 1), ("decode, batch 64", "decode", 64, 64),
             ("decode, batch 256", "decode", 256, 256)]
    if rate("b8-lizard-2-balanced", "decode", 128):
        cases += [("decode, 64 rows a stage\n(1 GPU: 64, 2 GPUs: 128)", "decode", 64, 128),
                  ("decode, 256 rows a stage\n(1 GPU: 256, 2 GPUs: 512)", "decode", 256, 512)]
    cases.append(("32K prompt", "prompt", 32768, 32768))
    fig, axes = plt.subplots(1, len(cases), figsize=(3.2 * len(cases), 3.8))
    for ax, (title, kind, one_size, two_size) in zip(axes, cases):
        for i, (variant, one, two) in enumerate(runs):
            a, b = rate(one, kind, one_size), rate(two, kind, two_size)
            ax.bar([i - 0.2], [a], 0.4, color="tab:gray", label="1 GPU" if i == 0 else None)
            ax.bar([i + 0.2], [b], 0.4, color="tab:blue", label="2 GPUs (pipeline)" if i == 0 else None)
            if a:
                ax.text(i + 0.2, b, f"{b / a:.2f}x", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(runs)), [r[0] for r in runs])
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("tokens/s")
    axes[0].legend(fontsize=8)
    fig.suptitle("LLaMA-3-8B shapes, bf16, H200: one GPU against two pipeline stages (balanced plan)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
