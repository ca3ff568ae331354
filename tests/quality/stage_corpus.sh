#!/usr/bin/env bash
# stage_corpus.sh [CORPUS] - on the dev machine, before a device call that trains or evaluates on the corpus
# (FOR_TEACHER=1 for tests/quality/device_teacher.sh, which also needs the training text's index):
# copies the corpus (default ../shared/corpus beside the checkout) and the PyTorch reference of the two
# stages (../shared/reference) into .corpus/ at the repository root
# and has git ignore it, so that the call can carry it (carry ".corpus").
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${1:-$(git rev-parse --show-toplevel)/../shared/corpus}
[ -f "$SRC/distill.txt.xz" ] && [ -f "$SRC/valid.txt" ] || { echo "stage_corpus.sh: $SRC: no distill.txt.xz / valid.txt" >&2; exit 2; }
mkdir -p .corpus
rm -f .corpus/distill.index.tsv
cp "$SRC"/distill.txt.xz "$SRC"/valid.txt "$SRC"/valid.index.tsv .corpus/
# the training text's index (440 KB) only for the teacher's recipe (device_teacher.sh): a call that
# carries the test programs too has no room to spare under its 64 MiB
[ -n "${FOR_TEACHER:-}" ] && cp "$SRC"/distill.index.tsv .corpus/
REF=$(dirname "$SRC")/reference # the PyTorch reference of the two stages, run beside lizard on the GPU
[ -f "$REF/lizard_two_stage.py" ] && mkdir -p .corpus/reference && cp "$REF"/lizard_two_stage.py .corpus/reference/
chmod -R u+w .corpus
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.corpus/' "$exclude" 2>/dev/null || echo '/.corpus/' >>"$exclude"
du -sh .corpus
