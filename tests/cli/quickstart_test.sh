#!/usr/bin/env bash
# quickstart_test.sh - launch/quickstart.sh with stand-ins for cmake, dpkg-query, apt-get, nvidia-smi
# and nvcc that record their calls: it installs packages only when one is missing, builds CUDA only
# where nvidia-smi lists a GPU (and nvcc is there), and runs the model on that device: the trained
# default model when its folder holds one (sampling as its generation_config.json says), else a
# random tiny-hybrid that `lizard init` writes, saying so in one line. tests/run_all.sh builds by the
# same rule, passed explicitly, so that the build does not depend on which of the two ran first. With LIZARD, the stand-in
# build's lizard runs it, and the quickstart's output is checked as a newcomer sees it: the text,
# then the state report on lines of its own, nothing raw.
# Usage: quickstart_test.sh REPO [LIZARD]
set -uo pipefail
REPO=$1
REAL_LIZARD=${2:-}
source "$REPO/tests/test_lib.sh"
mkdir -p "$TMP/bin" "$TMP/gpu"
LOG=$TMP/calls
stub() { printf '#!/bin/sh\n%s\n' "$2" >"$3/$1"; chmod +x "$3/$1"; }
# the build's lizard: records its calls, and runs the real one where REAL is set
stub lizard 'echo "lizard $*" >>'"$LOG"'; [ -n "${REAL:-}" ] && exec "$REAL" "$@"; exit 0' "$TMP"
stub cmake 'echo "cmake $*" >>'"$LOG"'; [ "$1" = --build ] && { mkdir -p "$2"; cp '"$TMP/lizard"' "$2/lizard"; }; exit 0' "$TMP/bin"
stub dpkg-query '[ -n "${ALL_INSTALLED:-}" ] && printf "install ok installed"; exit 0' "$TMP/bin"
stub apt-get 'echo "apt-get $*" >>'"$LOG"'' "$TMP/bin"
stub sudo 'echo "sudo $*" >>'"$LOG"'; "$@"' "$TMP/bin"
stub nvidia-smi 'echo "GPU 0: NVIDIA H100 (UUID: GPU-0)"' "$TMP/gpu"
stub nvcc 'exit 0' "$TMP/gpu"
base_path=$TMP/bin:/usr/bin:/bin
# DEFAULT: the trained default model's folder (by default one that does not exist)
quickstart() {
  DEFAULT_MODEL=${DEFAULT:-$TMP/no-default} BUILD=$TMP/build PATH=$1 bash "$REPO/launch/quickstart.sh" "$TMP/model" \
    >"$TMP/out" 2>&1
}
NO_DEFAULT="no trained default model in"

# no GPU, every package there: no install, a CPU build, the model run on the CPU
rm -f "$LOG"; ALL_INSTALLED=1 quickstart "$base_path" || bad "quickstart failed: $(tail -3 "$TMP/out")"
grep -q "apt-get" "$LOG" && bad "packages installed although all are present" || ok
grep -q "cmake -S . -B $TMP/build .*-DLIZARD_CUDA=OFF" "$LOG" && ok || bad "no GPU: not a CPU build: $(cat "$LOG")"
grep -q "lizard generate .*--device cpu" "$LOG" && ok || bad "no GPU: not run on the CPU: $(grep lizard "$LOG")"
# nvcc but no nvidia-smi (a build machine without a GPU): still a CPU build
stub nvcc 'exit 0' "$TMP/bin"
rm -f "$LOG"; ALL_INSTALLED=1 quickstart "$base_path"
grep -q -- "-DLIZARD_CUDA=OFF" "$LOG" && ok || bad "nvcc without a GPU: CUDA built: $(grep cmake "$LOG")"
rm -f "$TMP/bin/nvcc"
# a GPU and nvcc: a CUDA build, the model run on the GPU
rm -f "$LOG"; ALL_INSTALLED=1 quickstart "$TMP/gpu:$base_path"
grep -q -- "-DLIZARD_CUDA=ON" "$LOG" && grep -q "lizard generate .*--device cuda" "$LOG" && ok ||
  bad "GPU: not a CUDA build run on it: $(cat "$LOG")"
# tests/run_all.sh in a stand-in checkout (its cmake, ctest and fuzz runs record their calls): the
# release build's -DLIZARD_CUDA is the quickstart's on the same machine, given explicitly whatever
# build/ held before: no nvcc, nvcc without a GPU (CI), a GPU and nvcc
R=$TMP/repo
mkdir -p "$R/tests/fuzz" "$R/launch" "$TMP/nvcc"
cp "$REPO/tests/run_all.sh" "$R/tests/" && cp "$REPO/launch/cuda_default.sh" "$R/launch/"
stub run_fuzz.sh 'echo "run_fuzz $*" >>'"$LOG" "$R/tests/fuzz"
stub ctest 'echo "ctest $*" >>'"$LOG" "$TMP/bin"
stub nvcc 'exit 0' "$TMP/nvcc"
for machine in "none:OFF:$base_path" "nvcc:OFF:$TMP/nvcc:$base_path" "gpu:ON:$TMP/gpu:$base_path"; do
  name=${machine%%:*} rest=${machine#*:}
  want=${rest%%:*} path=${rest#*:}
  rm -f "$LOG"; ALL_INSTALLED=1 quickstart "$path"
  quick=$(sed -n "s|^cmake -S \. -B $TMP/build .*-DLIZARD_CUDA=\([A-Z]*\).*|\1|p" "$LOG")
  rm -f "$LOG"; PATH=$path bash "$R/tests/run_all.sh" >"$TMP/run_all.out" 2>&1 || bad "$name: run_all.sh failed: $(tail -3 "$TMP/run_all.out")"
  release=$(sed -n 's|^cmake -S \. -B build .*-DLIZARD_CUDA=\([A-Z]*\).*|\1|p' "$LOG")
  [ "$quick" = "$want" ] && [ "$release" = "$want" ] && ok ||
    bad "$name: -DLIZARD_CUDA quickstart '$quick', run_all.sh '$release', expected $want: $(grep cmake "$LOG")"
done
# LZ_CUDA=ON: run_all.sh compiles the CUDA backend on a machine without a GPU too
rm -f "$LOG"; LZ_CUDA=ON PATH=$TMP/nvcc:$base_path bash "$R/tests/run_all.sh" >"$TMP/run_all.out" 2>&1
grep -q "^cmake -S \. -B build .*-DLIZARD_CUDA=ON" "$LOG" && ok || bad "LZ_CUDA=ON: $(grep cmake "$LOG")"
rm -f "$TMP/bin/ctest"

# packages missing: installed (as root directly, else through sudo)
rm -f "$LOG"; quickstart "$base_path"
grep -q "apt-get install" "$LOG" && grep -q "installing the missing packages: build-essential" "$TMP/out" && ok ||
  bad "missing packages not installed: $(cat "$LOG")"

# no trained default: one line says so, and the random tiny-hybrid is written and run as before
rm -f "$LOG"; ALL_INSTALLED=1 quickstart "$base_path"
[ "$(grep -c "$NO_DEFAULT" "$TMP/out")" -eq 1 ] && ok || bad "no default: not said in one line: $(cat "$TMP/out")"
grep -q "^lizard init --config tiny-hybrid --out $TMP/model$" "$LOG" &&
  grep -q "^lizard generate --model $TMP/model .*--ignore-eos --stats --device cpu" "$LOG" && ok ||
  bad "no default: the random model not written and run: $(grep lizard "$LOG")"
# a folder without weights holds no model: the random one again
mkdir -p "$TMP/partial" && echo '{}' >"$TMP/partial/config.json" && echo '{}' >"$TMP/partial/tokenizer.json"
rm -f "$LOG"; DEFAULT=$TMP/partial ALL_INSTALLED=1 quickstart "$base_path"
grep -q "$NO_DEFAULT $TMP/partial" "$TMP/out" && grep -q "^lizard init " "$LOG" && ok ||
  bad "a folder without weights taken as the default: $(cat "$TMP/out")"

# the trained default (a teacher passes: a model, Lizard or not): run where it is, nothing written,
# the sampling of its generation_config.json, the state report
D=$TMP/default
mkdir -p "$D"
for f in "$REPO"/tests/quality/teacher/*.json "$REPO"/tests/quality/teacher/*.safetensors; do
  ln -s "$f" "$D/$(basename "$f")"
done
for where in "$base_path" "$TMP/gpu:$base_path"; do
  rm -f "$LOG"; DEFAULT=$D ALL_INSTALLED=1 quickstart "$where" || bad "default: quickstart failed: $(tail -3 "$TMP/out")"
  device=cpu; [ "$where" = "$base_path" ] || device=cuda
  ! grep -q "$NO_DEFAULT" "$TMP/out" && ! grep -q "^lizard init" "$LOG" && ok ||
    bad "default present: the random model written or its line said: $(cat "$TMP/out")"
  line=$(grep "^lizard generate " "$LOG")
  [[ $line == "lizard generate --model $D --prompt "*" --stats --device $device" ]] && [[ $line != *--temperature* ]] &&
    [[ $line != *--top-* ]] && [[ $line != *--ignore-eos* ]] && ok || bad "default ($device): not run as it should: $line"
done

# as a newcomer sees it: the default's text, then the state report on lines of its own, nothing raw;
# without the default, the random model's text escaped (its bytes are noise)
if [ -n "$REAL_LIZARD" ]; then
  rm -f "$LOG"; DEFAULT=$D REAL=$REAL_LIZARD ALL_INSTALLED=1 quickstart "$base_path" || bad "default: $(tail -3 "$TMP/out")"
  sed -n '/continues "/,$p' "$TMP/out" | sed -n 2p >"$TMP/text"
  n_stats=$(grep -c '^lizard stats: position' "$TMP/out")
  [ -s "$TMP/text" ] && ! grep -q 'lizard stats' "$TMP/text" && [ "$n_stats" -ge 3 ] &&
    [ "$(sed -n '/continues "/,$p' "$TMP/out" | sed -n "3,$((n_stats + 2))p" | grep -c '^lizard stats: position')" -eq "$n_stats" ] &&
    ok || bad "default: not the text, then the state report: $(cat -v "$TMP/out" | tail -8)"
  words=$(grep -o '[A-Za-z]\+' "$TMP/text" | wc -l)
  [ "$words" -ge 15 ] && ok || bad "default: $words words of text: $(cat "$TMP/text")"
  for run in default random; do
    [ $run = random ] && { rm -f "$LOG"; REAL=$REAL_LIZARD ALL_INSTALLED=1 quickstart "$base_path" || bad "random: $(tail -3 "$TMP/out")"; }
    python3 - "$TMP/out" <<'PY' && ok || bad "$run: raw control bytes or invalid UTF-8 in the quickstart's output"
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8")
sys.exit(any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in t))
PY
  done
  grep -q '^lizard stats: position .* | total [0-9]* bytes/sequence$' "$TMP/out" &&
    [ "$(grep -c 'lizard stats' "$TMP/out")" -eq "$(grep -c '^lizard stats' "$TMP/out")" ] && ok ||
    bad "random: a state line inside the text: $(cat -v "$TMP/out" | tail -8)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
