#!/usr/bin/env python3
"""Plots for docs/benchmarks.md from `lizard bench --json` files (and the HF
baseline's JSON lines). usage: plot_bench.py OUT_DIR bench-*.jsonl [torch.jsonl]"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    rows = {}
    for p in paths:
        name = p.split("/")[-1].split(".")[0].replace("bench-", "").split("-")[0]  # bench-lizard-DATE -> lizard
        rows[name] = [json.loads(line) for line in open(p) if line.strip()]
    return rows


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    rows = load(paths)
    colors = {"teacher": "tab:red", "hybrid": "tab:purple", "lizard": "tab:green", "torch": "tab:gray"}

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, ctx in zip(axes, (2048, 32768)):
        for name, rs in rows.items():
            d = sorted((r["batch"], r["tok_s"], r["bound_tok_s"]) for r in rs
                       if r.get("kind") == "decode" and r.get("context") == ctx)
            if not d:
                continue
            c = colors.get(name, "black")
            ax.plot([x[0] for x in d], [x[1] for x in d], "o-", color=c, label=f"{name}")
            ax.plot([x[0] for x in d], [x[2] for x in d], ":", color=c, label=f"{name} bound")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequences in the batch")
        ax.set_ylabel("decode tokens/s")
        ax.set_title(f"LLaMA-3-8B shape, decode at {ctx // 1024}K context, H200 bf16")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/decode.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rs in rows.items():
        kind = "hf-prompt" if name == "torch" else "prompt"
        d = sorted((r["prompt"], r["tok_s"]) for r in rs if r.get("kind") == kind)
        if d:
            ax.plot([x[0] for x in d], [x[1] for x in d], "o-", color=colors.get(name, "black"),
                    label="HF transformers (SDPA)" if name == "torch" else name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("prompt tokens/s")
    ax.set_title("LLaMA-3-8B shape, prompt throughput, H200 bf16")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/prompt.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    ctx = [2 ** k for k in range(10, 18)]
    per_tok = 2 * 8 * 128 * 2  # K and V, 8 kv heads, head_dim 128, bf16: bytes per layer per token
    lizard_layer = 50593792 / 32
    for name, soft in (("teacher", 32), ("hybrid", 16), ("lizard", 0)):
        ax.plot(ctx, [(soft * per_tok * c + (32 - soft) * lizard_layer) / 1e9 for c in ctx], "o-",
                color=colors[name], label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("state per sequence (GB)")
    ax.set_title("LLaMA-3-8B shape: state one sequence holds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/state.png", dpi=110)


if __name__ == "__main__":
    main()
