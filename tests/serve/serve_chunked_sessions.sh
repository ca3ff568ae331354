#!/usr/bin/env bash
# serve_chunked_sessions.sh LIZARD - the session store with every session
# kept as a chunked (version-3) stream, as it keeps states of 2 GiB or more:
# LIZARD_SESSION_CHUNK_BYTES (session_chunks.h) forces the format with small
# chunks. For the tiny teacher, hybrid and Lizard models, a session spilled to
# --session-dir and one kept in memory continue exactly as the whole
# conversation sent at once; the spilled file is a chunked session file that
# `lizard generate --session` continues; a cut or corrupted one is refused
# with a 400 naming the session, and the server goes on.
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
LAUNCH=
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"

chunked() { [ "$(head -c 5 "$1" | od -An -tx1 | tr -d ' \n')" != 0d4c5a5353 ]; } # not "\x0dLZSS": version 3

P1=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16
P2=7,8,9,10
export LIZARD_SESSION_CHUNK_BYTES=64
for cfg in teacher hybrid lizard; do
    M=$TMP/$cfg
    "$LIZARD" init --config "tiny-$cfg" --out "$M" --seed 1 >/dev/null 2>&1 || { bad "init tiny-$cfg"; continue; }
    mkdir "$TMP/disk-$cfg" "$TMP/mem-$cfg"
    # spilled: a 1-byte budget sends every session to the folder
    start_server "$TMP/$cfg-a.log" --model "$M" --session-memory 1 --session-dir "$TMP/disk-$cfg" ||
        { bad "$cfg: server did not start"; continue; }
    A1=$(session_ids "$P1" 6 s1)
    f=$TMP/disk-$cfg/s1.lzs
    [ -f "$f" ] && chunked "$f" && ok || bad "$cfg: spilled session not a chunked file: $(ls "$TMP/disk-$cfg")"
    cp "$f" "$TMP/$cfg-copy.lzs"
    A2=$(session_ids "$P2" 6 s1)
    want=$(generate_ids "$P1,$A1,$P2" 6)
    [ -n "$A2" ] && [ "$A2" = "$want" ] && ok || bad "$cfg: session from the folder: $A2 vs $want"
    # the spilled file is an ordinary session file for `lizard generate` (without the knob)
    got=$(env -u LIZARD_SESSION_CHUNK_BYTES "$LIZARD" generate --model "$M" --session "$TMP/$cfg-copy.lzs" \
        --ids "$P2" --max-tokens 6 --format json --ignore-eos 2>"$TMP/gen.err" |
        python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))" 2>/dev/null)
    [ -n "$got" ] && [ "$got" = "$A2" ] && ok || bad "$cfg: generate --session on the spilled file: '$got' vs $A2 $(cat "$TMP/gen.err")"
    stop_server && ok || bad "$cfg: server exit"
    # in memory: restored from the store's buffer, written to the folder at shutdown
    start_server "$TMP/$cfg-b.log" --model "$M" --session-dir "$TMP/mem-$cfg" || { bad "$cfg: server did not start"; continue; }
    B1=$(session_ids "$P1" 6 m1)
    [ ! -e "$TMP/mem-$cfg/m1.lzs" ] && ok || bad "$cfg: session spilled without need"
    B2=$(session_ids "$P2" 6 m1)
    [ "$B1" = "$A1" ] && [ "$B2" = "$want" ] && ok || bad "$cfg: session from memory: $B1 / $B2 vs $A1 / $want"
    stop_server && ok || bad "$cfg: server exit"
    [ -f "$TMP/mem-$cfg/m1.lzs" ] && chunked "$TMP/mem-$cfg/m1.lzs" && ok || bad "$cfg: session not flushed chunked"
done

# a cut and a corrupted chunked session in the folder: 400 naming the session, the server goes on
M=$TMP/hybrid
f=$TMP/mem-hybrid/m1.lzs
if [ -f "$f" ]; then
    n=$(stat -c %s "$f")
    head -c $((n - 10)) "$f" >"$TMP/mem-hybrid/cut.lzs"
    python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 0x10; open(sys.argv[2], 'wb').write(b)" \
        "$f" "$TMP/mem-hybrid/flip.lzs"
    start_server "$TMP/c.log" --model "$M" --session-dir "$TMP/mem-hybrid" || bad "server C did not start"
    for name in cut flip; do
        code=$(req POST /v1/completions "{\"prompt\": [7, 8], \"max_tokens\": 3, \"session\": \"$name\"}")
        msg=$(jget "$TMP/body" "d['error']['message']")
        [ "$code" = 400 ] && [[ "$msg" == "$name: "* ]] && [ "$(printf '%s\n' "$msg" | wc -l)" = 1 ] && ok ||
            bad "$name session: $code $(head -c 300 "$TMP/body")"
    done
    [[ "$msg" == *"checksum"* || "$msg" == *"chunk"* ]] && ok || bad "flip: $msg"
    code=$(req POST /v1/completions '{"prompt": [7, 8], "max_tokens": 3, "session": "m1"}')
    [ "$code" = 200 ] && ok || bad "a good session after the bad ones: $code $(head -c 300 "$TMP/body")"
    stop_server && ok || bad "server C exit"
fi

echo "serve_chunked_sessions: $pass passed, $fail failed"
[ $fail -eq 0 ]
