#!/usr/bin/env bash
# device_study.sh - on the GPU machine, in one call: the linearization study (launch/study.py, its
# defaults: 10M + 10M tokens per configuration, 0/25/50% retained and 50% by error, passkey to 8,192)
# on tests/quality/teacher, within DEADLINE seconds of the start. Carried: .devpack
# (PACK_TESTS= tests/gpu/pack_devout.sh: lizard alone) and .corpus (tests/quality/stage_corpus.sh).
# Back under $OUT: summary.txt, study.md, study.jsonl, study-logs.tgz (logs, plots, the stage-2 models'
# configs and logs), default-model.tar (the stage-2 model of DEFAULT_CONFIG, the quickstart's default).
# Settings (environment): DEADLINE (570), VALID_BYTES (262144; 0: all of valid.txt), TRIALS (5),
# STUDY_ARGS (more launch/study.py flags), DEFAULT_CONFIG (hybrid-50-alt).
set -uo pipefail
source tests/gpu/device_env.sh
START=$SECONDS
DEADLINE=${DEADLINE:-570} VALID_BYTES=${VALID_BYTES:-262144} TRIALS=${TRIALS:-5} STUDY_ARGS=${STUDY_ARGS:-}
DEFAULT_CONFIG=${DEFAULT_CONFIG:-hybrid-50-alt}
W=/tmp/study
rm -rf "$W" && mkdir -p "$W"
LZ=$PWD/.devout/lizard
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
left() { echo $((DEADLINE - (SECONDS - START))); }

say "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
git log -1 --format='commit %H %s' 2>/dev/null | tee -a "$OUT/summary.txt"
date -u +%Y-%m-%dT%H:%MZ | tee -a "$OUT/summary.txt"
[ -x "$LZ" ] && [ -f .corpus/distill.txt.xz ] && [ -f .corpus/valid.txt ] ||
  { say "missing: .devout/lizard (carry .devpack) or .corpus/{distill.txt.xz,valid.txt} (carry .corpus)"; exit 2; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 timeout -k 10 $(($(left) - 25)) python3 launch/study.py --teacher tests/quality/teacher \
  --train .corpus/distill.txt.xz --valid .corpus/valid.txt --results "$W" --lizard "$LZ" --device cuda \
  --valid-bytes "$VALID_BYTES" --trials "$TRIALS" --label "one $GPU, $(git log -1 --format=%h 2>/dev/null)" \
  $STUDY_ARGS 2>&1 | tee "$W/study.log" | tee -a "$OUT/summary.txt"
status=${PIPESTATUS[0]}
for f in study.md study.jsonl; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/"; done
if [ -f "$W/models/$DEFAULT_CONFIG-s2/config.json" ]; then
  tar -C "$W/models" -cf "$OUT/default-model.tar" "$DEFAULT_CONFIG-s2"
  say "default-model.tar: $(du -b "$OUT/default-model.tar" | cut -f1) bytes"
fi
tar -C "$W" -czf "$OUT/study-logs.tgz" --exclude=models --exclude=data logs study.log $(cd "$W" && ls *.svg 2>/dev/null)
say "device_study: status $status after $((SECONDS - START)) s"
exit "$status"
