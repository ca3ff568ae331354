#!/usr/bin/env bash
# device_scaleout.sh - on a machine with 4 H200s (binaries built elsewhere, in
# .devout/): GPU op tests; greedy generation through 2 and 4 GPU stages
# against one GPU; then `lizard bench` for the LLaMA-3-8B shapes on 1 and 2
# GPUs and the LLaMA-3-70B shapes on 4 GPUs. Logs and JSON lines to $OUT.
#   PART=check|bench8b|bench70b|all (default all); RANKS70=8 on an 8-GPU machine (default 4);
#   BATCHES (8B decode batches, default 1,64,256; add 128,512 to hold 64 or 256 rows per stage on 2 GPUs),
#   PROMPT (8B prompt length, default 32768; 0 skips it)
set -uo pipefail
source tests/gpu/device_env.sh
export NCCL_NVLS_ENABLE=0
PART=${PART:-all}
L=$PWD/.devout/lizard
mpi() { local n=$1; shift; timeout "${T:-300}" mpirun --allow-run-as-root -np "$n" --bind-to none -x LD_LIBRARY_PATH \
  -x NCCL_NVLS_ENABLE "$@"; }
log=$OUT/scaleout.txt
{ date -u; nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; git log -1 --format=%h 2>/dev/null; } >>"$log"

if [ "$PART" = check ] || [ "$PART" = all ]; then
  echo "== gpu ops" >>"$log"
  .devout/test_gpu_ops >>"$log" 2>&1; echo "test_gpu_ops rc=$?" >>"$log"
  echo "== greedy generation: 1 GPU vs 2 and 4 stages (groups of rows circulating)" >>"$log"
  $L init --config tiny-hybrid --out /tmp/tiny >/dev/null 2>&1
  printf 'the cat sat\nhello there friend\na\nlizards are fast and small\nwhy\nsix\nseven prompts\nand eight\n' >/tmp/p8.txt
  for dt in fp32 bf16; do
    $L generate --model /tmp/tiny --prompts-file /tmp/p8.txt --device cuda --dtype $dt --max-tokens 24 --format json \
      --ignore-eos >/tmp/g1 2>>"$log"
    for n in 2 4; do
      for pl in balanced by-type; do
        T=120 mpi $n $L generate --model /tmp/tiny --prompts-file /tmp/p8.txt --device cuda --dtype $dt --max-tokens 24 \
          --format json --ignore-eos --placement $pl >/tmp/g$n 2>>"$log"
        echo "$dt np $n $pl: rc=$? $(cmp -s /tmp/g1 /tmp/g$n && echo same ids || echo DIFFERENT ids)" >>"$log"
      done
    done
  done
  for c in hybrid50 llama3; do
    M=tests/fixtures/$c/model
    ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('tests/fixtures/$c/expect.json'))['prompt_ids'])))")
    g1=$($L generate --model $M --ids $ids --device cuda --dtype fp32 --max-tokens 16 --format json --ignore-eos 2>/dev/null)
    g4=$(T=120 mpi 4 $L generate --model $M --ids $ids --device cuda --dtype fp32 --max-tokens 16 --format json \
         --ignore-eos 2>>"$log")
    [ "$g1" = "$g4" ] && echo "$c greedy fp32 on 4 GPUs: same ids" >>"$log" || echo "$c greedy: $g1 vs $g4" >>"$log"
  done
fi

if [ "$PART" = bench8b ] || [ "$PART" = all ]; then
  echo "== LLaMA-3-8B shapes: 1 GPU vs 2 GPUs" >>"$log"
  for v in teacher hybrid lizard; do
    $L bench --device cuda --shape llama3-8b-$v --prompt ${PROMPT:-32768} --batch ${BATCHES:-1,64,256} --context 2048 --steps 24 \
      --json /tmp/b8-$v-1.jsonl >>"$log" 2>&1
    for pl in balanced by-type; do
      [ $v != hybrid ] && [ $pl = by-type ] && continue
      mpi 2 $L bench --device cuda --shape llama3-8b-$v --prompt ${PROMPT:-32768} --batch ${BATCHES:-1,64,256} --context 2048 --steps 24 --no-ceilings \
        --placement $pl --json /tmp/b8-$v-2-$pl.jsonl >>"$log" 2>&1
      echo "rc=$?" >>"$log"
    done
  done
fi

if [ "$PART" = bench70b ] || [ "$PART" = all ]; then
  R70=${RANKS70:-4}
  echo "== LLaMA-3-70B shapes on $R70 GPUs" >>"$log"
  for v in lizard hybrid teacher; do
    for pl in balanced by-type; do
      [ $v != hybrid ] && [ $pl = by-type ] && continue
      mpi "$R70" $L bench --device cuda --shape llama3-70b-$v --prompt 32768 --batch 1,64,256 --context 4096,32768 --steps 16 \
        --placement $pl --json /tmp/b70-$v-$R70-$pl.jsonl >>"$log" 2>&1
      echo "rc=$?" >>"$log"
    done
  done
fi
# one file per part: each JSON line tagged with the run it came from
for f in /tmp/b8-*.jsonl /tmp/b70-*.jsonl; do
  [ -e "$f" ] || continue
  run=$(basename "$f" .jsonl)
  sed "s/^{/{\"run\": \"$run\", /" "$f" >>"$OUT/${run%%-*}.jsonl"
done
date -u >>"$log"
