#!/usr/bin/env bash
# quickstart_test.sh - launch/quickstart.sh with stand-ins for cmake, dpkg-query, apt-get, nvidia-smi
# and nvcc that record their calls: it installs packages only when one is missing, builds CUDA only
# where nvidia-smi lists a GPU (and nvcc is there), and runs the model on that device.
# Usage: quickstart_test.sh REPO
set -uo pipefail
REPO=$1
source "$REPO/tests/test_lib.sh"
mkdir -p "$TMP/bin" "$TMP/gpu"
LOG=$TMP/calls
stub() { printf '#!/bin/sh\n%s\n' "$2" >"$3/$1"; chmod +x "$3/$1"; }
stub cmake 'echo "cmake $*" >>'"$LOG"'; [ "$1" = --build ] && { mkdir -p "$2"; printf "#!/bin/sh\necho \"lizard \$*\" >>'"$LOG"'\n" >"$2/lizard"; chmod +x "$2/lizard"; }; exit 0' "$TMP/bin"
stub dpkg-query '[ -n "${ALL_INSTALLED:-}" ] && printf "install ok installed"; exit 0' "$TMP/bin"
stub apt-get 'echo "apt-get $*" >>'"$LOG"'' "$TMP/bin"
stub sudo 'echo "sudo $*" >>'"$LOG"'; "$@"' "$TMP/bin"
stub nvidia-smi 'echo "GPU 0: NVIDIA H100 (UUID: GPU-0)"' "$TMP/gpu"
stub nvcc 'exit 0' "$TMP/gpu"
base_path=$TMP/bin:/usr/bin:/bin
quickstart() { BUILD=$TMP/build PATH=$1 bash "$REPO/launch/quickstart.sh" "$TMP/model" >"$TMP/out" 2>&1; }

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
# packages missing: installed (as root directly, else through sudo)
rm -f "$LOG"; quickstart "$base_path"
grep -q "apt-get install" "$LOG" && grep -q "installing the missing packages: build-essential" "$TMP/out" && ok ||
  bad "missing packages not installed: $(cat "$LOG")"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
