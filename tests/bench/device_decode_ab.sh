#!/usr/bin/env bash
# device_decode_ab.sh - on the GPU machine (binaries from tests/gpu/pack_devout.sh): the GPU suites,
# then batch 1 and 4 decode (or prompts) of the 8B shapes under each of CONFIGS side by side, all in one run on
# one machine; optionally (PROFILE=1) where a prompt's time goes by op (LIZARD_PROFILE=1) at 2K and,
# for the teacher, 32K. A config is environment assignments joined by '+', "-" for the defaults:
#   CONFIGS="- LIZARD_STREAM_TOKENS=4+LIZARD_WINDOW_RING=16 LZ_BIN=base"
# TEST_ENVS: more test_gpu_ops runs, one a config of the same form. A config's LZ_BIN=base runs the
# lizard of .devpack/base.tgz (tests/gpu/pack_base.sh: another commit's, its COMMIT printed) instead.
# PROMPTS (e.g. 2048,32768): prompt throughput instead of decode. PROFILE_CONFIGS, PROFILE_RUNS (variant:length ...): the profiles' list.
# DEADLINE (seconds since the epoch): no bench starts after it, so that a call returns its figures
# before the call's limit. ROUND_FROM: the first round's number (rounds ROUND_FROM..ROUNDS), so that
# callers can interleave rounds of different variants.
set -uo pipefail
source tests/gpu/device_env.sh
if [ -f .devpack/base.tgz ]; then
  rm -rf .devbase && mkdir -p .devbase && tar -C .devbase -xzf .devpack/base.tgz
  [ -f .devbase/COMMIT ] && echo "LZ_BIN=base: commit $(cat .devbase/COMMIT)" # (the figures' commit)
fi
L=.devout/lizard
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  bash tests/gpu/device_check.sh | grep -E "test_gpu_ops:|FAILED|device_check"
  for extra in ${TEST_ENVS:-LIZARD_GEMV_TOKENS=1}; do
    env ${extra//+/ } timeout 300 .devout/test_gpu_ops >"$OUT/gpu_ops2.log" 2>&1
    echo "test_gpu_ops ($extra) rc=$?: $(tail -1 "$OUT/gpu_ops2.log")"
    cat "$OUT/gpu_ops2.log" >>"$OUT/gpu_ops.log"; rm -f "$OUT/gpu_ops2.log"
  done
fi
for round in $(seq "${ROUND_FROM:-1}" "${ROUNDS:-1}"); do
  for v in ${VARIANTS:-teacher hybrid lizard}; do
    for cfg in ${CONFIGS:--}; do
      envs=(); [ "$cfg" = - ] || envs=(${cfg//+/ })
      if [ -n "${DEADLINE:-}" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then echo "past the deadline: $v $cfg round $round skipped"; continue; fi
      bin=$L; for e in "${envs[@]}"; do [ "$e" = LZ_BIN=base ] && bin=.devbase/lizard; done
      rm -f "$OUT/tmp.jsonl" # (a failed run must not leave the previous config's figures under its name)
      if [ -n "${PROMPTS:-}" ]; then what=(--prompt "$PROMPTS" --batch 0)
      else what=(--prompt 0 --batch "${BATCHES:-1,4}" --context "${CONTEXT:-2048}" --steps 64); fi
      env "${envs[@]}" timeout 90 $bin bench --device cuda --shape "llama3-8b-$v" "${what[@]}" \
        --json "$OUT/tmp.jsonl" >/dev/null 2>"$OUT/err.txt" || { echo "bench $v $cfg failed"; tail -2 "$OUT/err.txt"; }
      [ -f "$OUT/tmp.jsonl" ] || { echo "$v $cfg: no figures"; continue; }
      sed "s/^{/{\"variant\": \"$v\", \"config\": \"$cfg\", \"round\": $round, /" "$OUT/tmp.jsonl" >>"$OUT/ab.jsonl"
      printf '%-8s %-52s ' "$v" "$cfg"
      python3 -c 'import json,sys; print("  ".join("%s%d %.1f (%.0f%%)" % ("b" if j["kind"] == "decode" else "p", j["batch"] if j["kind"] == "decode" else j["prompt"], j["tok_s"], 100*j["tok_s"]/j["bound_tok_s"]) for j in map(json.loads, open(sys.argv[1])) if j["kind"] in ("decode", "prompt")))' "$OUT/tmp.jsonl"
    done
  done
done
rm -f "$OUT/tmp.jsonl" "$OUT/err.txt"
if [ "${PROFILE:-0}" = 1 ]; then
  for cfg in ${PROFILE_CONFIGS:--}; do
    envs=(); [ "$cfg" = - ] || envs=(${cfg//+/ })
    for vp in ${PROFILE_RUNS:-hybrid:2048 teacher:2048 lizard:2048 teacher:32768}; do
      v=${vp%%:*} p=${vp##*:}
      env "${envs[@]}" LIZARD_PROFILE=1 timeout 90 $L bench --device cuda --shape "llama3-8b-$v" --prompt "$p" --batch 0 \
        --no-ceilings >"$OUT/tmp.txt" 2>&1
      { echo "== prompt profile $v $p $cfg"; grep -E "prompt|profile|^  " "$OUT/tmp.txt"; } | tee -a "$OUT/profile.txt"
    done
  done
  rm -f "$OUT/tmp.txt"
fi
ls "$OUT"
