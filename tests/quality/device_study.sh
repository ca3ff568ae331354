#!/usr/bin/env bash
# device_study.sh - on the GPU machine, in one call: the linearization study (launch/study.py, its
# defaults: 10M + 10M tokens per configuration, 0/25/50% retained and 50% by error, passkey to 8,192)
# on tests/quality/teacher, within DEADLINE seconds of the start. Carried: .devpack
# (PACK_TESTS= tests/gpu/pack_devout.sh: lizard alone) and .corpus (tests/quality/stage_corpus.sh).
# Back under $OUT: summary.txt, study-results.tgz (study.md, study.jsonl, plots, logs, and the same for
# each BEYOND run), default-model.tgz (the stage-2 model of DEFAULT_CONFIG, the quickstart's default, in
# launch/default-model's layout: untar it in launch/), stage1-NAME.tgz (below).
# Settings (environment): DEADLINE (570), VALID_BYTES (262144; 0: all of valid.txt), TRIALS (5),
# STUDY_ARGS (more launch/study.py flags), DEFAULT_CONFIG (hybrid-50-alt), KEEP_STAGE1 (configurations
# whose stage-1 models come back, each as stage1-NAME.tgz: untarred into .stage1/ and carried, a later
# call's STUDY_ARGS="--stage1-from .stage1 --configs ..." trains stage 2 alone; default hybrid-50-alt
# lizard-0).
# BEYOND: longer or different stage-2 runs on the study's own stage-1 models, all at once in the time
# left, each "NAME:STAGE2_TOKENS:CONFIGS:STAGE2 FLAGS" (';' between runs); each lands in
# beyond-NAME/ inside study-results.tgz and, for DEFAULT_CONFIG, in beyond-NAME-model.tgz.
set -uo pipefail
source tests/gpu/device_env.sh
START=$SECONDS
DEADLINE=${DEADLINE:-570} VALID_BYTES=${VALID_BYTES:-262144} TRIALS=${TRIALS:-5} STUDY_ARGS=${STUDY_ARGS:-}
DEFAULT_CONFIG=${DEFAULT_CONFIG:-hybrid-50-alt} KEEP_STAGE1=${KEEP_STAGE1-hybrid-50-alt lizard-0}
W=/tmp/study
rm -rf "$W" && mkdir -p "$W"
LZ=$PWD/.devout/lizard

say_machine
[ -x "$LZ" ] && [ -f .corpus/distill.txt.xz ] && [ -f .corpus/valid.txt ] ||
  { say "missing: .devout/lizard (carry .devpack) or .corpus/{distill.txt.xz,valid.txt} (carry .corpus)"; exit 2; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
study() { # SECONDS RESULTS LABEL [launch/study.py flags]: a study of the teacher on the carried corpus
  local secs=$1 results=$2 label=$3
  shift 3
  PYTHONUNBUFFERED=1 timeout -k 10 "$secs" python3 launch/study.py --teacher tests/quality/teacher \
    --train .corpus/distill.txt.xz --valid .corpus/valid.txt --results "$results" --lizard "$LZ" --device cuda \
    --valid-bytes "$VALID_BYTES" --trials "$TRIALS" --label "${label}one $GPU, $(git log -1 --format=%h 2>/dev/null)" "$@"
}
# shellcheck disable=SC2086
study $(($(left) - 25)) "$W" "" $STUDY_ARGS 2>&1 | tee "$W/study.log" | tee -a "$OUT/summary.txt"
status=${PIPESTATUS[0]}
keep_model() { # FOLDER NAME [CONFIG [STAGE]]: a model of FOLDER/models as $OUT/NAME.tgz, its own tensors
  # only, the rest linked to the teacher (launch/split_model.py; untar in a folder two levels below the
  # repository, e.g. launch/ or .stage1/), or whole where it cannot link (a model whose MLP trained)
  local model=${3:-$DEFAULT_CONFIG}-${4:-s2}
  [ -f "$1/models/$model/config.json" ] || return 0
  rm -rf ".keep/$model" && mkdir -p .keep # (two levels below the repository, as where it is untarred)
  if python3 launch/split_model.py "$1/models/$model" tests/quality/teacher ".keep/$model" >/dev/null 2>"$W/split.err"; then
    tar -C .keep -czf "$OUT/$2.tgz" "$model"
  else
    say "$2: kept whole ($(cat "$W/split.err"))"
    tar -C "$1/models" -czf "$OUT/$2.tgz" --exclude=finetune_state "$model"
  fi
  say "$2.tgz: $(du -b "$OUT/$2.tgz" | cut -f1) bytes"
}
keep_model "$W" default-model
for c in $KEEP_STAGE1; do keep_model "$W" "stage1-$c" "$c" s1; done
if [ -n "${BEYOND:-}" ] && [ "$(left)" -ge 90 ]; then
  say "== beyond the reference budget ($(left) s left): $BEYOND"
  IFS=';' read -r -a runs <<<"$BEYOND"
  for r in "${runs[@]}"; do
    name=${r%%:*} rest=${r#*:}
    tokens=${rest%%:*} rest=${rest#*:}
    configs=${rest%%:*} flags=${rest#*:}
    study $(($(left) - 20)) "$W/beyond-$name" "beyond $name: " --stage1-from "$W/models" --configs "$configs" \
      --stage2-tokens "$tokens" --stage2-args="$flags" >"$W/beyond-$name.log" 2>&1 &
  done
  wait
  for r in "${runs[@]}"; do
    name=${r%%:*}
    cat "$W/beyond-$name.log" >>"$OUT/summary.txt"
    keep_model "$W/beyond-$name" "beyond-$name-model"
  done
fi
# one archive for the tables, rows, plots and logs (a call brings back at most 8 files)
tar -C "$W" -czf "$OUT/study-results.tgz" --exclude=models --exclude=data --exclude='*.safetensors' \
  $(cd "$W" && ls -d study.md study.jsonl study.log logs *.svg beyond-* 2>/dev/null)
say "device_study: status $status after $((SECONDS - START)) s"
exit "$status"
