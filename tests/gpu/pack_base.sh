#!/usr/bin/env bash
# pack_base.sh [REF] - on the dev machine: the lizard binary of another commit (default main), built in a
# worktree of its own (BASE_DIR, default /tmp/lizard-base), stripped, into .devpack/base.tgz: the
# LZ_BIN=base arm of tests/bench/device_decode_ab.sh, which runs it with the libraries of .devout/lib
# (tests/gpu/pack_devout.sh). Only the binary, so that both packs fit in one device call's carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
REF=${1:-main}
DIR=${BASE_DIR:-/tmp/lizard-base}
git worktree prune # (a worktree whose folder was removed, /tmp cleared, is forgotten first)
if [ -d "$DIR" ]; then git -C "$DIR" checkout -q --detach "$REF"; else git worktree add -q --detach "$DIR" "$REF"; fi
cmake -S "$DIR" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
make -C "$DIR/build" -j"$(nproc)" lizard >/dev/null
tmp=$(mktemp -d)
cp "$DIR/build/lizard" "$tmp/" && strip "$tmp/lizard"
git -C "$DIR" rev-parse HEAD >"$tmp/COMMIT"
mkdir -p .devpack && tar -C "$tmp" -czf .devpack/base.tgz lizard COMMIT
rm -rf "$tmp"
echo "base $(git -C "$DIR" rev-parse --short HEAD): $(du -sh .devpack/base.tgz | cut -f1)"
