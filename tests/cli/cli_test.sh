#!/usr/bin/env bash
# cli_test.sh LIZARD - the CLI end to end on a tiny model that `lizard init`
# writes: forward/generate/info work, --stats shows constant Lizard state,
# sampling is reproducible, and every bad input exits 2 with one line naming
# the culprit and leaves no output file behind.
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../test_lib.sh" # TMP, ok, bad, expect_error

M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 && ok || bad "init tiny-hybrid"
"$LIZARD" info --model "$M" >"$TMP/info" 2>&1 && grep -q "SLSL" "$TMP/info" && ok || bad "info layer kinds: $(cat "$TMP/info")"

# forward: a [T, vocab] float32 npy
"$LIZARD" forward --model "$M" --ids 1,2,3,4,5 --logits-out "$TMP/l.npy" 2>/dev/null && ok || bad "forward"
vocab=$(python3 -c "import json;print(json.load(open('$M/config.json'))['vocab_size'])")
size=$(stat -c %s "$TMP/l.npy" 2>/dev/null || echo 0)
[ "$size" -eq $((128 + 5 * vocab * 4)) ] && ok || bad "npy size $size for 5 x $vocab"

# generate: json form, greedy = reproducible, sampling reproducible per seed
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 12 --format json --ignore-eos >"$TMP/g1" 2>/dev/null && ok || bad "generate json"
grep -Eq '^\{"ids": \[[0-9]+(, [0-9]+){11}\](, "text": ".*")?\}$' "$TMP/g1" && ok || bad "json form: $(cat "$TMP/g1")"
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 12 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7 --ignore-eos >"$TMP/s1" 2>/dev/null
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 12 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7 --ignore-eos >"$TMP/s2" 2>/dev/null
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 12 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 8 --ignore-eos >"$TMP/s3" 2>/dev/null
cmp -s "$TMP/s1" "$TMP/s2" && ok || bad "same seed, different ids"
cmp -s "$TMP/s1" "$TMP/s3" && bad "seeds 7 and 8 gave identical 12-token samples" || ok
[ -s "$TMP/s1" ] && ok || bad "text form printed nothing"
# without a tokenizer.json the text form prints the ids
cp -r "$M" "$TMP/notok" && rm "$TMP/notok/tokenizer.json"
"$LIZARD" generate --model "$TMP/notok" --ids 1,2,3 --max-tokens 12 --ignore-eos >"$TMP/s4" 2>/dev/null
[ "$(wc -w <"$TMP/s4")" -eq 12 ] && ok || bad "ids form: $(cat "$TMP/s4")"
expect_error "tokenizer.json" "$LIZARD" generate --model "$TMP/notok" --prompt "hi"

# text in, text out: the model's own tokenizer.json
"$LIZARD" generate --model "$M" --prompt "The lizard basks" --max-tokens 6 --format json --ignore-eos >"$TMP/p1" 2>/dev/null && ok || bad "generate --prompt"
grep -Eq '^\{"ids": \[[0-9]+(, [0-9]+){5}\], "text": ".*"\}$' "$TMP/p1" && ok || bad "--prompt json form: $(cat "$TMP/p1")"
ids=$("$LIZARD" tokenize --model "$M" --text "The lizard basks" 2>/dev/null)
"$LIZARD" generate --model "$M" --ids "$ids" --max-tokens 6 --format json --ignore-eos >"$TMP/p2" 2>/dev/null
cmp -s "$TMP/p1" "$TMP/p2" && ok || bad "--prompt and --ids of its tokens differ: $(cat "$TMP/p1") vs $(cat "$TMP/p2")"
expect_error "exactly one of --ids" "$LIZARD" generate --model "$M" --ids 1 --prompt x
# --prompt-file: the file's text is the prompt (same ids as --prompt with that text)
printf 'The lizard basks' >"$TMP/prompt.txt"
"$LIZARD" generate --model "$M" --prompt-file "$TMP/prompt.txt" --max-tokens 6 --format json --ignore-eos >"$TMP/pf" 2>/dev/null
cmp -s "$TMP/p1" "$TMP/pf" && ok || bad "--prompt-file differs from --prompt: $(head -c 200 "$TMP/pf")"
expect_error "--prompt-file $TMP/none.txt: No such file" "$LIZARD" generate --model "$M" --prompt-file "$TMP/none.txt"
expect_error "exactly one of" "$LIZARD" generate --model "$M" --prompt x --prompt-file "$TMP/prompt.txt"

# many sequences at once: each line of a prompts file, or --batch copies of one prompt
printf 'The lizard\n\nA warm rock\n' >"$TMP/prompts.txt"
"$LIZARD" generate --model "$M" --prompts-file "$TMP/prompts.txt" --max-tokens 5 --format json --ignore-eos >"$TMP/b1" 2>/dev/null && ok || bad "--prompts-file"
[ "$(grep -c '^{"index": [02], "ids": \[' "$TMP/b1")" -eq 2 ] && ok || bad "--prompts-file output: $(cat "$TMP/b1")"
"$LIZARD" generate --model "$M" --prompt "A warm rock" --max-tokens 5 --format json --ignore-eos >"$TMP/b2" 2>/dev/null
[ "$(sed -n 2p "$TMP/b1" | sed 's/"index": 2, //')" = "$(cat "$TMP/b2")" ] && ok || bad "batched sequence differs from alone"
"$LIZARD" generate --model "$M" --prompt "x" --batch 4 --max-tokens 3 --temperature 1 --ignore-eos >"$TMP/b3" 2>/dev/null && ok || bad "--batch 4"
[ "$(grep -c '^\[[0-3]\] ' "$TMP/b3")" -eq 4 ] && ok || bad "--batch output: $(cat "$TMP/b3")"
expect_error "no prompts" "$LIZARD" generate --model "$M" --prompts-file /dev/null

# sessions: k tokens, saved, then n - k more == n tokens in one run (sampled, so the random stream is saved too)
ids_of() { python3 -c "import json,sys; print(sum((json.load(open(f))['ids'] for f in sys.argv[1:]), []))" "$@"; }
for preset in tiny-hybrid tiny-lizard tiny-teacher; do
  SM=$TMP/$preset
  [ -d "$SM" ] || "$LIZARD" init --config $preset --out "$SM" --seed 3 >/dev/null 2>&1
  "$LIZARD" generate --model "$SM" --prompt "The lizard" --max-tokens 10 --temperature 0.9 --seed 4 --ignore-eos --format json >"$TMP/whole" 2>/dev/null
  rm -f "$TMP/s.lzs"
  "$LIZARD" generate --model "$SM" --prompt "The lizard" --max-tokens 4 --temperature 0.9 --seed 4 --ignore-eos --format json --session "$TMP/s.lzs" >"$TMP/part1" 2>/dev/null
  "$LIZARD" generate --model "$SM" --max-tokens 6 --temperature 0.9 --seed 4 --ignore-eos --format json --session "$TMP/s.lzs" >"$TMP/part2" 2>/dev/null
  [ "$(ids_of "$TMP/part1" "$TMP/part2")" = "$(ids_of "$TMP/whole")" ] && ok || bad "$preset session: $(cat "$TMP/part1" "$TMP/part2") vs $(cat "$TMP/whole")"
done
# version 3 (chunked; LIZARD_SESSION_CHUNK_BYTES forces it, in chunks of that many bytes): the same
# continuation, read back by a run that writes version 2 again; a cut chunked file is refused
SM=$TMP/tiny-hybrid
"$LIZARD" generate --model "$SM" --prompt "The lizard" --max-tokens 10 --temperature 0.9 --seed 4 --ignore-eos --format json >"$TMP/whole" 2>/dev/null
rm -f "$TMP/c.lzs"
LIZARD_SESSION_CHUNK_BYTES=64 "$LIZARD" generate --model "$SM" --prompt "The lizard" --max-tokens 3 --temperature 0.9 --seed 4 --ignore-eos --format json --session "$TMP/c.lzs" >"$TMP/part1" 2>/dev/null
[ "$(head -c 1 "$TMP/c.lzs" | od -An -tx1 | tr -d ' ')" != "0d" ] && ok || bad "LIZARD_SESSION_CHUNK_BYTES: not a chunked file"
cp "$TMP/c.lzs" "$TMP/c3.lzs"
LIZARD_SESSION_CHUNK_BYTES=100 "$LIZARD" generate --model "$SM" --max-tokens 3 --temperature 0.9 --seed 4 --ignore-eos --format json --session "$TMP/c.lzs" >"$TMP/part2" 2>/dev/null
"$LIZARD" generate --model "$SM" --max-tokens 4 --temperature 0.9 --seed 4 --ignore-eos --format json --session "$TMP/c.lzs" >"$TMP/part3" 2>/dev/null
[ "$(head -c 1 "$TMP/c.lzs" | od -An -tx1 | tr -d ' ')" = "0d" ] && ok || bad "a small session is not written as version 2"
[ "$(ids_of "$TMP/part1" "$TMP/part2" "$TMP/part3")" = "$(ids_of "$TMP/whole")" ] && ok || bad "chunked session: $(cat "$TMP/part1" "$TMP/part2" "$TMP/part3") vs $(cat "$TMP/whole")"
head -c 3000 "$TMP/c3.lzs" >"$TMP/ctrunc.lzs"
expect_error "ctrunc.lzs: truncated" "$LIZARD" generate --model "$SM" --max-tokens 2 --session "$TMP/ctrunc.lzs"
# a session is refused when it is not whole, not ours, or not for this model: nothing is overwritten
cp "$TMP/s.lzs" "$TMP/good.lzs"
head -c 1000 "$TMP/good.lzs" >"$TMP/trunc.lzs"
expect_error "trunc.lzs" "$LIZARD" generate --model "$TMP/tiny-teacher" --max-tokens 2 --session "$TMP/trunc.lzs"
cmp -s <(head -c 1000 "$TMP/good.lzs") "$TMP/trunc.lzs" && ok || bad "a refused session file was changed"
python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 0x55; open(sys.argv[2], 'wb').write(b)" "$TMP/good.lzs" "$TMP/flip.lzs"
expect_error "flip.lzs" "$LIZARD" generate --model "$TMP/tiny-teacher" --max-tokens 2 --session "$TMP/flip.lzs"
cp "$TMP/good.lzs" "$TMP/other.lzs"
expect_error "another model" "$LIZARD" generate --model "$TMP/tiny-lizard" --max-tokens 2 --session "$TMP/other.lzs"
"$LIZARD" generate --model "$TMP/tiny-hybrid" --ids 1,2,3 --max-tokens 2 --session "$TMP/hyb.lzs" >/dev/null 2>&1
expect_error "softmax-layers" "$LIZARD" generate --model "$TMP/tiny-hybrid" --max-tokens 2 --session "$TMP/hyb.lzs" --softmax-layers none
# S and z saved in bf16 on request: a smaller file that continues (rounded, so only "it runs" is checked)
"$LIZARD" generate --model "$TMP/tiny-lizard" --ids 1,2,3 --max-tokens 2 --session "$TMP/f32.lzs" >/dev/null 2>&1
"$LIZARD" generate --model "$TMP/tiny-lizard" --ids 1,2,3 --max-tokens 2 --session "$TMP/b16.lzs" --session-dtype bf16 >/dev/null 2>&1
[ -s "$TMP/b16.lzs" ] && [ "$(stat -c %s "$TMP/b16.lzs")" -lt "$(stat -c %s "$TMP/f32.lzs")" ] && ok || bad "bf16 session not smaller"
"$LIZARD" generate --model "$TMP/tiny-lizard" --max-tokens 3 --session "$TMP/b16.lzs" >/dev/null 2>&1 && ok || bad "bf16 session does not continue"
expect_error "--session-dtype" "$LIZARD" generate --model "$TMP/tiny-lizard" --ids 1 --session "$TMP/x.lzs" --session-dtype f16
expect_error "--session-dtype" "$LIZARD" generate --model "$TMP/tiny-lizard" --ids 1 --session-dtype bf16
printf 'not a session' >"$TMP/junk.lzs"
expect_error "junk.lzs" "$LIZARD" generate --model "$M" --max-tokens 2 --session "$TMP/junk.lzs"
expect_error "--session" "$LIZARD" generate --model "$M" --ids 1 --batch 2 --session "$TMP/new.lzs"

# --stats: Lizard bytes constant, softmax KV growing
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 70 --stats --ignore-eos >/dev/null 2>"$TMP/stats" && ok || bad "generate --stats"
liz=$(grep -o 'lizard GLA [0-9]* + window [0-9]*' "$TMP/stats" | sort -u | wc -l)
kv=$(grep -o 'softmax KV *[0-9]*' "$TMP/stats" | sort -u | wc -l)
[ "$liz" -eq 1 ] && ok || bad "lizard state bytes changed with context: $(cat "$TMP/stats")"
[ "$kv" -ge 5 ] && ok || bad "softmax KV bytes did not grow: $(cat "$TMP/stats")"
"$LIZARD" generate --model "$M" --ids 1,2,3 --max-tokens 40 --stats --softmax-layers none --ignore-eos >/dev/null 2>"$TMP/stats2" && ok || bad "--softmax-layers none"
grep -q 'softmax KV          0 bytes (0 layers)' "$TMP/stats2" && ok || bad "pure Lizard run kept a KV cache: $(head -2 "$TMP/stats2")"

# bad flags and ids
expect_error "--model" "$LIZARD" forward --ids 1 --logits-out "$TMP/x.npy"
expect_error "unknown flag '--bogus'" "$LIZARD" generate --model "$M" --ids 1 --bogus
expect_error "--ids" "$LIZARD" forward --model "$M" --ids 1,x,3 --logits-out "$TMP/x.npy"
expect_error "token id 999999 out of range" "$LIZARD" forward --model "$M" --ids 1,999999 --logits-out "$TMP/x.npy"
expect_error "--max-tokens" "$LIZARD" generate --model "$M" --ids 1 --max-tokens abc
expect_error "--top-p" "$LIZARD" generate --model "$M" --ids 1 --top-p 1.5
expect_error "--format" "$LIZARD" generate --model "$M" --ids 1 --format xml
expect_error "--device cuda" "$LIZARD" generate --model "$M" --ids 1 --device cuda
# every LIZARD_* variable is checked at start, whatever the command and device: a bad value, or a
# name lizard does not read (a retired knob), is refused by name; LIZARD_PROFILE=1 prints them all
expect_error "LIZARD_FORK_TOKENS=0" env LIZARD_FORK_TOKENS=0 "$LIZARD" info --model "$M"
expect_error "LIZARD_NO_GRAPHS=yes" env LIZARD_NO_GRAPHS=yes "$LIZARD" generate --model "$M" --ids 1
expect_error "LIZARD_FUSE: not a variable" env LIZARD_FUSE=0 "$LIZARD" generate --model "$M" --ids 1
LIZARD_PROFILE=1 LIZARD_STREAM_TOKENS=3 "$LIZARD" info --model "$M" 2>"$TMP/knobs" >/dev/null
grep -q "^knob LIZARD_STREAM_TOKENS  *3$" "$TMP/knobs" && grep -q "^knob LIZARD_WGMMA  *1 (default)$" "$TMP/knobs" && ok ||
  bad "LIZARD_PROFILE=1: the knobs not printed: $(head -3 "$TMP/knobs")"
expect_error "--softmax-layers" "$LIZARD" generate --model "$M" --ids 1 --softmax-layers 0,9
expect_error "unknown command" "$LIZARD" frobnicate
expect_error "$TMP/nodir" "$LIZARD" forward --model "$TMP/nodir" --ids 1 --logits-out "$TMP/x.npy"
expect_error "$TMP/no/such/dir/x.npy" "$LIZARD" forward --model "$M" --ids 1 --logits-out "$TMP/no/such/dir/x.npy"
[ ! -e "$TMP/x.npy" ] && ok || bad "a failed forward left $TMP/x.npy behind"

# broken model folders: each defect named
check_broken() {
    local kind=$1 needle=$2
    python3 "$HERE/corrupt_model.py" "$M" "$TMP/$kind" "$kind" || { bad "corrupt $kind"; return; }
    expect_error "$needle" "$LIZARD" forward --model "$TMP/$kind" --ids 1,2 --logits-out "$TMP/$kind.npy"
    [ ! -e "$TMP/$kind.npy" ] && ok || bad "$kind: partial output file"
}
check_broken truncated "model.safetensors"
check_broken header-past-eof "header length"
check_broken overlap "overlap"
check_broken out-of-range "model.norm.weight"
check_broken wrong-shape "model.norm.weight"
check_broken wrong-dtype "model.norm.weight"
check_broken missing-tensor "model.layers.1.mlp.up_proj.weight"
check_broken bad-json "config.json"
check_broken unknown-rope "yarn"
check_broken missing-key "intermediate_size"
# weights that are not finite: refused at load with the tensor and the element (the CPU backend checks
# every weight it uses; docs/running.md "Non-finite values")
check_broken nan-weight "tensor 'model.layers.1.mlp.up_proj.weight': element 7 is a NaN or an infinity"
check_broken inf-norm "tensor 'model.norm.weight': element 3 is a NaN"
check_broken nan-alpha "tensor 'model.layers.1.self_attn.window_alpha' is a NaN"
check_broken nan-embed-last "tensor 'model.embed_tokens.weight': element $((vocab * 128 - 1)) is a NaN"
expect_error "model.layers.1.mlp.up_proj.weight" "$LIZARD" generate --model "$TMP/nan-weight" --ids 1 --max-tokens 1
python3 - "$M" "$TMP/bf16" <<'PY' # the tiny model in BF16 (the CPU backend converts it, checking as it goes)
import json, shutil, struct, sys
src, dst = sys.argv[1:3]
shutil.copytree(src, dst)
raw = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
out, blobs, off = {}, [], 0
for k, v in head.items():
    if k == "__metadata__":
        out[k] = v
        continue
    b, e = v["data_offsets"]
    words = struct.unpack("<%dI" % ((e - b) // 4), raw[8 + n + b:8 + n + e])
    blob = struct.pack("<%dH" % len(words), *(w >> 16 for w in words))
    out[k] = {"dtype": "BF16", "shape": v["shape"], "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
"$LIZARD" forward --model "$TMP/bf16" --ids 1,2 --logits-out "$TMP/bf16.npy" >/dev/null 2>&1 && ok || bad "the BF16 copy"
python3 "$HERE/corrupt_model.py" "$TMP/bf16" "$TMP/bf16-nan" nan-weight &&
    expect_error "tensor 'model.layers.1.mlp.up_proj.weight': element 7 is a NaN" "$LIZARD" forward --model "$TMP/bf16-nan" \
        --ids 1,2 --logits-out "$TMP/x.npy"

# placement plans: a 70B shape on 8 ranks without files; a bad plan file named by line
if "$LIZARD" --help 2>/dev/null | grep -q '^  plan '; then
    "$LIZARD" plan --shape llama3-70b-hybrid --ranks 8 >"$TMP/plan8" 2>&1 && ok || bad "plan 70b on 8 ranks: $(cat "$TMP/plan8")"
    [ "$(grep -c '^rank [0-7]:' "$TMP/plan8")" -eq 8 ] && ok || bad "plan did not print 8 ranks: $(cat "$TMP/plan8")"
    # what the bytes are counted in, and whose free memory they are held against
    grep -q "^bytes: weights, KV caches and window rings in bf16" "$TMP/plan8" &&
      grep -q "^free GB: 126.9 a rank: an H200's 141 GB" "$TMP/plan8" && ok || bad "plan: units not said: $(tail -4 "$TMP/plan8")"
    "$LIZARD" plan --shape llama3-70b-hybrid --ranks 2 --gpu-memory 80,90 2>&1 | grep -q "^free GB: as --gpu-memory 80,90 says" &&
      ok || bad "plan --gpu-memory: not said"
    "$LIZARD" plan --shape llama3-70b-hybrid --ranks 4 --out "$TMP/plan4.txt" >/dev/null 2>&1 && ok || bad "plan --out"
    "$LIZARD" plan --shape llama3-70b-hybrid --plan "$TMP/plan4.txt" >/dev/null 2>&1 && ok || bad "plan --plan of its own output"
    printf 'rank 0: embed 0-39\nrank 1: 40-79, 85 head\n' >"$TMP/badplan.txt"
    expect_error "badplan.txt:2: layer 85 out of range (model has 80 layers)" "$LIZARD" plan --shape llama3-70b-hybrid --plan "$TMP/badplan.txt"
    expect_error "--placement" "$LIZARD" plan --shape llama3-70b-hybrid --ranks 2 --placement zigzag
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
