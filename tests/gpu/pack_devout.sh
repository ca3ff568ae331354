#!/usr/bin/env bash
# pack_devout.sh - on the dev machine: the binaries the device scripts run (lizard and the test
# programs listed in `tests` below) and the shared libraries they need that the GPU
# machine's image lacks (Debian's jansson, PCRE2, protobuf-c, microhttpd, Open MPI and what those pull in), into
# .devpack/devout.txz (git-ignored; the binaries' fatbins make the folder larger than a device call
# carries; xz takes each program's ~30 MB to ~6 MB): carry ".devpack"; the device scripts unpack it into .devout/
# (tests/gpu/device_env.sh, once for each pack).
# The C runtime and the CUDA libraries (cuBLAS, NCCL) are the GPU machine's own.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
# PACK_TESTS: which test programs (a call carries 64 MiB: a call that needs only lizard packs none)
read -r -a tests <<<"${PACK_TESTS-test_gpu_ops test_parity test_gpu_train test_gpu_backward test_gpu_backward_attn test_finetune}"
make -C "$BUILD" -j"$(nproc)" lizard ${tests[@]+"${tests[@]}"} >/dev/null
rm -rf .devout && mkdir -p .devout/lib
bins=("$BUILD/lizard")
for t in ${tests[@]+"${tests[@]}"}; do
  bins+=("$(find "$BUILD" -name "$t" -type f | head -1)")
done
for b in "${bins[@]}"; do
  [ -f "$b" ] && cp "$b" .devout/
done
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libnccl|libcudart)'
for b in "${bins[@]}"; do
  [ -f "$b" ] || continue
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] || cp -L -n "$path" .devout/lib/
  done
done
strip .devout/lizard .devout/test_* 2>/dev/null || true
rm -rf .devpack && mkdir -p .devpack && tar -C .devout -cf - . | xz -T2 -6 >.devpack/devout.txz
du -sh .devpack/devout.txz
