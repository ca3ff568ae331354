#!/usr/bin/env bash
# study.sh - the linearization study in one command: the teacher's scores, then stage 1, evaluation,
# stage 2 and evaluation for 0%, 25% and 50% retained softmax layers. Flags: launch/study.sh --help;
# method and results: docs/quality.md. The driver is launch/study.py (Python standard library only).
exec python3 "$(dirname "$0")/study.py" "$@"
