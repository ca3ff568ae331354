#!/usr/bin/env bash
# device_cublaslt_probe.sh - on the GPU machine: builds tests/bench/cublaslt_probe.cu against the
# machine's cuBLAS and runs it (the default GEMM against every cuBLASLt heuristic algorithm, for each
# decode-sized linear shape of LLaMA-3-8B). ALGOS: how many heuristic results to time (default 32).
# Log: $OUT/cublaslt-probe.txt.
set -uo pipefail
source tests/gpu/device_env.sh
nvcc -O2 -gencode=arch=compute_90a,code=sm_90a tests/bench/cublaslt_probe.cu -lcublasLt -lcublas \
  -o /tmp/cublaslt_probe || { echo "probe build failed"; exit 1; }
timeout 300 /tmp/cublaslt_probe "${ALGOS:-32}" | tee "$OUT/cublaslt-probe.txt"
