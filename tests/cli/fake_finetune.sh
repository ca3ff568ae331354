#!/usr/bin/env bash
# fake_finetune.sh LIZARD ARGS... - LIZARD, except that `finetune --model A --out B --log F ...` copies
# folder A to B and writes one log line: the study's stage-2 path, tested before `lizard finetune` exists.
LIZARD=$1; shift
[ "${1:-}" = finetune ] || exec "$LIZARD" "$@"
shift
[ "${1:-}" = --help ] && { echo "usage: lizard finetune (test stand-in)"; exit 0; }
model= out= log=
while [ $# -gt 0 ]; do
    case $1 in --model) model=$2 ;; --out) out=$2 ;; --log) log=$2 ;; esac
    shift 2
done
[ -d "$model" ] && [ -n "$out" ] || { echo "fake finetune: --model and --out needed" >&2; exit 2; }
cp -r "$model" "$out" && echo '{"step": 1, "loss": 1.0}' >"${log:-/dev/null}"
