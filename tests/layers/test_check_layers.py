#!/usr/bin/env python3
"""test_check_layers.py - check_layers.py must name every arrow that runs back up: on a copy of the
tree, each planted include (a layer above by name, by relative path, a backend's own header) is
reported with its file and line, and the untouched copy passes."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

# (file, include planted at its top, what the report must say)
PLANTED = [
    ("runtime/pipeline/pipeline.c", '#include "engine.h"', "a header of runtime/engine, above runtime/pipeline"),
    ("runtime/session/session.c", '#include "pipeline.h"', "a header of runtime/pipeline, above runtime/session"),
    ("runtime/session/state_io.c", '#include "handoff.h"', "a header of runtime/pipeline, above runtime/session"),
    ("runtime/world/mpi_world.c", '#include "ops.h"', "a header of kernels, above runtime/world"),
    ("runtime/sampler/sampler.c", '#include "step.h"', "a header of stages, above runtime/sampler"),
    ("runtime/pipeline/plan.c", '#include "../engine/engine.h"', "a header of runtime/engine, above runtime/pipeline"),
    ("stages/step.c", '#include "cpu/cpu_kernels.h"', "a backend's own header above kernels/"),
]


def main():
    with tempfile.TemporaryDirectory(prefix="lz_check_layers_") as root:
        for top in ["runtime", "kernels", "stages"]:
            shutil.copytree(os.path.join(check_layers.ROOT, top), os.path.join(root, top))
        clean = check_layers.problems(root)
        if clean:
            print("the untouched copy fails:\n" + "\n".join(clean))
            return 1
        failed = 0
        for rel, include, said in PLANTED:
            path = os.path.join(root, rel)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(include + "\n" + text)
            found = check_layers.problems(root)
            want = f"{rel}:1: includes "
            if len(found) != 1 or not found[0].startswith(want) or said not in found[0]:
                print(f"{rel}: {include} planted; expected one line '{want}...{said}', got {found}")
                failed += 1
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        if failed:
            return 1
    print(f"test_check_layers: {len(PLANTED)} planted upward includes named, the untouched tree passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
