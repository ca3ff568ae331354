#!/usr/bin/env python3
"""check_teacher.py --lizard BIN --teacher DIR --valid FILE --json OUT - on the GPU machine (torch,
transformers, tokenizers, numpy): does lizard run the trained teacher as HF does?

1. tokenizer: `lizard tokenize` against HF tokenizers' Tokenizer.from_file(tokenizer.json) on the whole
   held-out text (with and without BOS), on each of its first documents, and on a passkey prompt;
   decoding of those ids back to the same text.
2. logits: `lizard forward` on the first windows of the held-out text against HF transformers
   (LlamaForCausalLM, eager attention): CPU fp32 and CUDA fp32 against HF fp32 (relative error
   sqrt(sum d^2 / sum ref^2) <= 1e-4 / 1e-3, the same greedy token where HF's top two differ by more than
   1e-3), CUDA bf16 against HF fp32 and HF bf16 (<= 3e-2; greedy agreement reported, not required), as
   tests/parity holds the fixtures. The mean NLL of each is reported beside HF's.
Prints one line per check and writes them all to --json; exits 1 if any failed."""
import argparse, json, math, os, subprocess, sys, tempfile

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--lizard", required=True); ap.add_argument("--teacher", required=True)
ap.add_argument("--valid", required=True); ap.add_argument("--json", required=True)
ap.add_argument("--docs", type=int, default=100, help="documents checked one by one")
ap.add_argument("--windows", type=int, default=2, help="windows of --window tokens whose logits are compared")
ap.add_argument("--window", type=int, default=1024)
args = ap.parse_args()
results, failed = [], 0
tmp = tempfile.mkdtemp()


def report(name, ok, **figures):
    global failed
    failed += not ok
    results.append(dict(check=name, ok=bool(ok), **figures))
    print(f"{'ok  ' if ok else 'FAIL'} {name} " + " ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


def lizard(*argv, stdin=None):
    return subprocess.run([args.lizard, *argv], capture_output=True, text=True, check=True, input=stdin).stdout.strip()


def lizard_ids(text, special=True):
    path = os.path.join(tmp, "text.txt")
    open(path, "w", encoding="utf-8").write(text)
    out = lizard("tokenize", "--model", args.teacher, "--file", path, *([] if special else ["--no-special"]))
    return [int(x) for x in out.split(",")] if out else []


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# ---- 1. tokenizer ----
tok = Tokenizer.from_file(os.path.join(args.teacher, "tokenizer.json"))
raw = open(args.valid, "rb").read()
text = raw.decode("utf-8")
for special in (True, False):
    hf, mine = tok.encode(text, add_special_tokens=special).ids, lizard_ids(text, special)
    report(f"tokenize valid.txt ({'with' if special else 'without'} BOS)", hf == mine, tokens=len(hf),
           first_difference=first_difference(hf, mine) if hf != mine else None)
index = os.path.splitext(args.valid)[0] + ".index.tsv"
docs = []
if os.path.exists(index):
    rows = [l.split("\t") for l in open(index, encoding="utf-8").read().splitlines()[1:] if l.strip()]
    docs = [raw[int(o):int(o) + int(n)].decode("utf-8") for o, n, *_ in rows[:args.docs]]
passkey = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz "
           "you about the important information there.\n" + "The grass is green. The sky is blue. The sun is yellow. "
           "Here we go. There and back again. " * 3 + "The pass key is 48213. Remember it. 48213 is the pass key. "
           "\nWhat is the pass key? The pass key is")
bad_docs, bad_decode = [], []
for i, d in enumerate(docs + [passkey]):
    hf = tok.encode(d).ids
    if lizard_ids(d) != hf:
        bad_docs.append(i)
    back = lizard("tokenize", "--model", args.teacher, "--ids", ",".join(map(str, hf)), "--format", "json")
    if json.loads(back)["text"] != tok.decode(hf):
        bad_decode.append(i)
report("tokenize documents one by one", not bad_docs, documents=len(docs) + 1, differing=bad_docs[:10])
report("decode documents", not bad_decode, documents=len(docs) + 1, differing=bad_decode[:10])

# ---- 2. logits ----
def load(dtype):
    try:
        m = LlamaForCausalLM.from_pretrained(args.teacher, dtype=dtype, attn_implementation="eager")
    except TypeError:
        m = LlamaForCausalLM.from_pretrained(args.teacher, torch_dtype=dtype, attn_implementation="eager")
    return m.to(dtype).eval().to("cuda")  # (transformers 4 may take dtype= as a config field and load fp32)


def hf_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy()


def lizard_logits(ids, device, dtype):
    path = os.path.join(tmp, "logits.npy")
    lizard("forward", "--model", args.teacher, "--ids", ",".join(map(str, ids)), "--logits-out", path,
           "--device", device, "--dtype", dtype)
    return np.load(path)


def mean_nll(logits, ids):
    lg = torch.from_numpy(logits[:-1]).double()
    return float(torch.nn.functional.cross_entropy(lg, torch.tensor(ids[1:]), reduction="mean"))


def rel_err(a, ref):
    return float(np.sqrt(((a.astype(np.float64) - ref) ** 2).sum() / (ref.astype(np.float64) ** 2).sum()))


all_ids = tok.encode(text).ids
windows = [all_ids[i * args.window:(i + 1) * args.window] for i in range(args.windows)]
ref32, ref16 = load(torch.float32), load(torch.bfloat16)
for w, ids in enumerate(windows):
    hf32, hf16 = hf_logits(ref32, ids), hf_logits(ref16, ids)
    top2 = np.sort(hf32, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3  # positions whose greedy token is not a near tie
    for device, dtype, ref, ref_name, tol, greedy in (("cpu", "fp32", hf32, "HF fp32", 1e-4, True),
                                                      ("cuda", "fp32", hf32, "HF fp32", 1e-3, True),
                                                      ("cuda", "bf16", hf32, "HF fp32", 3e-2, False),
                                                      ("cuda", "bf16", hf16, "HF bf16", 3e-2, False)):
        mine = lizard_logits(ids, device, dtype)
        err = rel_err(mine, ref)
        agree = float((mine.argmax(1) == ref.argmax(1))[clear].mean())
        report(f"logits window {w} lizard {device} {dtype} vs {ref_name}", err <= tol and (agree == 1.0 or not greedy),
               rel_err=f"{err:.2e}", tolerance=tol, greedy_agreement=f"{agree:.4f}",
               nll_lizard=f"{mean_nll(mine, ids):.5f}", nll_hf=f"{mean_nll(ref, ids):.5f}")

json.dump({"failed": failed, "checks": results}, open(args.json, "w"), indent=1)
print(f"check_teacher: {len(results) - failed} of {len(results)} checks passed")
sys.exit(1 if failed else 0)
