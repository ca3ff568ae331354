#!/usr/bin/env bash
# device_all.sh - on the GPU machine, in one call of at most ten minutes: stage 2's GPU tests
# (tests/gpu/device_stage2.sh, phase 1), then the study in the time left (tests/quality/device_study.sh).
# TEST_SECONDS, TOTAL_SECONDS, TEST_TIMEOUT (each test's) and STUDY_ARGS share the ten minutes.
# Carried: .devpack (tests/gpu/pack_devout.sh with test_gpu_train, test_gpu_backward,
# test_gpu_backward_attn and test_finetune) and .corpus (tests/quality/stage_corpus.sh): together with the tree, 218 KB under a call's 64 MiB.
set -uo pipefail
START=$SECONDS
PHASES=1 DEADLINE=${TEST_SECONDS:-150} bash tests/gpu/device_stage2.sh
tests=$?
DEADLINE=$((${TOTAL_SECONDS:-585} - (SECONDS - START))) bash tests/quality/device_study.sh
study=$?
echo "device_all: tests $tests, study $study after $((SECONDS - START)) s" | tee -a "${OUT:-/tmp/out}/summary.txt"
exit $((tests || study))
