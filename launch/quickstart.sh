#!/usr/bin/env bash
# quickstart.sh - on a fresh Debian/Ubuntu machine: install, build, write the
# embedded default model (tiny-hybrid: 4 layers, 2 softmax + 2 Lizard) and
# generate from it, with the per-sequence state report.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash tests/install_deps.sh; else sudo bash tests/install_deps.sh; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target lizard
MODEL=${1:-models/tiny-hybrid}
[ -f "$MODEL/config.json" ] || ./build/lizard init --config tiny-hybrid --out "$MODEL"
./build/lizard info --model "$MODEL"
# random weights: the text is noise; the point is the state report (Lizard bytes stay constant)
./build/lizard generate --model "$MODEL" --prompt "Lizards bask in the sun" --max-tokens 64 --temperature 0.8 \
    --seed 1 --ignore-eos --stats
