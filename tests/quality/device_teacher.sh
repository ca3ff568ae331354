#!/usr/bin/env bash
# device_teacher.sh - on the GPU machine, in one call (tests/quality/README.md): train the teacher
# (teacher-recipe/train_teacher.py), check lizard against HF transformers and HF tokenizers on it
# (check_teacher.py), then run the study (launch/study.py) on it, within DEADLINE seconds of the start.
# Carried: .devpack (tests/gpu/pack_devout.sh: lizard built with CUDA and its libraries) and .corpus
# (FOR_TEACHER=1 tests/quality/stage_corpus.sh: the corpus with its index). Every phase runs under a timeout; a failed phase is reported and the
# next still runs where it can. Back under $OUT (8 files at most, 16 MiB each):
#   teacher.tar   the teacher folder (config, bf16 safetensors, tokenizer, TRAINING.json, TRAINING.log)
#   summary.txt   versions, the training's key lines, every check, the study's progress
#   check.json    check_teacher.py's figures;  study.md, study.jsonl  the study's table and rows
#   logs.tgz      every log, the study's logs and plots (not its models)
# Settings (environment): TEACHER_BUDGET (training seconds, 180), DEADLINE (seconds for the whole
# script, 570), S1_TOKENS / S2_TOKENS (the study's per-stage budgets, 1000000), VALID_BYTES (held-out
# bytes the study measures, 262144; 0: all), TRIALS (passkey trials, 5), DEVICE (the study's, cuda),
# STAGE2_DEVICE (stage 2's, as DEVICE).
set -uo pipefail
source tests/gpu/device_env.sh
START=$SECONDS
TEACHER_BUDGET=${TEACHER_BUDGET:-180} DEADLINE=${DEADLINE:-570}
S1_TOKENS=${S1_TOKENS:-1000000} S2_TOKENS=${S2_TOKENS:-1000000} VALID_BYTES=${VALID_BYTES:-262144} TRIALS=${TRIALS:-5}
DEVICE=${DEVICE:-cuda} STAGE2_DEVICE=${STAGE2_DEVICE:-${DEVICE:-cuda}}
W=/tmp/quality
rm -rf "$W" && mkdir -p "$W/logs"
LZ=$PWD/.devout/lizard
status=0

say_machine
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'tokenizers', tokenizers.__version__)" 2>&1 | tee -a "$OUT/summary.txt"
[ -x "$LZ" ] && [ -f .corpus/distill.txt.xz ] && [ -f .corpus/valid.txt ] ||
  { say "missing: .devout/lizard (carry .devpack) or .corpus/{distill.txt.xz,valid.txt} (carry .corpus)"; exit 2; }

say "== 1. the teacher (budget ${TEACHER_BUDGET} s)"
PYTHONUNBUFFERED=1 timeout -k 10 $((TEACHER_BUDGET + 200)) python3 tests/quality/teacher-recipe/train_teacher.py \
  --train .corpus/distill.txt.xz --valid .corpus/valid.txt --out "$W/teacher" --layers 8 --hidden 256 --heads 4 \
  --kv-heads 2 --ffn 768 --vocab 4096 --seq 1024 --batch 64 --lr 3e-3 --budget "$TEACHER_BUDGET" \
  >"$W/logs/train.log" 2>&1 || { status=1; say "training FAILED: $(tail -3 "$W/logs/train.log")"; }
grep -E '"what": "(data|tokenizer|tokens|model|valid|final|teacher_passkey|compile_failed|note)"' "$W/logs/train.log" |
  tee -a "$OUT/summary.txt"
if [ -f "$W/teacher/model.safetensors" ]; then
  cp "$W/logs/train.log" "$W/teacher/TRAINING.log"
  tar -C "$W" -cf "$OUT/teacher.tar" teacher
  say "teacher.tar: $(du -b "$OUT/teacher.tar" | cut -f1) bytes"
  "$LZ" info --model "$W/teacher" 2>&1 | tee -a "$OUT/summary.txt"

  say "== 2. lizard against HF transformers and tokenizers"
  PYTHONUNBUFFERED=1 timeout -k 10 180 python3 tests/quality/check_teacher.py --lizard "$LZ" --teacher "$W/teacher" \
    --valid .corpus/valid.txt --json "$OUT/check.json" 2>&1 | tee "$W/logs/check.log" | tee -a "$OUT/summary.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  say "== 3. the study ($(left) s left)"
  if [ "$(left)" -gt 90 ]; then
    PYTHONUNBUFFERED=1 timeout -k 10 $(($(left) - 30)) python3 launch/study.py --teacher "$W/teacher" \
      --train .corpus/distill.txt.xz --valid .corpus/valid.txt --results "$W/study" --lizard "$LZ" --device "$DEVICE" \
      --stage2-device "$STAGE2_DEVICE" \
      --stage1-tokens "$S1_TOKENS" --stage2-tokens "$S2_TOKENS" --valid-bytes "$VALID_BYTES" --trials "$TRIALS" \
      --label "the teacher of tests/quality (trained ${TEACHER_BUDGET} s), one GPU" 2>&1 |
      tee "$W/logs/study.log" | tee -a "$OUT/summary.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  else
    status=1; say "no time left for the study"
  fi
  for f in study.md study.jsonl; do [ -f "$W/study/$f" ] && cp "$W/study/$f" "$OUT/"; done
fi

say "== packing ($(left) s left)"
tar -C "$W" -czf "$OUT/logs.tgz" --exclude=study/models --exclude=study/data logs $([ -d "$W/study" ] && echo study)
say "device_teacher: status $status after $((SECONDS - START)) s"
exit $status
