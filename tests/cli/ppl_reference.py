#!/usr/bin/env python3
"""ppl_reference.py LIZARD MODEL IDS W,W,... - perplexity by the definition of docs/quality.md,
computed apart from `lizard eval`: the ids (comma-separated, BOS first) cut into consecutive windows
of W tokens, each window's logits from its own `lizard forward --logits-out` run, a log-softmax here
in double precision. Prints one JSON object {"W": {"ppl", "mean_nll", "tokens", "windows"}}."""
import json, math, os, struct, subprocess, sys, tempfile


def read_npy_f32(path):
    """[rows, cols] float32 C-order .npy (what `lizard forward` writes) as (rows of lists)."""
    raw = open(path, "rb").read()
    assert raw[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", raw[8:10])[0]
    header = raw[10:10 + hlen].decode()
    assert "'<f4'" in header and "'fortran_order': False" in header, header
    shape = tuple(int(x) for x in header.split("'shape': (")[1].split(")")[0].split(",") if x.strip())
    rows, cols = shape
    flat = struct.unpack("<%df" % (rows * cols), raw[10 + hlen:10 + hlen + 4 * rows * cols])
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)]


def log_softmax_at(row, i):
    m = max(row)
    return row[i] - m - math.log(sum(math.exp(x - m) for x in row))


def main():
    lizard, model, ids = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "logits.npy")
        for w in (int(x) for x in sys.argv[4].split(",")):
            nll, tokens, windows = 0.0, 0, 0
            for s0 in range(0, len(ids) - 1, w):
                win = ids[s0:s0 + w]
                subprocess.run([lizard, "forward", "--model", model, "--ids", ",".join(map(str, win)),
                                "--logits-out", npy], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                rows = read_npy_f32(npy)
                assert len(rows) == len(win), (len(rows), len(win))
                for t in range(len(win) - 1):
                    nll -= log_softmax_at(rows[t], win[t + 1])
                    tokens += 1
                windows += 1
            out[str(w)] = {"ppl": math.exp(nll / tokens), "mean_nll": nll / tokens, "tokens": tokens,
                           "windows": windows}
    print(json.dumps(out))


main()
