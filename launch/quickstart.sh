#!/usr/bin/env bash
# quickstart.sh - on a Debian/Ubuntu machine: the packages (only those missing; installing needs
# root), a build of what the machine can run (the CUDA backend only where nvidia-smi sees a GPU and
# nvcc is there: launch/cuda_default.sh, the rule tests/run_all.sh and CMakeLists.txt follow too), and a generation from the embedded default model with the per-sequence state report
# after its text. The default is the trained 50% hybrid kept in launch/default-model (README.md, "The
# default model"); where that folder holds no model, a random-weight tiny-hybrid (4 layers, 2 softmax
# + 2 Lizard) written by `lizard init`, whose text is noise. MODEL (first argument): where that
# random model goes (default models/tiny-hybrid); DEFAULT_MODEL: the trained model's folder (default
# launch/default-model); BUILD: the build folder (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
# the build's and the tests' packages (tests/install_deps.sh's list) that dpkg does not have installed
missing=""
for p in $(bash tests/install_deps.sh --list); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "quickstart: installing the missing packages:$missing"
  if [ "$(id -u)" -eq 0 ]; then bash tests/install_deps.sh
  elif command -v sudo >/dev/null; then sudo bash tests/install_deps.sh
  else echo "quickstart: run as root: bash tests/install_deps.sh" >&2; exit 2; fi
fi
cuda=$(bash launch/cuda_default.sh)
echo "quickstart: building with -DLIZARD_CUDA=$cuda"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLIZARD_CUDA=$cuda >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target lizard
device=cpu
[ $cuda = ON ] && device=cuda
DEFAULT_MODEL=${DEFAULT_MODEL:-launch/default-model}
# a model folder: its config, weights (one file or an index of shards) and tokenizer; a teacher without
# a lizard block passes too
holds_model() {
  [ -f "$1/config.json" ] && [ -f "$1/tokenizer.json" ] &&
    { [ -f "$1/model.safetensors" ] || [ -f "$1/model.safetensors.index.json" ]; }
}
if holds_model "$DEFAULT_MODEL"; then
  "$BUILD/lizard" info --model "$DEFAULT_MODEL"
  # sampling as its generation_config.json says; the state report (stderr) comes after the text
  prompt="The lizard is a small reptile that"
  echo "quickstart: $DEFAULT_MODEL continues \"$prompt\":"
  "$BUILD/lizard" generate --model "$DEFAULT_MODEL" --prompt "$prompt" --max-tokens 48 --seed 1 --stats \
      --device $device
else
  echo "quickstart: no trained default model in $DEFAULT_MODEL: a random-weight tiny-hybrid instead (its text is noise)"
  MODEL=${1:-models/tiny-hybrid}
  [ -f "$MODEL/config.json" ] || "$BUILD/lizard" init --config tiny-hybrid --out "$MODEL"
  "$BUILD/lizard" info --model "$MODEL"
  # random weights: the point is the state report (Lizard bytes stay constant)
  "$BUILD/lizard" generate --model "$MODEL" --prompt "Lizards bask in the sun" --max-tokens 64 --temperature 0.8 \
      --seed 1 --ignore-eos --stats --device $device
fi
echo "quickstart: to put lizard on PATH: cmake --install $BUILD --prefix ~/.local (then ~/.local/bin on PATH)"
