#!/usr/bin/env python3
"""Independent float64 reference implementation of a Lizard hybrid model.

numpy only (no torch). Everything is written in the most direct "matrix" form
from the equations of docs/model-format.md: the Lizard layer builds the full
T x T attention matrix with an explicit product of the gates, never the
recurrence, so that it is an independent check of the C runtime's recurrent
and chunked kernels.

API
    load_model(dir)                              -> Model
    forward_logits(model, ids, softmax_layers=None, trace=None)
                                                 -> np.ndarray [T, vocab] float64
    greedy(model, ids, n, softmax_layers=None)   -> (new_ids: list[int], gaps: list[float])

softmax_layers: None = as config.json says (every layer for a teacher;
lizard.softmax_layers for a Lizard model); otherwise "all", "none", "0,2"
or an iterable of layer indices.

CLI
    python3 lizard_reference.py MODEL_DIR --ids 1,2,3 [--softmax-layers all] [--greedy 8]
    python3 lizard_reference.py --check FIXTURE_CASE_DIR     (re-checks an expect.json)
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ----------------------------------------------------------------------------
# safetensors reader (own parser: safetensors.numpy cannot represent BF16)
# ----------------------------------------------------------------------------

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}


def read_safetensors(path):
    """Reads one .safetensors file; returns {name: float64 ndarray}."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} past the end of the file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        shape = [int(s) for s in info["shape"]]
        start, end = (int(o) for o in info["data_offsets"])
        if not (0 <= start <= end and base + end <= len(data)):
            raise ValueError(f"{path}: {name}: data_offsets {start},{end} out of range")
        buf = data[base + start:base + end]
        count = int(np.prod(shape)) if shape else 1
        if dt == "BF16":
            if len(buf) != 2 * count:
                raise ValueError(f"{path}: {name}: {len(buf)} bytes for {count} BF16 values")
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << np.uint32(16)
            arr = bits.view(np.float32)
        elif dt in _ST_DTYPES:
            item = np.dtype(_ST_DTYPES[dt]).itemsize
            if len(buf) != item * count:
                raise ValueError(f"{path}: {name}: {len(buf)} bytes for {count} {dt} values")
            arr = np.frombuffer(buf, dtype=_ST_DTYPES[dt])
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        out[name] = np.array(arr, dtype=np.float64).reshape(shape)
    return out


def read_model_tensors(model_dir):
    """All tensors of a model folder: model.safetensors, or the shards named
    by model.safetensors.index.json."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            part = read_safetensors(os.path.join(model_dir, shard))
            for name, arr in part.items():
                if name in tensors:
                    raise ValueError(f"{model_dir}: tensor {name} is in two shards")
                tensors[name] = arr
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError(f"{model_dir}: index names tensors missing from the shards: {sorted(missing)[:5]}")
        for name in tensors:
            if name not in weight_map:
                raise ValueError(f"{model_dir}: tensor {name} is in a shard but not in the index")
        return tensors
    single = os.path.join(model_dir, "model.safetensors")
    if not os.path.exists(single):
        raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
    return read_safetensors(single)


# ----------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------

def parse_rope(cfg):
    """Effective RoPE settings from a config dict, in either spelling.

    transformers 5: rope_parameters = {rope_type, rope_theta, ...}
    transformers 4: rope_theta (+ rope_scaling with "rope_type" or "type").
    Returns {"rope_type", "rope_theta", and the llama3 keys if llama3}."""
    rp = cfg.get("rope_parameters")
    if rp is not None:
        if not isinstance(rp, dict):
            raise ValueError(f"rope_parameters is not an object: {rp!r}")
        params = dict(rp)
        theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    else:
        theta = cfg.get("rope_theta", 10000.0)
        params = dict(cfg.get("rope_scaling") or {})
    rtype = params.get("rope_type", params.get("type", "default")) or "default"
    if theta is None:
        theta = 10000.0
    out = {"rope_type": rtype, "rope_theta": float(theta)}
    if rtype == "default":
        pass
    elif rtype == "llama3":
        for key in ("factor", "low_freq_factor", "high_freq_factor"):
            out[key] = float(params[key])
        orig = params.get("original_max_position_embeddings", cfg.get("max_position_embeddings"))
        out["original_max_position_embeddings"] = int(orig)
    else:
        raise ValueError(f"unsupported rope_type {rtype!r}")
    return out


def rope_inv_freq(rope, head_dim):
    """inv_freq [head_dim/2] exactly as HF computes it (in float64)."""
    d = head_dim
    inv = 1.0 / (rope["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    if rope["rope_type"] == "llama3":
        factor = rope["factor"]
        low = rope["low_freq_factor"]
        high = rope["high_freq_factor"]
        orig = rope["original_max_position_embeddings"]
        low_freq_wavelen = orig / low
        high_freq_wavelen = orig / high
        wavelen = 2.0 * math.pi / inv
        scaled = np.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
        inv = np.where(medium, smoothed, scaled)
    return inv


def llama3_bands(rope, head_dim):
    """(n_high, n_medium, n_low): how many frequencies fall in each llama3 band,
    and the smallest relative distance of a wavelength to a band edge."""
    d = head_dim
    inv = 1.0 / (rope["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    orig = rope["original_max_position_embeddings"]
    lo_w = orig / rope["low_freq_factor"]
    hi_w = orig / rope["high_freq_factor"]
    wl = 2.0 * math.pi / inv
    n_high = int(np.sum(wl < hi_w))
    n_low = int(np.sum(wl > lo_w))
    n_med = len(wl) - n_high - n_low
    margin = float(min(np.min(np.abs(wl - lo_w) / lo_w), np.min(np.abs(wl - hi_w) / hi_w)))
    return n_high, n_med, n_low, margin


class Model:
    def __init__(self, config, tensors, path=""):
        self.path = path
        self.config = config
        self.tensors = tensors
        c = config
        self.vocab_size = int(c["vocab_size"])
        self.hidden_size = int(c["hidden_size"])
        self.intermediate_size = int(c["intermediate_size"])
        self.n_layers = int(c["num_hidden_layers"])
        self.n_heads = int(c["num_attention_heads"])
        self.n_kv_heads = int(c.get("num_key_value_heads") or self.n_heads)
        self.head_dim = int(c.get("head_dim") or self.hidden_size // self.n_heads)
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.tie = bool(c.get("tie_word_embeddings", False))
        act = c.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r} not supported")
        sw = c.get("sliding_window")
        self.sliding_window = int(sw) if sw else None
        self.rope = parse_rope(c)
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError("num_attention_heads is not a multiple of num_key_value_heads")
        self.lizard = c.get("lizard")
        if self.lizard is not None:
            lz = self.lizard
            self.feature_dim = int(lz["feature_dim"])
            self.feature_map = lz.get("feature_map", "softmax")
            if self.feature_map not in ("softmax", "exp"):
                raise ValueError(f"feature_map {self.feature_map!r}")
            self.window_size = int(lz["window_size"])
            self.num_meta = int(lz["num_meta_tokens"])
            self.gla_normalize = bool(lz.get("gla_normalize", True))
        self._check_shapes()

    def t(self, name):
        if name not in self.tensors:
            raise KeyError(f"{self.path}: tensor {name} missing")
        return self.tensors[name]

    def has_lizard_tensors(self, layer):
        return f"model.layers.{layer}.self_attn.feature_map_q.weight" in self.tensors

    def _expect(self, name, shape):
        a = self.t(name)
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{self.path}: {name}: shape {a.shape}, expected {tuple(shape)}")

    def _check_shapes(self):
        H, V, I = self.hidden_size, self.vocab_size, self.intermediate_size
        nh, nkv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        self._expect("model.embed_tokens.weight", (V, H))
        self._expect("model.norm.weight", (H,))
        if not self.tie:
            self._expect("lm_head.weight", (V, H))
        for l in range(self.n_layers):
            p = f"model.layers.{l}."
            self._expect(p + "input_layernorm.weight", (H,))
            self._expect(p + "post_attention_layernorm.weight", (H,))
            self._expect(p + "self_attn.q_proj.weight", (nh * hd, H))
            self._expect(p + "self_attn.k_proj.weight", (nkv * hd, H))
            self._expect(p + "self_attn.v_proj.weight", (nkv * hd, H))
            self._expect(p + "self_attn.o_proj.weight", (H, nh * hd))
            self._expect(p + "mlp.gate_proj.weight", (I, H))
            self._expect(p + "mlp.up_proj.weight", (I, H))
            self._expect(p + "mlp.down_proj.weight", (H, I))
            if self.has_lizard_tensors(l):
                if self.lizard is None:
                    raise ValueError(f"{self.path}: layer {l} has Lizard tensors but config.json has no lizard block")
                f, m = self.feature_dim, self.num_meta
                q = p + "self_attn."
                hq = self.t(q + "feature_map_q.weight").shape[0]
                hk = self.t(q + "feature_map_k.weight").shape[0]
                if hq not in (1, nh):
                    raise ValueError(f"{self.path}: layer {l}: feature_map_q has {hq} maps (1 or {nh})")
                if hk not in (1, nkv, nh):
                    raise ValueError(f"{self.path}: layer {l}: feature_map_k has {hk} maps (1, {nkv} or {nh})")
                self._expect(q + "feature_map_q.weight", (hq, hd, f))
                self._expect(q + "feature_map_k.weight", (hk, hd, f))
                self._expect(q + "gate.weight", (1, H))
                self._expect(q + "meta_logits", (m,))
                self._expect(q + "window_alpha", (1,))

    def resolve_softmax_layers(self, softmax_layers=None):
        """The set of layers computed as softmax attention."""
        L = self.n_layers
        if softmax_layers is None:
            if self.lizard is None:
                s = set(range(L))
            else:
                s = set(int(x) for x in self.lizard.get("softmax_layers", []))
        elif isinstance(softmax_layers, str):
            spec = softmax_layers.strip()
            if spec == "all":
                s = set(range(L))
            elif spec in ("none", ""):
                s = set()
            else:
                s = set(int(x) for x in spec.split(","))
        else:
            s = set(int(x) for x in softmax_layers)
        for l in s:
            if not 0 <= l < L:
                raise ValueError(f"softmax layer {l} out of range 0..{L - 1}")
        for l in range(L):
            if l not in s and not self.has_lizard_tensors(l):
                raise ValueError(f"{self.path}: layer {l} is to be a Lizard layer but has no Lizard tensors")
        return s


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    return Model(config, read_model_tensors(model_dir), model_dir)


# ----------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def linear(model, x, prefix):
    y = x @ model.t(prefix + ".weight").T
    b = model.tensors.get(prefix + ".bias")
    if b is not None:
        y = y + b
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax_last(u):
    e = np.exp(u - np.max(u, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def rotate_half(x):
    d = x.shape[-1] // 2
    return np.concatenate([-x[..., d:], x[..., :d]], axis=-1)


def apply_rope(model, x):
    """x: [T, heads, head_dim]; positions 0..T-1, HF rotate_half convention."""
    T = x.shape[0]
    inv = rope_inv_freq(model.rope, model.head_dim)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)          # [T, head_dim]
    cos = np.cos(emb)[:, None, :]
    sin = np.sin(emb)[:, None, :]
    return x * cos + rotate_half(x) * sin


def softmax_attention(model, q, k, v):
    """Causal GQA softmax attention with RoPE (and Mistral's sliding window)."""
    T = q.shape[0]
    nh, hd = model.n_heads, model.head_dim
    group = nh // model.n_kv_heads
    q = apply_rope(model, q)
    k = apply_rope(model, k)
    i = np.arange(T)[:, None]
    t = np.arange(T)[None, :]
    visible = t <= i
    if model.sliding_window is not None:
        visible &= (i - t) < model.sliding_window
    y = np.zeros((T, nh, hd))
    for h in range(nh):
        g = h // group
        s = (q[:, h, :] @ k[:, g, :].T) / math.sqrt(hd)
        s = np.where(visible, s, -np.inf)
        p = softmax_last(s)
        y[:, h, :] = p @ v[:, g, :]
    return y


def feature_map(model, u):
    """phi: [softmax(u) ++ softmax(-u)] or [exp(u) ++ exp(-u)] over the last axis."""
    if model.feature_map == "softmax":
        return np.concatenate([softmax_last(u), softmax_last(-u)], axis=-1)
    return np.concatenate([np.exp(u), np.exp(-u)], axis=-1)


def lizard_attention(model, layer, xn, q, k, v, trace=None):
    """One Lizard layer's attention (before o_proj), matrix form, no RoPE.

    xn: [T, hidden] (input after input_layernorm); q: [T, nh, hd];
    k, v: [T, nkv, hd]. Returns [T, nh, hd]."""
    T = xn.shape[0]
    nh, nkv, hd = model.n_heads, model.n_kv_heads, model.head_dim
    group = nh // nkv
    p = f"model.layers.{layer}.self_attn."
    Wq = model.t(p + "feature_map_q.weight")     # [Hq, hd, f]
    Wk = model.t(p + "feature_map_k.weight")     # [Hk, hd, f]
    w_gamma = model.t(p + "gate.weight")[0]      # [hidden]
    meta = model.t(p + "meta_logits")            # [m]
    alpha = float(model.t(p + "window_alpha")[0])
    Hq, Hk = Wq.shape[0], Wk.shape[0]
    w = model.window_size

    gamma = sigmoid(xn @ w_gamma)                # [T]

    # decay[i, t] = prod_{l=t+1..i} gamma_l for t <= i, 0 above the diagonal
    decay = np.zeros((T, T))
    for i in range(T):
        for t in range(i + 1):
            decay[i, t] = np.prod(gamma[t + 1:i + 1])   # empty product = 1

    ii = np.arange(T)[:, None]
    tt = np.arange(T)[None, :]
    in_window = (tt <= ii) & (tt >= ii - w + 1)

    y = np.zeros((T, nh, hd))
    for h in range(nh):
        g = h // group
        wq = Wq[0] if Hq == 1 else Wq[h]
        if Hk == 1:
            wk = Wk[0]
        elif Hk == nkv:
            wk = Wk[g]
        else:                                    # Hk == nh: keys repeated to query heads
            wk = Wk[h]
        qh, kg, vg = q[:, h, :], k[:, g, :], v[:, g, :]
        phq = feature_map(model, qh @ wq)        # [T, 2f]
        phk = feature_map(model, kg @ wk)        # [T, 2f]

        # gated linear attention
        A = (phq @ phk.T) * decay                # [T, T], lower triangular
        gla = A @ vg
        if model.gla_normalize:
            gla = gla / np.sum(A, axis=1, keepdims=True)

        # sliding window softmax with meta-memory in the denominator
        s = (qh @ kg.T) / math.sqrt(hd)
        s_masked = np.where(in_window, s, -np.inf)
        mx = np.maximum(np.max(s_masked, axis=1), np.max(meta) if meta.size else -np.inf)[:, None]
        e = np.where(in_window, np.exp(s_masked - mx), 0.0)
        den = np.sum(np.exp(meta[None, :] - mx), axis=1) + np.sum(e, axis=1)
        win = (e @ vg) / den[:, None]

        y[:, h, :] = gla + alpha * win

    if trace is not None:
        trace.setdefault("lizard", {})[layer] = {
            "xn": xn, "q": q, "k": k, "v": v, "gamma": gamma, "y": y}
    return y


def forward_logits(model, ids, softmax_layers=None, trace=None):
    """Logits [T, vocab] (float64) for the token ids `ids`."""
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("empty ids")
    for i in ids:
        if not 0 <= i < model.vocab_size:
            raise ValueError(f"token id {i} out of range")
    smx = model.resolve_softmax_layers(softmax_layers)
    T = len(ids)
    nh, nkv, hd = model.n_heads, model.n_kv_heads, model.head_dim
    emb = model.t("model.embed_tokens.weight")
    x = emb[np.array(ids)].copy()
    for l in range(model.n_layers):
        p = f"model.layers.{l}."
        xn = rmsnorm(x, model.t(p + "input_layernorm.weight"), model.eps)
        q = linear(model, xn, p + "self_attn.q_proj").reshape(T, nh, hd)
        k = linear(model, xn, p + "self_attn.k_proj").reshape(T, nkv, hd)
        v = linear(model, xn, p + "self_attn.v_proj").reshape(T, nkv, hd)
        if l in smx:
            y = softmax_attention(model, q, k, v)
        else:
            y = lizard_attention(model, l, xn, q, k, v, trace)
        x = x + linear(model, y.reshape(T, nh * hd), p + "self_attn.o_proj")
        xn = rmsnorm(x, model.t(p + "post_attention_layernorm.weight"), model.eps)
        gate = linear(model, xn, p + "mlp.gate_proj")
        up = linear(model, xn, p + "mlp.up_proj")
        x = x + linear(model, silu(gate) * up, p + "mlp.down_proj")
    x = rmsnorm(x, model.t("model.norm.weight"), model.eps)
    if model.tie or "lm_head.weight" not in model.tensors:
        head = emb
    else:
        head = model.t("lm_head.weight")
    logits = x @ head.T
    if trace is not None:
        trace["softmax_layers"] = sorted(smx)
    if not np.all(np.isfinite(logits)):
        raise FloatingPointError("non-finite logits")
    return logits


def top2_gap(row):
    order = np.argsort(-np.asarray(row, dtype=np.float64), kind="stable")
    return int(order[0]), float(row[order[0]] - row[order[1]])


def greedy(model, ids, n, softmax_layers=None, return_rows=False):
    """n greedy tokens by full recompute (argmax) each step.

    Returns (new_ids, gaps) where gaps[s] = top1 - top2 logit at step s;
    with return_rows=True also the last-position logits of each step."""
    seq = [int(i) for i in ids]
    new_ids, gaps, rows = [], [], []
    for _ in range(n):
        row = forward_logits(model, seq, softmax_layers)[-1]
        tok, gap = top2_gap(row)
        seq.append(tok)
        new_ids.append(tok)
        gaps.append(gap)
        rows.append(row)
    if return_rows:
        return new_ids, gaps, rows
    return new_ids, gaps


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------

def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def check_case(case_dir):
    """Re-checks a fixture case folder (expect.json) against this reference."""
    with open(os.path.join(case_dir, "expect.json")) as f:
        expect = json.load(f)
    model = load_model(os.path.join(case_dir, expect["model"]))
    ok = True
    for run in expect["runs"]:
        sl = run["softmax_layers"]
        want = np.load(os.path.join(case_dir, run["logits"]))
        got = forward_logits(model, expect["prompt_ids"], sl)
        err = rel_err(got, want)
        tol = 1e-6 if run["source"] == "float64-reference" else 1e-5
        ids, gaps = greedy(model, expect["prompt_ids"], len(run["greedy_ids"]), sl)
        good = err < tol and ids == run["greedy_ids"]
        ok &= good
        print(f"{case_dir} {run['name']}: rel_err {err:.2e} (tol {tol:g}) greedy "
              f"{'same' if ids == run['greedy_ids'] else 'DIFFERENT ' + str(ids)} "
              f"min_gap {min(gaps):.4g} -> {'ok' if good else 'FAIL'}")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--ids", help="comma-separated token ids")
    ap.add_argument("--softmax-layers", default=None)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--check", nargs="+", metavar="CASE_DIR")
    a = ap.parse_args(argv)
    if a.check:
        return 0 if all([check_case(d) for d in a.check]) else 1
    if not a.model_dir or not a.ids:
        ap.error("MODEL_DIR and --ids are needed (or --check)")
    model = load_model(a.model_dir)
    ids = [int(x) for x in a.ids.split(",")]
    np.set_printoptions(precision=6, suppress=True, linewidth=150)
    logits = forward_logits(model, ids, a.softmax_layers)
    print("softmax layers:", sorted(model.resolve_softmax_layers(a.softmax_layers)))
    print("last-position logits[:10]:", logits[-1, :10])
    if a.greedy:
        new, gaps = greedy(model, ids, a.greedy, a.softmax_layers)
        print("greedy:", new)
        print("gaps:", [round(g, 6) for g in gaps])
    return 0


if __name__ == "__main__":
    sys.exit(main())
