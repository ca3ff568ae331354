#!/usr/bin/env bash
# study_test.sh LIZARD SRC MODE - launch/study.sh end to end on the tiny presets with tiny budgets:
# a row for every configuration and stage, finite numbers, the Markdown table, both plots parse as SVG,
# --update-docs fills docs/quality.md's study markers and docs/img/.
#   MODE plain:  this build's lizard (stage 2 rows say "not available" where it has no finetune).
#   MODE stage2: a lizard whose `finetune` copies its model folder (tests/cli/fake_finetune.sh), so
#                that the stage-2 path of the study runs (evaluation of the stage-2 folder, its rows).
set -u
LIZARD=$1
SRC=$2
MODE=$3
. "$(dirname "$0")/../test_lib.sh" # TMP, ok, bad, expect_error

"$LIZARD" init --config tiny-teacher --out "$TMP/teacher" --seed 1 >/dev/null 2>&1 && ok || bad "init tiny-teacher"
python3 "$SRC/tests/cli/word_text.py" 1 6000 "$TMP/train.txt"
python3 "$SRC/tests/cli/word_text.py" 2 600 "$TMP/valid.txt"
RUN=$LIZARD
if [ "$MODE" = stage2 ]; then
    RUN=$TMP/lizard-with-finetune
    printf '#!/usr/bin/env bash\nexec bash %q %q "$@"\n' "$SRC/tests/cli/fake_finetune.sh" "$LIZARD" >"$RUN"
    chmod +x "$RUN"
fi
mkdir -p "$TMP/docs" && cp "$SRC/docs/quality.md" "$TMP/docs/"
bash "$SRC/launch/study.sh" --teacher "$TMP/teacher" --train "$TMP/train.txt" --valid "$TMP/valid.txt" \
    --results "$TMP/res" --lizard "$RUN" --device cpu --stage1-tokens 640 --stage2-tokens 640 --seq-len 32 \
    --batch 2 --stage1-args "--feature-dim 8 --window 8 --lr 1e-2 --eval-batches 1" --ppl-contexts 64,128 \
    --passkey-contexts 200,300 --trials 1 --label "smoke run" --update-docs --docs "$TMP/docs" \
    >"$TMP/study.out" 2>&1 && ok || bad "study.sh: $(tail -5 "$TMP/study.out")"

python3 - "$TMP/res" "$TMP/docs" "$MODE" "$LIZARD" <<'PY' && ok || bad "study results"
import json, math, os, subprocess, sys
import xml.etree.ElementTree as ET
res, docs, mode, lizard = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{res}/study.jsonl")]
want = [("teacher", "teacher")] + [(c, s) for c in ("lizard-0", "hybrid-25", "hybrid-50-alt", "hybrid-50-err")
                                   for s in ("stage1", "stage2")]
assert [(r["config"], r["stage"]) for r in rows] == want, [(r["config"], r["stage"]) for r in rows]
has_finetune = subprocess.run([lizard, "finetune", "--help"], capture_output=True).returncode == 0
layers = {"teacher": [0, 1, 2, 3], "lizard-0": [], "hybrid-25": [0], "hybrid-50-alt": [0, 2]}
for r in rows:
    if r["stage"] == "stage2" and mode == "plain" and not has_finetune:
        assert r["status"] == "not available", r
        continue
    assert r["status"] == "ok", r
    assert layers.get(r["config"], r["softmax_layers"]) == r["softmax_layers"], r
    assert len(r["softmax_layers"]) == (2 if r["config"] == "hybrid-50-err" else len(layers[r["config"]])), r
    assert abs(r["retained"] - len(r["softmax_layers"]) / 4) < 1e-12, r
    assert sorted(r["ppl"]) == ["128", "64"] and all(math.isfinite(v) and v > 1 for v in r["ppl"].values()), r
    assert all(t > 0 for t in r["ppl_tokens"].values()), r
    assert sorted(r["passkey"]) == ["200", "300"] and all(0 <= v <= 1 for v in r["passkey"].values()), r
    assert os.path.isfile(os.path.join(res, r["model"], "config.json")), r
if mode == "stage2":  # the fake stage 2 copies its input: the same scores as stage 1
    by = {(r["config"], r["stage"]): r for r in rows}
    for c in ("lizard-0", "hybrid-25", "hybrid-50-alt", "hybrid-50-err"):
        assert by[(c, "stage2")]["ppl"] == by[(c, "stage1")]["ppl"], c
        assert os.path.isfile(f"{res}/logs/{c}-stage2.jsonl"), c
md = open(f"{res}/study.md").read()
lines = [l for l in md.splitlines() if l.startswith("| ")]
assert md.startswith("smoke run: ") and len(lines) == 1 + len(rows), md
assert all(l.count("|") == lines[0].count("|") for l in lines), md
for name in ("study-ppl.svg", "study-passkey.svg"):
    for path in (f"{res}/{name}", f"{docs}/img/{name}"):
        root = ET.parse(path).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg", (path, root.tag)
        lines_drawn = root.findall("{http://www.w3.org/2000/svg}polyline")
        assert lines_drawn, path
passkey_labels = [t.text for t in ET.parse(f"{res}/study-passkey.svg").getroot().iter("{http://www.w3.org/2000/svg}text")]
assert all(any(l and l.startswith(c) for l in passkey_labels) for c in ("teacher", "lizard-0", "hybrid-50-err")), passkey_labels
ppl_labels = [t.text for t in ET.parse(f"{res}/study-ppl.svg").getroot().iter("{http://www.w3.org/2000/svg}text")]
stage2_drawn = any(l and l.startswith("stage 2, window") for l in ppl_labels)
assert "stage 1, window 64" in ppl_labels and stage2_drawn == (mode == "stage2" or has_finetune), ppl_labels
q = open(f"{docs}/quality.md").read()
begin, end = q.index("<!-- study results: begin -->"), q.index("<!-- study results: end -->")
assert md.strip() in q[begin:end] and "img/study-ppl.svg" in q[begin:end], q[begin:end]
print(f"{len(rows)} rows, table and plots well-formed")
PY
# bad input: one line, exit 2
expect_error "--teacher" bash "$SRC/launch/study.sh" --teacher "$TMP/nope" --train "$TMP/train.txt" \
    --valid "$TMP/valid.txt" --results "$TMP/r2" --lizard "$LIZARD"
expect_error "--stage1-tokens" bash "$SRC/launch/study.sh" --teacher "$TMP/teacher" --train "$TMP/train.txt" \
    --valid "$TMP/valid.txt" --results "$TMP/r2" --lizard "$LIZARD" --stage1-tokens 0
expect_error "--lizard" bash "$SRC/launch/study.sh" --teacher "$TMP/teacher" --train "$TMP/train.txt" \
    --valid "$TMP/valid.txt" --results "$TMP/r2" --lizard "$TMP/nope"

echo "study_test $MODE: $pass passed, $fail failed"
[ $fail -eq 0 ]
