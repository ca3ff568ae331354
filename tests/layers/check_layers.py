#!/usr/bin/env python3
"""check_layers.py - fails when a source file includes a header of a layer above its own,
or when code above kernels/ includes a backend's own header (kernels/cpu, kernels/cuda).

The layers, lowest first (docs/architecture.md draws them); each folder is a layer of its own and,
but for kernels/cpu and kernels/cuda (the kernels' library), a CMake library:
  core <- tokenizer
  core <- world (MPI's process-wide world, the heartbeat, the rank watchdog)
  core <- kernels <- sampler (the next token's draw)
  core <- kernels <- stages <- session (and sampler) <- pipeline (and world) <- engine <- serve, train <- cli
A file may include headers of its own folder and of the folders its layer is built on,
as the CMake libraries allow; this check says the same by text, with file:line, so that
CI names the line even where a header happens to be reachable another way."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORE = ["runtime/core"]
KERNELS = CORE + ["kernels"]
STAGES = KERNELS + ["stages"]
WORLD = CORE + ["runtime/world"]
SAMPLER = KERNELS + ["runtime/sampler"]
SESSION = STAGES + ["runtime/sampler", "runtime/session"]
PIPELINE = SESSION + ["runtime/world", "runtime/pipeline"]
ENGINE = PIPELINE + ["runtime/engine"]
TOKENIZER = CORE + ["runtime/tokenizer"]
# folder -> folders its includes may resolve to (besides its own folder and generated files)
ALLOWED = {
    "runtime/core": CORE,
    "runtime/tokenizer": TOKENIZER,
    "runtime/world": WORLD,
    "kernels": KERNELS,
    "kernels/cpu": KERNELS + ["kernels/cpu"],
    "kernels/cuda": KERNELS + ["kernels/cpu", "kernels/cuda"],
    "stages": STAGES,
    "runtime/sampler": SAMPLER,
    "runtime/session": SESSION,
    "runtime/pipeline": PIPELINE,
    "runtime/engine": ENGINE,
    "runtime/serve": ENGINE + TOKENIZER + ["runtime/serve"],
    "runtime/train": ENGINE + TOKENIZER + ["runtime/train"],
    "runtime/cli": ENGINE + TOKENIZER + ["runtime/serve", "runtime/train", "runtime/cli"],
}
ABOVE_KERNELS = ["stages", "runtime/"]
BACKEND_DIRS = ["kernels/cpu", "kernels/cuda"]
GENERATED = {"lizard.pb-c.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    d = os.path.dirname(path)
    while d and d not in ALLOWED:
        d = os.path.dirname(d)
    return d


def resolve(root, name, src_dir, search):
    for base in [src_dir] + search:
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def problems(root):
    """Every include of the tree at `root` that breaks the layering, as "file:line: why" lines."""
    every = sorted(set(d for dirs in ALLOWED.values() for d in dirs) | set(ALLOWED))
    bad = []
    for top in ["runtime", "kernels", "stages"]:
        for dirpath, _, names in sorted(os.walk(os.path.join(root, top))):
            for n in sorted(names):
                if not n.endswith((".c", ".h", ".cu", ".cuh", ".inc")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, n), root)
                layer = folder_of(rel)
                if not layer:
                    bad.append(f"{rel}: in no layer (add its folder to tests/layers/check_layers.py)")
                    continue
                allowed = ALLOWED[layer]
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or os.path.basename(m.group(1)) in GENERATED:
                            continue
                        src_dir = os.path.dirname(rel)
                        hit = resolve(root, m.group(1), src_dir, allowed)
                        if hit is None:
                            where = resolve(root, m.group(1), src_dir, every)
                            what = f"a header of {os.path.dirname(where)}, above {layer}" if where else "no such header"
                            bad.append(f"{rel}:{lineno}: includes \"{m.group(1)}\": {what}")
                            continue
                        above = any(rel.startswith(p) for p in ABOVE_KERNELS)
                        if above and any(hit.startswith(b + "/") for b in BACKEND_DIRS):
                            bad.append(f"{rel}:{lineno}: includes \"{m.group(1)}\": a backend's own header above "
                                       "kernels/ (go through kernels/ops.h or kernels/train_ops.h)")
                            continue
                        # a relative path ("../engine/engine.h") resolves from anywhere: where it lands counts
                        if folder_of(hit) not in allowed + [layer]:
                            bad.append(f"{rel}:{lineno}: includes \"{m.group(1)}\": a header of {folder_of(hit)}, "
                                       f"above {layer}")
    return bad


def main():
    bad = problems(ROOT)
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers: {len(bad)} include(s) break the layering")
        return 1
    print("check_layers: every include points to its own layer or one below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
