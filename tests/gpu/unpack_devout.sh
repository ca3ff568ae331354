#!/usr/bin/env bash
# unpack_devout.sh - on the GPU machine: .devpack/devout.txz (tests/gpu/pack_devout.sh) into .devout/.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .devout && mkdir -p .devout
# (Python's tarfile: the GPU machine's image may lack the xz program; its Python has lzma)
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' .devpack/devout.txz .devout
