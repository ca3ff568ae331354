"""torch_lora_train.py - what a user would run instead of `lizard bench --train`: a LoRA fine-tuning loop
in PyTorch + HF transformers on a model of the same shape (random weights, bf16), LoRA r 8 / alpha 16 on
q, k, v, o, everything else frozen, SDPA attention, activation checkpointing per layer, AdamW, next-token
loss; tokens/s over the timed steps (median), as one JSON line. The model is the teacher (softmax in every
layer): transformers has no Lizard layer.

  python3 tests/bench/torch_lora_train.py --shape llama3-8b --seq 2048 --batch 1 --steps 10
"""
import argparse, json, math, statistics, sys, time

import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {  # the presets of runtime/core/model_presets.c that this compares against
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=128256, rope_theta=500000.0),
    "quality-teacher": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=64, vocab_size=4096, rope_theta=10000.0,
                            tie_word_embeddings=True),
}


class LoRA(nn.Module):
    def __init__(self, base, r=8, alpha=16):
        super().__init__()
        self.base, self.s = base, alpha / r
        self.A = nn.Parameter(torch.empty(r, base.in_features, device=base.weight.device, dtype=torch.float32))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.B = nn.Parameter(torch.zeros(base.out_features, r, device=base.weight.device, dtype=torch.float32))

    def forward(self, x):
        return self.base(x) + (x @ self.A.to(x.dtype).T @ self.B.to(x.dtype).T) * self.s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(max_position_embeddings=max(a.seq, 8192), attn_implementation="sdpa", **SHAPES[a.shape])
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, torch_dtype=torch.bfloat16)
    for p in model.parameters():
        p.requires_grad_(False)
    lora = []
    for layer in model.model.layers:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w = LoRA(getattr(layer.self_attn, name))
            setattr(layer.self_attn, name, w)
            lora += [w.A, w.B]
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    opt = torch.optim.AdamW(lora, lr=1e-5)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    times = []
    for step in range(a.steps + 1):  # step 0 warms up
        torch.cuda.synchronize()
        t0 = time.time()
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lora, 1.0)
        opt.step()
        torch.cuda.synchronize()
        if step:
            times.append(time.time() - t0)
    t = statistics.median(times)
    print(json.dumps({"kind": "torch_lora_train", "shape": a.shape, "seq_len": a.seq, "batch": a.batch,
                      "tok_s": round(a.batch * a.seq / t, 1), "step_ms": round(1e3 * t, 2), "loss": float(loss),
                      "memory_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2),
                      "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
