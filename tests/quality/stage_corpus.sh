#!/usr/bin/env bash
# stage_corpus.sh [CORPUS] - on the dev machine, before a device call of tests/quality/device_teacher.sh:
# copies the corpus (default ../shared/corpus beside the checkout) and the PyTorch reference of the two
# stages (../shared/reference) into .corpus/ at the repository root
# and has git ignore it, so that the call can carry it (carry ".corpus").
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${1:-$(git rev-parse --show-toplevel)/../shared/corpus}
[ -f "$SRC/distill.txt.xz" ] && [ -f "$SRC/valid.txt" ] || { echo "stage_corpus.sh: $SRC: no distill.txt.xz / valid.txt" >&2; exit 2; }
mkdir -p .corpus
cp "$SRC"/distill.txt.xz "$SRC"/distill.index.tsv "$SRC"/valid.txt "$SRC"/valid.index.tsv .corpus/
REF=$(dirname "$SRC")/reference # the PyTorch reference of the two stages, run beside lizard on the GPU
[ -f "$REF/lizard_two_stage.py" ] && mkdir -p .corpus/reference && cp "$REF"/lizard_two_stage.py .corpus/reference/
chmod -R u+w .corpus
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.corpus/' "$exclude" 2>/dev/null || echo '/.corpus/' >>"$exclude"
du -sh .corpus
