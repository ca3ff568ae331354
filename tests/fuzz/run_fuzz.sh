#!/usr/bin/env bash
# run_fuzz.sh - runs each libFuzzer target for SECONDS on a temporary copy of its seed corpus.
#   usage: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS
#   BUILD_DIR: configured with -DLIZARD_FUZZ=ON -DCMAKE_C_COMPILER=clang, targets built.
# The repository is never written to; a crash leaves its reproducer in a kept
# temporary folder (printed) and makes the script exit non-zero.
set -euo pipefail

if [[ $# -ne 2 || ! "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build_dir=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)

failed=0
for name in safetensors config tokenizer_load tokenizer_encode plan session serve_request adapter train_state; do
  bin="$build_dir/tests/fuzz/fuzz_$name"
  if [[ ! -x "$bin" ]]; then
    echo "run_fuzz: $bin not built (cmake --build $build_dir --target fuzz_$name)" >&2
    exit 2
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/lz_fuzz_${name}_XXXXXX")
  mkdir "$work/corpus" "$work/artifacts"
  cp "$here/corpus/$name/"* "$work/corpus/"
  echo "run_fuzz: fuzz_$name for ${seconds}s in $work"
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$work/artifacts/" "$work/corpus" > "$work/log.txt" 2>&1; then
    tail -n 12 "$work/log.txt" | grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)' || true
    rm -rf "$work"
  else
    echo "run_fuzz: fuzz_$name FAILED; log and reproducer kept in $work" >&2
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$work/log.txt" >&2 || tail -n 30 "$work/log.txt" >&2
    failed=1
  fi
done
exit $failed
