#!/usr/bin/env bash
# run_all.sh - build and run every CPU suite: the release build, the same
# suites under AddressSanitizer + UndefinedBehaviorSanitizer, and a bounded
# libFuzzer run of each parser. The release build has the CUDA backend where launch/cuda_default.sh
# says (nvcc and a GPU that nvidia-smi lists, as the quickstart's build), whatever build/ held before;
# LZ_CUDA=ON or OFF decides instead (ON: the CUDA code compiled on a machine without a GPU too, at the
# cost of many minutes). GPU suites (label gpu) skip without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
FUZZ_SECONDS=${LZ_FUZZ_SECONDS:-20}

CUDA=${LZ_CUDA:-$(bash launch/cuda_default.sh)}
echo "== release build (-DLIZARD_CUDA=$CUDA)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLIZARD_CUDA="$CUDA" >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"

echo "== ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLIZARD_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"
# (label driver: the study's Python driver runs the same commands the other suites run; not again here)
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE driver

echo "== libFuzzer (${FUZZ_SECONDS}s per target)"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DLIZARD_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$JOBS" --target fuzz_safetensors fuzz_config fuzz_tokenizer_load fuzz_tokenizer_encode fuzz_plan fuzz_session \
    fuzz_serve_request fuzz_adapter fuzz_train_state
bash tests/fuzz/run_fuzz.sh build-fuzz "$FUZZ_SECONDS"
echo "run_all: every suite passed"
