#!/usr/bin/env bash
# device_stage2.sh - on the GPU machine, in one call: stage 2 (lizard finetune) on the GPU checked and
# measured. Carried: .devpack (tests/gpu/pack_devout.sh) and .corpus (tests/quality/stage_corpus.sh,
# which also copies the PyTorch reference of the two stages). Phases, each under a timeout; a failed
# phase is reported and the next still runs:
#   1. the backward op table on the GPU against the CPU reference (test_gpu_backward,
#      test_gpu_backward_attn), the stage-1 kernels (test_gpu_train), the whole training step on the
#      GPU against finite differences and against the CPU (test_finetune cuda);
#   2. stage 1 then stage 2 of the 50% hybrid and the pure Lizard model of tests/quality/teacher at
#      S1_TOKENS + S2_TOKENS, perplexity at 1,024 before and after (VALID_BYTES of valid.txt);
#   3. the reference (lizard_two_stage.py) at the same stage-2 settings, for its tokens/s on this GPU;
#   4. `lizard bench --train` on the LLaMA-3-8B hybrid shape at 2K tokens beside a PyTorch LoRA loop
#      (tests/bench/torch_lora_train.py) on the same GPU;
#   5. where the step's time goes: a finetune step of the 50% hybrid timed alone, then three steps
#      under Nsight Compute (kernel durations only), then the 8B hybrid's bench --train step, each
#      summed per kernel name (tests/gpu/ncu_summary.py; ncu-kernels.txt).
# Back under $OUT: summary.txt, results.jsonl, logs.tgz.
set -uo pipefail
source tests/gpu/device_env.sh
S1_TOKENS=${S1_TOKENS:-2000000} S2_TOKENS=${S2_TOKENS:-2000000} VALID_BYTES=${VALID_BYTES:-262144}
PHASES=${PHASES:-1234} DEADLINE=${DEADLINE:-570} # P4_TIMEOUT: each run of phase 4 (240 s)
START=$SECONDS
W=/tmp/stage2
rm -rf "$W" && mkdir -p "$W/logs"
LZ=$PWD/.devout/lizard
status=0

say_machine
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  2>&1 | tee -a "$OUT/summary.txt"

if phase 1; then
  say "== 1. GPU tests"
  for t in test_gpu_backward test_gpu_backward_attn test_gpu_train; do
    if [ -x ".devout/$t" ]; then
      timeout -k 5 "${TEST_TIMEOUT:-45}" ".devout/$t" >"$W/logs/$t.log" 2>&1
      rc=$?
      say "$t: exit $rc; $(grep -E 'checks|worst|largest' "$W/logs/$t.log" | tail -3 | tr '\n' ' ')"
      [ $rc -eq 0 ] || { status=1; grep -E 'FAIL|failed' "$W/logs/$t.log" | head -20 | tee -a "$OUT/summary.txt"; }
    else
      say "$t: not in the pack"
    fi
  done
  LZ_FIXTURES=$PWD/tests/fixtures timeout -k 5 "$((${TEST_TIMEOUT:-45} + 15))" .devout/test_finetune cuda >"$W/logs/test_finetune.log" 2>&1
  rc=$?
  say "test_finetune cuda: exit $rc"
  grep -E 'test_finetune' "$W/logs/test_finetune.log" | tail -8 | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || status=1
fi

T=tests/quality/teacher
head -c "$VALID_BYTES" .corpus/valid.txt | sed '$d' >"$W/valid.txt" # whole lines
TRAIN=$W/train.txt # lizard reads plain text; the device image may lack the xz program
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
  .corpus/distill.txt.xz "$TRAIN"
eval_ppl() { # model -> perplexity at 1,024 on the first VALID_BYTES of valid.txt
  "$LZ" eval --model "$1" --text "$W/valid.txt" --ppl-context 1024 --json --device cuda --allow-long-context \
    2>>"$W/logs/eval.err" | python3 -c "import json,sys; print(json.load(sys.stdin)['perplexity'][0]['ppl'])"
}
if phase 2 "${PHASE2_MIN:-120}"; then
  say "== 2. stage 1 + stage 2 on the GPU ($S1_TOKENS + $S2_TOKENS tokens)"
  say "teacher ppl@1024: $(eval_ppl $T)"
  for cfg in ${PHASE2_CONFIGS:-hybrid-50:0,2,4,6 lizard-0:none}; do
    name=${cfg%%:*} layers=${cfg#*:}
    timeout -k 5 150 "$LZ" distill --teacher $T --data "$TRAIN" --out "$W/$name-s1" --tokens "$S1_TOKENS" \
      --seq-len 1024 --batch 8 --device cuda --softmax-layers "$layers" --log "$W/logs/$name-s1.jsonl" \
      >"$W/logs/$name-s1.out" 2>"$W/logs/$name-s1.err" || { status=1; say "$name distill FAILED: $(tail -2 "$W/logs/$name-s1.err")"; continue; }
    say "$name stage 1: $(grep -o '[0-9]* tok/s' "$W/logs/$name-s1.err" | tail -1), ppl@1024 $(eval_ppl "$W/$name-s1")"
    timeout -k 5 180 "$LZ" finetune --model "$W/$name-s1" --data "$TRAIN" --out "$W/$name-s2" \
      --tokens "$S2_TOKENS" --seq-len 1024 --batch 8 --lr 5e-4 --device cuda --log "$W/logs/$name-s2.jsonl" \
      --log-every 50 >"$W/logs/$name-s2.out" 2>"$W/logs/$name-s2.err" ||
      { status=1; say "$name finetune FAILED: $(tail -3 "$W/logs/$name-s2.err")"; continue; }
    grep -E "tok/s|held-out" "$W/logs/$name-s2.err" | tail -4 | tee -a "$OUT/summary.txt"
    say "$name stage 2: ppl@1024 $(eval_ppl "$W/$name-s2")"
  done
fi

if phase 3 150 && [ -f .corpus/reference/lizard_two_stage.py ]; then
  say "== 3. the PyTorch reference's stage 2 on this GPU (tokens/s)"
  PYTHONUNBUFFERED=1 timeout -k 5 150 python3 .corpus/reference/lizard_two_stage.py --teacher $T \
    --train .corpus/distill.txt.xz --eval valid="$W/valid.txt" --configs "hybrid-50-alt:0,2,4,6/lizard-0:none" \
    --s1 200000 --s2 1000000 --s2-lr 5e-4 --train-bytes 12000000 >"$W/logs/reference.jsonl" 2>"$W/logs/reference.err" ||
    { status=1; say "reference FAILED: $(tail -2 "$W/logs/reference.err")"; }
  grep -E '"what": "eval"' "$W/logs/reference.jsonl" | tee -a "$OUT/summary.txt"
fi

if phase 4 120; then
  say "== 4. the 8B hybrid shape at 2K tokens: lizard bench --train beside a PyTorch LoRA loop"
  timeout -k 5 "${P4_TIMEOUT:-240}" "$LZ" bench --shape llama3-8b-hybrid --train --train-seq 2048 --train-batch 1 --steps 6 \
    --device cuda --json "$W/bench-train-8b.jsonl" >"$W/logs/bench-train.out" 2>&1 || status=1
  tail -3 "$W/logs/bench-train.out" | tee -a "$OUT/summary.txt"
  PYTHONUNBUFFERED=1 timeout -k 5 "${P4_TIMEOUT:-240}" python3 tests/bench/torch_lora_train.py --shape llama3-8b --seq 2048 --batch 1 \
    --steps 6 >"$W/torch-lora-8b.jsonl" 2>"$W/logs/torch-lora.err" || { status=1; say "torch: $(tail -2 "$W/logs/torch-lora.err")"; }
  tee -a "$OUT/summary.txt" <"$W/torch-lora-8b.jsonl"
  timeout -k 5 "${P4_TIMEOUT:-120}" "$LZ" bench --shape llama3-8b-lizard --train --train-seq 2048 --train-batch 1 --steps 6 \
    --device cuda --json "$W/bench-train-8b-lizard.jsonl" >"$W/logs/bench-train-lizard.out" 2>&1 || status=1
  tail -1 "$W/logs/bench-train-lizard.out" | tee -a "$OUT/summary.txt"
fi

if phase 5 60 && [ -n "$NCU" ]; then
  say "== 5. the hybrid's finetune step: wall time, and kernel time per name under ncu"
  P=$W/profile
  mkdir -p "$P"
  timeout -k 5 60 "$LZ" distill --teacher $T --data "$TRAIN" --out "$P/s1" --tokens 16384 --seq-len 1024 --batch 8 \
    --device cuda --softmax-layers 0,2,4,6 >"$W/logs/profile-s1.out" 2>&1 || say "profile distill FAILED"
  timeout -k 5 60 "$LZ" finetune --model "$P/s1" --data "$TRAIN" --out "$P/s2" --tokens 163840 --seq-len 1024 \
    --batch 8 --lr 5e-4 --device cuda --log "$W/logs/profile-s2.jsonl" --log-every 5 >"$W/logs/profile-s2.out" 2>&1
  grep -E "tok/s" "$W/logs/profile-s2.out" | tail -2 | tee -a "$OUT/summary.txt"
  timeout -k 5 "$(($(left) - 10))" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    "$LZ" finetune --model "$P/s1" --data "$TRAIN" --out "$P/s2n" --tokens 24576 --seq-len 1024 --batch 8 \
    --lr 5e-4 --device cuda >"$W/logs/ncu.csv" 2>"$W/logs/ncu.err" || say "ncu: $(tail -2 "$W/logs/ncu.err")"
  python3 tests/gpu/ncu_summary.py "$W/logs/ncu.csv" "the hybrid's finetune, 3 steps + load" >"$OUT/ncu-kernels.txt"
  if [ "$(left)" -ge 60 ]; then # the 8B hybrid's training step: one warm-up step and one timed
    timeout -k 5 "$(($(left) - 10))" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$LZ" bench --shape llama3-8b-hybrid --train --train-seq 2048 --train-batch 1 --steps 1 --device cuda \
      >"$W/logs/ncu-8b.csv" 2>"$W/logs/ncu-8b.err" || say "ncu 8B: $(tail -2 "$W/logs/ncu-8b.err")"
    python3 tests/gpu/ncu_summary.py "$W/logs/ncu-8b.csv" "the 8B hybrid's training step, 2 steps + load" \
      >>"$OUT/ncu-kernels.txt"
  fi
  head -12 "$OUT/ncu-kernels.txt" | tee -a "$OUT/summary.txt"
fi

cat "$W"/*.jsonl >"$OUT/results.jsonl" 2>/dev/null
tar -C "$W" -czf "$OUT/logs.tgz" logs $(cd "$W" && ls -d *-s2 2>/dev/null | sed 's|$|/config.json|') 2>/dev/null
say "status $status"
exit $status
