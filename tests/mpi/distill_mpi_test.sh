#!/usr/bin/env bash
# distill_mpi_test.sh LIZARD - `lizard distill` under mpirun on the CPU backend:
# each rank trains the layers it owns while the teacher's activations pass
# through; the weights (and the run's state) are byte-identical to one process
# for 1, 2 and 3 ranks and an interleaved hand-written plan; a run stopped
# under 2 ranks resumes in one process to the same bytes; a plan for the
# wrong number of ranks ends the job with exit 2.
set -u
LIZARD=$1
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, require_mpirun, run
require_mpirun

"$LIZARD" init --config tiny-teacher --out "$TMP/teacher" --seed 2 >/dev/null 2>&1 || bad "init"
python3 -c "
import struct
ids = [(i * 37 + 11) % 500 for i in range(1024)]
h = \"{'descr': '<i4', 'fortran_order': False, 'shape': (1024,), }\"
h += ' ' * ((64 - (10 + len(h) + 1) % 64) % 64) + '\n'
open('$TMP/ids.npy', 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + struct.pack('<1024i', *ids))"
S=(--teacher "$TMP/teacher" --data "$TMP/ids.npy" --seq-len 32 --batch 2 --tokens 640 --window 8 --feature-dim 8
   --meta-tokens 2 --lr 1e-2 --eval-batches 1 --log-every 1000 --seed 3)
"$LIZARD" distill "${S[@]}" --out "$TMP/one" 2>/dev/null && ok || bad "one process"
for n in 1 2 3; do
    run $n "$LIZARD" distill "${S[@]}" --out "$TMP/np$n" >/dev/null 2>"$TMP/err" || { bad "np $n: $(tail -2 "$TMP/err")"; continue; }
    cmp -s "$TMP/one/model.safetensors" "$TMP/np$n/model.safetensors" && ok || bad "np $n: weights differ"
    cmp -s "$TMP/one/distill_state/tensors.safetensors" "$TMP/np$n/distill_state/tensors.safetensors" &&
        cmp -s "$TMP/one/distill_state/state.json" "$TMP/np$n/distill_state/state.json" && ok || bad "np $n: state differs"
done
printf '# interleaved\nrank 0: embed 0, 2\nrank 1: 1, 3 head\n' >"$TMP/plan.txt"
run 2 "$LIZARD" distill "${S[@]}" --out "$TMP/inter" --plan "$TMP/plan.txt" >/dev/null 2>"$TMP/err" \
    && cmp -s "$TMP/one/model.safetensors" "$TMP/inter/model.safetensors" && ok || bad "interleaved plan: $(tail -2 "$TMP/err")"
run 2 "$LIZARD" distill "${S[@]}" --out "$TMP/res" --stop-at-step 4 >/dev/null 2>&1 && ok || bad "np 2 stop"
"$LIZARD" distill "${S[@]}" --out "$TMP/res" --resume >/dev/null 2>&1 \
    && cmp -s "$TMP/one/model.safetensors" "$TMP/res/model.safetensors" && ok || bad "np 2 stop, resumed alone: differs"
printf 'rank 0: embed 0-1\nrank 1: 2\nrank 2: 3 head\n' >"$TMP/plan3.txt"
run 2 "$LIZARD" distill "${S[@]}" --out "$TMP/bad" --plan "$TMP/plan3.txt" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] && grep -q "3 ranks, but mpirun started 2" "$TMP/err" && ok || bad "plan for 3 ranks under 2: rc $rc $(cat "$TMP/err")"

echo "distill_mpi_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
