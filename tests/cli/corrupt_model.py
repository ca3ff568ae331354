#!/usr/bin/env python3
"""Writes a broken copy of a model folder, one defect per kind (stdlib only).

usage: corrupt_model.py SRC DST KIND
KIND: truncated | header-past-eof | overlap | out-of-range | wrong-shape | wrong-dtype |
      missing-tensor | bad-json | unknown-rope | missing-key | nan-weight | inf-norm | nan-alpha |
      nan-embed-last (a NaN or infinity in the tensor's own dtype: F32, F16 or BF16)
"""
import json
import shutil
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, header, body):
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def main():
    src, dst, kind = sys.argv[1:4]
    shutil.copytree(src, dst)
    st = dst + "/model.safetensors"
    cfg_path = dst + "/config.json"
    header, body = read_st(st)
    names = sorted(k for k in header if k != "__metadata__")
    if kind == "truncated":
        with open(st, "r+b") as f:
            f.truncate(8 + len(json.dumps(header)) // 2)
    elif kind == "header-past-eof":
        with open(st, "r+b") as f:
            f.write(struct.pack("<Q", 1 << 40))
    elif kind == "overlap":
        a, b = header[names[0]], header[names[1]]
        b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + b["data_offsets"][1] - b["data_offsets"][0]]
        write_st(st, header, body)
    elif kind == "out-of-range":
        t = header["model.norm.weight"]
        size = t["data_offsets"][1] - t["data_offsets"][0]
        t["data_offsets"] = [len(body) - size // 2, len(body) - size // 2 + size]
        write_st(st, header, body)
    elif kind == "wrong-shape":
        t = header["model.norm.weight"]
        n = t["shape"][0]
        t["shape"] = [n // 2, 2]
        write_st(st, header, body)
    elif kind == "wrong-dtype":
        t = header["model.norm.weight"]
        t["dtype"] = "I32"
        write_st(st, header, body)
    elif kind == "missing-tensor":
        del header["model.layers.1.mlp.up_proj.weight"]
        write_st(st, header, body)
    elif kind == "bad-json":
        with open(cfg_path, "w") as f:
            f.write('{"hidden_size": 128, "vocab_size": ')
    elif kind == "unknown-rope":
        cfg = json.load(open(cfg_path))
        cfg.pop("rope_parameters", None)
        cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
        json.dump(cfg, open(cfg_path, "w"))
    elif kind in ("nan-weight", "inf-norm", "nan-alpha", "nan-embed-last"):
        name, at, value = {"nan-weight": ("model.layers.1.mlp.up_proj.weight", 7, float("nan")),
                           "inf-norm": ("model.norm.weight", 3, float("-inf")),
                           "nan-alpha": ("model.layers.1.self_attn.window_alpha", 0, float("nan")),
                           "nan-embed-last": ("model.embed_tokens.weight", -1, float("inf"))}[kind]
        t = header[name]
        size = {"F32": 4, "F16": 2, "BF16": 2}[t["dtype"]]
        bits = {"F32": struct.pack("<f", value), "F16": struct.pack("<e", value),
                "BF16": struct.pack("<f", value)[2:]}[t["dtype"]]
        begin, end = t["data_offsets"]
        pos = begin + at * size if at >= 0 else end - size
        body = body[:pos] + bits + body[pos + size:]
        write_st(st, header, body)
    elif kind == "missing-key":
        cfg = json.load(open(cfg_path))
        del cfg["intermediate_size"]
        json.dump(cfg, open(cfg_path, "w"))
    else:
        sys.exit("unknown kind " + kind)


if __name__ == "__main__":
    main()
