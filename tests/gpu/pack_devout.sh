#!/usr/bin/env bash
# pack_devout.sh - on the dev machine: the binaries the device scripts run (lizard, test_gpu_ops,
# test_parity, test_gpu_train, test_gpu_backward_attn) and the shared libraries they need that the
# GPU machine's image lacks (Debian's jansson, PCRE2, protobuf-c, microhttpd, Open MPI and what those
# pull in), into .devpack/devout.tgz (git-ignored; the binaries' fatbins make the folder larger than a
# device call carries, compressed it is ~30 MB): carry ".devpack"; the device scripts unpack it into .devout/
# (tests/gpu/device_env.sh, once for each pack).
# The C runtime and the CUDA libraries (cuBLAS, NCCL) are the GPU machine's own.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
make -C "$BUILD" -j"$(nproc)" lizard test_gpu_ops test_parity test_gpu_train test_gpu_backward_attn >/dev/null
rm -rf .devout && mkdir -p .devout/lib
bins=("$BUILD/lizard" "$BUILD/tests/gpu/test_gpu_ops" "$(find "$BUILD" -name test_parity -type f | head -1)"
      "$(find "$BUILD" -name test_gpu_train -type f | head -1)"
      "$(find "$BUILD" -name test_gpu_backward_attn -type f | head -1)")
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
mkdir -p .devpack && tar -C .devout -czf .devpack/devout.tgz .
du -sh .devpack/devout.tgz
