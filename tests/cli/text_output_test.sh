#!/usr/bin/env bash
# text_output_test.sh - lizard generate's text is safe on a terminal: control characters and bytes
# that are not UTF-8 come out as \xNN, characters split between tokens come out whole, the --stats
# lines come after the text (never inside it), --format json stays JSON, and tokenize --ids gives the
# exact bytes. A random tiny-hybrid's tokenizer gets the ids its greedy run generates swapped with
# single-byte tokens, so that the text holds chosen bytes at chosen token boundaries.
# Usage: text_output_test.sh LIZARD
set -uo pipefail
LIZARD=$1
source "$(dirname "$0")/../test_lib.sh"
M=$TMP/tiny
T=$TMP/bytes
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 0 >/dev/null 2>&1 || { echo "init failed"; exit 1; }
gen=(--ids 1,2,3 --max-tokens 96 --ignore-eos --temperature 1 --seed 5) # sampled: ids seldom repeat
"$LIZARD" generate --model "$M" "${gen[@]}" --format json >"$TMP/ids.json" 2>/dev/null || { echo "generate failed"; exit 1; }
mkdir -p "$T" && cp "$M"/* "$T"/
# the swapped tokenizer; prints the generated ids, the exact bytes of their text (raw) and that text
# escaped by the rule of runtime/core/text_escape.h (escaped), both without a newline
python3 - "$TMP/ids.json" "$T/tokenizer.json" "$TMP" <<'PY' || { echo "no room for the chosen bytes"; exit 1; }
import json, sys
ids = json.load(open(sys.argv[1]))["ids"]
tok = json.load(open(sys.argv[2]))
vocab = tok["model"]["vocab"]
special = {t["id"] for t in tok["added_tokens"]}
# GPT-2's byte-level alphabet: byte -> the character that stands for it
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
alphabet, extra = {}, 0
for b in range(256):
    if b in printable:
        alphabet[b] = chr(b)
    else:
        alphabet[b] = chr(256 + extra)
        extra += 1
text_of = {i: s for s, i in vocab.items()}
# bytes placed at consecutive generated tokens (each byte once: one id stands for it): é, €, a lizard
# and λ split between tokens, ESC, 0xFF, BEL, C1's CSI split, a 3-byte start that the next token
# proves invalid, CR
units = [b"\xc3\xa9", b"\xe2\x82\xac", b"\x1b", b"\xff", b"\x07", b"\xc2\x9b", b"\xe3A", b"\xf0\x9f\xa6\x8e",
         b"\r", b"\xce\xbb"]
taken = set()
def place(start, unit):
    pos = range(start, start + len(unit))
    if pos.stop > len(ids):
        return False
    gs = [ids[p] for p in pos]
    hs = [vocab[alphabet[b]] for b in unit]
    if len(set(gs)) < len(gs) or any(g in special or g in taken or h in taken for g, h in zip(gs, hs)):
        return False
    for g, h in zip(gs, hs):
        sg, sh = text_of[g], text_of[h]
        vocab[sg], vocab[sh] = h, g
        text_of[g], text_of[h] = sh, sg
        taken.update((g, h))
    return True
p = 0
for unit in units:
    while not place(p, unit):
        p += 1
        if p >= len(ids):
            sys.exit(1)
    p += len(unit)
if not place(len(ids) - 1, b"\xf1"):  # a start the text ends in
    sys.exit(1)
json.dump(tok, open(sys.argv[2], "w"), ensure_ascii=False)
back = {c: b for b, c in alphabet.items()}
raw = b"".join(bytes(back[c] for c in text_of[i]) for i in ids if i not in special)

def escaped(b):
    out, i = [], 0
    while i < len(b):
        c = b[i]
        if c < 0x80:
            out.append(b"\\x%02X" % c if (c < 0x20 and c not in (9, 10)) or c == 0x7F else bytes([c]))
            i += 1
            continue
        n = next((n for n in (2, 3, 4) if _one_char(b[i:i + n])), 0)
        if n == 0:
            out.append(b"\\x%02X" % c)
            i += 1
        else:
            ch = b[i:i + n]
            out.append(b"".join(b"\\x%02X" % x for x in ch) if 0x80 <= ord(ch.decode()) <= 0x9F else ch)
            i += n
    return b"".join(out)

def _one_char(b):
    try:
        return len(b.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False

open(sys.argv[3] + "/raw", "wb").write(raw)
open(sys.argv[3] + "/escaped", "wb").write(escaped(raw))
open(sys.argv[3] + "/gen_ids", "w").write(",".join(map(str, ids)))
PY

# the text, escaped as the rule says; nothing raw reaches the terminal
"$LIZARD" generate --model "$T" "${gen[@]}" >"$TMP/out" 2>"$TMP/err" || bad "generate: $(cat "$TMP/err")"
printf '\n' >>"$TMP/escaped"
cmp -s "$TMP/out" "$TMP/escaped" && ok || bad "text output: got $(od -c "$TMP/out" | head -5), want $(od -c "$TMP/escaped" | head -5)"
python3 - "$TMP/out" <<'PY' && ok || bad "text output: raw control bytes or invalid UTF-8"
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8")  # valid UTF-8
sys.exit(any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in t))
PY
for want in 'é' '€' $'\xf0\x9f\xa6\x8e' 'λ' '\x1B' '\xFF' '\x07' '\xC2\x9B' '\xE3A' '\x0D'; do
  grep -qF -- "$want" "$TMP/out" && ok || bad "text output lacks $want: $(head -c 300 "$TMP/out")"
done
[[ $(tail -c 5 "$TMP/out") == '\xF1' ]] && ok || bad "a character the text ends in is not escaped: $(tail -c 12 "$TMP/out" | od -c)"

# --stats: the state lines after the text, each on its own line
"$LIZARD" generate --model "$T" "${gen[@]}" --stats >"$TMP/both" 2>&1 || bad "generate --stats failed"
size=$(wc -c <"$TMP/out")
tail -c +$((size + 1)) "$TMP/both" >"$TMP/after"
n_stats=$(grep -c '^lizard stats: position' "$TMP/after")
cmp -s -n "$size" "$TMP/both" "$TMP/out" && [ "$n_stats" -ge 3 ] && [ "$(wc -l <"$TMP/after")" -eq "$n_stats" ] && ok ||
  bad "--stats lines not after the text on their own lines: $(cat -v "$TMP/both" | head -c 600)"
# many sequences ("[i] text"): escaped alike
"$LIZARD" generate --model "$T" "${gen[@]}" --batch 2 >"$TMP/batch" 2>/dev/null
[ "$(head -1 "$TMP/batch")" = "[0] $(head -1 "$TMP/out")" ] && ok || bad "--batch text not escaped: $(head -c 300 "$TMP/batch" | cat -v)"

# json: valid, its own escaping (controls as \u00XX, what is not UTF-8 as U+FFFD), characters whole
"$LIZARD" generate --model "$T" "${gen[@]}" --format json >"$TMP/json" 2>/dev/null
python3 - "$TMP/json" "$TMP/gen_ids" <<'PY' && ok || bad "--format json: $(head -c 400 "$TMP/json")"
import json, sys
j = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
ids = [int(x) for x in open(sys.argv[2]).read().split(",")]
t = j["text"]
sys.exit(not (j["ids"] == ids and all(s in t for s in ("é", "€", "\U0001F98E", "λ", "\x1b", "\x07", "\r", "\ufffd"))))
PY
# tokenize --ids: the exact bytes, nothing escaped (a tool for what the model wrote)
"$LIZARD" tokenize --model "$T" --ids "$(cat "$TMP/gen_ids")" >"$TMP/decoded" 2>"$TMP/err" || bad "tokenize: $(cat "$TMP/err")"
printf '\n' >>"$TMP/raw"
cmp -s "$TMP/decoded" "$TMP/raw" && ok || bad "tokenize --ids is not the exact bytes: $(od -c "$TMP/decoded" | head -3)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
