#!/usr/bin/env python3
"""What a user would run instead: HF transformers (SDPA attention, bf16) on the
same GPU, random weights of the LLaMA-3-8B shape. Prompt tokens/s (one forward
of the whole prompt) and decode tokens/s (generate with the default dynamic
cache, greedy, no eos). With --compiled, decode also as the strongest plain
PyTorch path: a static KV cache, which lets generate() compile its decoding
forward with torch.compile (CUDA graphs, "reduce-overhead"). Prints one JSON
object per result.

usage: torch_baseline.py [--prompt 2048,8192,32768] [--batch 1,16] [--context 2048] [--layers 32] [--compiled]
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build(layers):
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    return model


def timed(fn):
    fn()  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", default="2048,8192,32768")
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--context", default="2048")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--compiled", action="store_true", help="also decode with a static cache, compiled")
    a = ap.parse_args()
    model = build(a.layers)
    with torch.no_grad():
        for p in [int(x) for x in a.prompt.split(",") if x]:
            ids = torch.randint(0, 128000, (1, p), device="cuda")
            # logits of the last position only, as a server would
            dt = timed(lambda: model(ids, logits_to_keep=1))
            print(json.dumps({"kind": "hf-prompt", "prompt": p, "tok_s": p / dt}), flush=True)
        for c in [int(x) for x in a.context.split(",") if x]:
            for b in [int(x) for x in a.batch.split(",") if x]:
                ids = torch.randint(0, 128000, (b, c), device="cuda")
                gen = dict(max_new_tokens=a.steps, min_new_tokens=a.steps, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
                short = dict(gen, max_new_tokens=1, min_new_tokens=1)
                t_prefill = timed(lambda: model.generate(ids, **short))
                t_all = timed(lambda: model.generate(ids, **gen))
                tok_s = b * (a.steps - 1) / max(t_all - t_prefill, 1e-9)
                print(json.dumps({"kind": "hf-decode", "batch": b, "context": c, "tok_s": tok_s}), flush=True)
                if a.compiled:
                    compiled_decode(model, ids, gen, b, c, a.steps)


def compiled_decode(model, ids, gen, b, c, steps):
    """Decode tokens/s with a static cache and the compiled decoding forward (one line; an error is a line too)."""
    from transformers import CompileConfig
    static = dict(gen, cache_implementation="static", compile_config=CompileConfig(fullgraph=True,
                                                                                   mode="reduce-overhead"))
    short = dict(static, max_new_tokens=1, min_new_tokens=1)  # the prompt alone: no decoding step runs
    try:
        model.generate(ids, **static)  # compiles and captures; timed() warms up once more
        t_prefill = timed(lambda: model.generate(ids, **short))
        t_all = timed(lambda: model.generate(ids, **static))
        row = {"kind": "hf-compiled-decode", "batch": b, "context": c,
               "tok_s": b * (steps - 1) / max(t_all - t_prefill, 1e-9)}
    except Exception as e:  # (a transformers without this path says so and the other figures stand)
        row = {"kind": "hf-compiled-decode", "batch": b, "context": c, "error": f"{type(e).__name__}: {e}"[:300]}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
