#!/usr/bin/env bash
# cuda_default.sh - prints ON where this machine can build and run the CUDA backend (nvcc on PATH and
# nvidia-smi lists a GPU), else OFF: the -DLIZARD_CUDA that launch/quickstart.sh and tests/run_all.sh
# pass, and CMakeLists.txt's default, so that the build does not depend on which ran first. A machine
# with nvcc and no GPU (a CI runner, a login node) builds the CPU backend alone; -DLIZARD_CUDA=ON by
# hand builds CUDA there too.
if command -v nvcc >/dev/null && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo ON
else
  echo OFF
fi
