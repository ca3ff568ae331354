#!/usr/bin/env bash
# unpack_devout.sh - on the GPU machine: .devpack/devout.tgz (tests/gpu/pack_devout.sh) into .devout/.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .devout && mkdir -p .devout
tar -C .devout -xzf .devpack/devout.tgz
