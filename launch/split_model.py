#!/usr/bin/env python3
"""split_model.py MODEL TEACHER OUT - a Lizard model folder that keeps only what is its own.

Stage 1 and stage 2 change the attention projections and add the Lizard tensors; the embeddings,
MLPs and norms stay the teacher's, bit for bit. For a teacher sharded as attention projections
(model-00001-of-00002.safetensors) and the rest (model-00002-of-00002.safetensors), this writes OUT
with the model's own tensors in model-00001-of-00002.safetensors, the teacher's second shard linked
(a relative symlink) as model-00002-of-00002.safetensors, model.safetensors.index.json saying which
tensor is where, and the model's config, generation and tokenizer files. That is the layout of
launch/default-model: a few MB in place of the whole checkpoint.

MODEL is a folder with one model.safetensors (what `lizard distill` and `lizard finetune` write).
A tensor that the teacher's second shard holds must equal it byte for byte: a model whose MLP was
trained (`--lora-targets ...,gate,up,down`) is refused, since linking would drop its changes.
Errors are one line and exit 2.
"""
import json
import os
import shutil
import struct
import sys

OWN, SHARED = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def fail(msg):
    print(f"split_model: {msg}", file=sys.stderr)
    sys.exit(2)


def read_safetensors(path):
    """(header without __metadata__, the data bytes after the header)."""
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if len(raw) < 8:
        fail(f"{path}: not a safetensors file (shorter than its header length)")
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        fail(f"{path}: its header of {n} bytes runs past the end of the file")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError:
        fail(f"{path}: its header is not JSON")
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    for name, t in header.items():
        a, b = t.get("data_offsets", (0, -1))
        if not 0 <= a <= b <= len(data):
            fail(f"{path}: tensor {name} has data offsets {a}..{b} outside the {len(data)} data bytes")
    return header, data


def tensor_bytes(header, data, name):
    a, b = header[name]["data_offsets"]
    return data[a:b]


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, bytes)] in the order written; the header padded to 8 bytes."""
    header, offset = {}, 0
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, blob in tensors:
            f.write(blob)


def main():
    if len(sys.argv) != 4:
        fail("usage: split_model.py MODEL TEACHER OUT")
    model, teacher, out = sys.argv[1:]
    index_path = os.path.join(teacher, "model.safetensors.index.json")
    try:
        teacher_map = json.load(open(index_path))["weight_map"]
    except (OSError, ValueError, KeyError):
        fail(f"{index_path}: no weight_map (the teacher must be a sharded checkpoint)")
    if SHARED not in teacher_map.values():
        fail(f"{teacher}: no tensor in {SHARED}")
    header, data = read_safetensors(os.path.join(model, "model.safetensors"))
    t_header, t_data = read_safetensors(os.path.join(teacher, SHARED))
    own, shared = [], []
    for name in sorted(header):
        t = header[name]
        if teacher_map.get(name) != SHARED:
            own.append((name, t["dtype"], t["shape"], tensor_bytes(header, data, name)))
            continue
        tt = t_header.get(name)
        if tt is None or (tt["dtype"], tt["shape"]) != (t["dtype"], t["shape"]) or \
                tensor_bytes(t_header, t_data, name) != tensor_bytes(header, data, name):
            fail(f"{name}: differs from the teacher's ({SHARED}); this model cannot link that shard")
        shared.append(name)
    missing = sorted(n for n, f in teacher_map.items() if f == SHARED and n not in header)
    if missing:
        fail(f"{missing[0]}: in the teacher's {SHARED} but not in {model} ({len(missing)} such tensors)")
    os.makedirs(out, exist_ok=True)
    for name in FILES:
        src = os.path.join(model, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out, name))
    tmp = os.path.join(out, OWN + ".tmp")
    write_safetensors(tmp, own)
    os.replace(tmp, os.path.join(out, OWN))
    link = os.path.join(out, SHARED)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.relpath(os.path.join(teacher, SHARED), out), link)
    weight_map = {name: OWN for name, _, _, _ in own}
    weight_map.update({name: SHARED for name in shared})
    total = sum(b - a for a, b in (header[n]["data_offsets"] for n in header))
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    print(f"split_model: {out}: {len(own)} tensors of its own ({os.path.getsize(os.path.join(out, OWN))} bytes), "
          f"{len(shared)} linked from {os.path.join(teacher, SHARED)}")


if __name__ == "__main__":
    main()
