#!/usr/bin/env bash
# serve_test.sh LIZARD [NP] - `lizard serve` end to end with curl on a tiny
# model: completions, chat and streams (greedy answers equal `lizard generate`,
# also for requests batched together and prompts fed in 8-token pieces), stop strings, sessions (the continued
# answer equals the whole conversation sent at once, in memory and spilled to
# disk), the prefix cache, every error as an OpenAI error object, 429 from a
# full queue, a disconnect freeing its slot, SIGTERM draining to exit 0.
# With NP the server runs as `mpirun -np NP` (a pipeline) for the core checks.
set -u
LIZARD=$1
NP=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
LAUNCH=
if [ -n "$NP" ]; then
    command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export OMPI_MCA_orte_tmpdir_base="$TMP" # its own Open MPI session folders (suites run side by side)
    LAUNCH="mpirun -np $NP"
fi
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"

M=$TMP/tiny
"$LIZARD" init --config tiny-hybrid --out "$M" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init" >&2; exit 1; }
KEY=sekret
AUTH=(-H "Authorization: Bearer $KEY")

# reference: greedy ids from `lizard generate` for a comma-separated id prompt
generate_ids() {
    "$LIZARD" generate --model "$M" --ids "$1" --max-tokens "$2" --format json --ignore-eos 2>/dev/null |
        python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['ids'])))"
}
# completion ids through the server: PROMPT_IDS MAX_TOKENS [SESSION]
serve_ids() {
    local session=""
    [ -n "${3:-}" ] && session=", \"session\": \"$3\""
    local code; code=$(req POST /v1/completions "{\"prompt\": [$1], \"max_tokens\": $2, \"ignore_eos\": true,
        \"return_token_ids\": true, \"temperature\": 0$session}" "${AUTH[@]}")
    [ "$code" = 200 ] || { echo "status $code: $(head -c 300 "$TMP/body")" >&2; return 1; }
    jget "$TMP/body" "','.join(map(str, d['choices'][0]['token_ids']))"
}

start_server "$TMP/a.log" --model "$M" --api-key "$KEY" --max-batch 4 --max-prompt-tokens 512 --max-tokens 32 \
    --max-body-bytes 8192 --prefix-min-tokens 8 --prefill-chunk 8 || { echo "FAIL: server did not start" >&2; exit 1; }

# a model without a chat template: one warning at start that chat requests get LLaMA-3 markers as plain
# text, and the startup line's reason in one pair of parentheses
[ "$(grep -c "^lizard serve: warning: $M names no chat format (the default: tokenizer_config.json has no chat_template): .* LLaMA-3 markers, .* plain text" "$TMP/a.log")" = 1 ] &&
    grep -q "chat format llama3 (the default: tokenizer_config.json has no chat_template)$" "$TMP/a.log" &&
    ! grep -q "((\|))" "$TMP/a.log" && ok || bad "no chat template: $(cat "$TMP/a.log")"

# ---- endpoints ----------------------------------------------------------------
[ "$(req GET /health)" = 200 ] && ok || bad "/health"
[ "$(req GET /v1/models "" "${AUTH[@]}")" = 200 ] && [ "$(jget "$TMP/body" "d['data'][0]['id']")" = tiny ] && ok ||
    bad "/v1/models: $(cat "$TMP/body")"
code=$(req POST /v1/completions '{"prompt": "The lizard basks", "max_tokens": 8, "ignore_eos": true}' "${AUTH[@]}")
[ "$code" = 200 ] && [ "$(jget "$TMP/body" "(d['object'], d['usage']['completion_tokens'], d['choices'][0]['finish_reason'])")" = "('text_completion', 8, 'length')" ] &&
    ok || bad "completion: $code $(cat "$TMP/body")"

# greedy through the server = lizard generate, one request and several batched together
P1=5,17,29,41,53,65,77,89,101,113,125,137,149,161,173,185,197,209,221,233
want=$(generate_ids "$P1" 8)
got=$(serve_ids "$P1" 8)
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "greedy ids $got vs lizard generate $want"
for k in 1 2 3 4 5 6; do
    ( p="$k,$((k * 7)),$((k * 11)),300,$((k + 40))"
      code=$(curl -s -o "$TMP/c$k" -w '%{http_code}' -H 'Content-Type: application/json' "${AUTH[@]}" \
          --data-binary "{\"prompt\": [$p], \"max_tokens\": $((6 + k)), \"ignore_eos\": true, \"return_token_ids\": true}" \
          "$URL/v1/completions")
      echo "$code" >"$TMP/c$k.code" ) &
done
wait_ok=0
for k in 1 2 3 4 5 6; do
    for _ in $(seq 1 600); do [ -s "$TMP/c$k.code" ] && break; sleep 0.1; done
    p="$k,$((k * 7)),$((k * 11)),300,$((k + 40))"
    got=$(jget "$TMP/c$k" "','.join(map(str, d['choices'][0]['token_ids']))")
    [ "$(cat "$TMP/c$k.code")" = 200 ] && [ "$got" = "$(generate_ids "$p" $((6 + k)))" ] && wait_ok=$((wait_ok + 1))
done
[ $wait_ok -eq 6 ] && ok || bad "concurrent requests: $wait_ok of 6 equal lizard generate"

# chat, and both kinds streamed: the events add up to the whole answer
MSGS='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]'
code=$(req POST /v1/chat/completions "{\"messages\": $MSGS, \"max_tokens\": 10, \"ignore_eos\": true}" "${AUTH[@]}")
chat_text=$(jget "$TMP/body" "repr(d['choices'][0]['message']['content'])")
[ "$code" = 200 ] && [ "$(jget "$TMP/body" "(d['object'], d['choices'][0]['message']['role'], d['usage']['completion_tokens'])")" = "('chat.completion', 'assistant', 10)" ] &&
    ok || bad "chat: $code $(cat "$TMP/body")"
sse_text() { # FILE FIELD: the concatenated text of a stream, its last finish_reason, [DONE] last
    python3 - "$1" "$2" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert lines[-1] == "data: [DONE]", lines[-1:]
text, finish, usage = "", None, None
for l in lines[:-1]:
    e = json.loads(l[6:])
    c = e["choices"][0]
    text += (c.get("delta", {}).get("content") or "") if sys.argv[2] == "chat" else c["text"]
    finish = c["finish_reason"] or finish
    usage = e.get("usage") or usage
print(repr(text), finish, usage["completion_tokens"])
PY
}
curl -sN "${AUTH[@]}" -H 'Content-Type: application/json' -o "$TMP/s1" "$URL/v1/chat/completions" \
    --data-binary "{\"messages\": $MSGS, \"max_tokens\": 10, \"ignore_eos\": true, \"stream\": true}"
[ "$(sse_text "$TMP/s1" chat)" = "$chat_text length 10" ] && ok || bad "chat stream: $(sse_text "$TMP/s1" chat) vs $chat_text"
head -1 "$TMP/s1" | grep -q '"role":"assistant"' && ok || bad "chat stream: first chunk has no role"
req POST /v1/completions '{"prompt": "Warm rocks", "max_tokens": 12, "ignore_eos": true}' "${AUTH[@]}" >/dev/null
whole=$(jget "$TMP/body" "repr(d['choices'][0]['text'])")
curl -sN "${AUTH[@]}" -o "$TMP/s2" "$URL/v1/completions" \
    --data-binary '{"prompt": "Warm rocks", "max_tokens": 12, "ignore_eos": true, "stream": true}'
[ "$(sse_text "$TMP/s2" completion)" = "$whole length 12" ] && ok || bad "completion stream: $(sse_text "$TMP/s2" completion) vs $whole"

# stop strings: the answer ends before the first match, finish_reason stop, whole and streamed
# two ASCII letters from the middle (a random model's text also has bytes shown as U+FFFD)
stop=$(python3 -c "import sys; t=eval(sys.argv[1]); print(next(t[i:i+2] for i in range(2, len(t)) if t[i:i+2].isascii() and t[i:i+2].isalpha()))" "$whole")
want_stop=$(python3 -c "import sys; t=eval(sys.argv[1]); print(repr(t[:t.index(sys.argv[2])]))" "$whole" "$stop")
body=$(python3 -c "import json,sys; print(json.dumps({'prompt': 'Warm rocks', 'max_tokens': 12, 'ignore_eos': True, 'stop': [sys.argv[1]]}))" "$stop")
req POST /v1/completions "$body" "${AUTH[@]}" >/dev/null
[ "$(jget "$TMP/body" "(d['choices'][0]['text'], d['choices'][0]['finish_reason'])")" = "($want_stop, 'stop')" ] &&
    ok || bad "stop '$stop': $(cat "$TMP/body") (want $want_stop)"
body=$(python3 -c "import json,sys; print(json.dumps({'prompt': 'Warm rocks', 'max_tokens': 12, 'ignore_eos': True, 'stop': sys.argv[1], 'stream': True}))" "$stop")
curl -sN "${AUTH[@]}" -o "$TMP/s3" "$URL/v1/completions" --data-binary "$body"
sse_text "$TMP/s3" completion | grep -q "^$want_stop stop " && ok || bad "streamed stop: $(sse_text "$TMP/s3" completion) (want $want_stop)"

# logit_bias: +100 on one id makes greedy pick it every time (the first token from the prompt's
# logits, the others from decode steps); -100 on greedy's first id bans it; requests without it keep
# the answer of lizard generate
want=$(generate_ids "$P1" 8)
code=$(req POST /v1/completions "{\"prompt\": [$P1], \"max_tokens\": 8, \"ignore_eos\": true, \"temperature\": 0,
    \"return_token_ids\": true, \"logit_bias\": {\"77\": 100}}" "${AUTH[@]}")
[ "$code" = 200 ] && [ "$(jget "$TMP/body" "','.join(map(str, d['choices'][0]['token_ids']))")" = 77,77,77,77,77,77,77,77 ] &&
    ok || bad "logit_bias +100: $code $(head -c 300 "$TMP/body")"
code=$(req POST /v1/completions "{\"prompt\": [$P1], \"max_tokens\": 8, \"ignore_eos\": true, \"temperature\": 0,
    \"return_token_ids\": true, \"logit_bias\": {\"${want%%,*}\": -100}}" "${AUTH[@]}")
first=$(jget "$TMP/body" "d['choices'][0]['token_ids'][0]")
[ "$code" = 200 ] && [ -n "$first" ] && [ "$first" != "${want%%,*}" ] && ok || bad "logit_bias -100 on ${want%%,*}: $code $(head -c 300 "$TMP/body")"
[ "$(serve_ids "$P1" 8)" = "$want" ] && ok || bad "greedy answer after logit_bias requests"
# fields that change nothing here are accepted and ignored
code=$(req POST /v1/chat/completions "{\"messages\": $MSGS, \"max_tokens\": 2, \"user\": \"u1\", \"metadata\": {\"k\": \"v\"},
    \"store\": false, \"service_tier\": \"auto\", \"parallel_tool_calls\": false, \"tools\": [], \"tool_choice\": \"none\",
    \"response_format\": {\"type\": \"text\"}, \"stream_options\": {\"include_usage\": true}}" "${AUTH[@]}")
[ "$code" = 200 ] && ok || bad "ignorable fields: $code $(head -c 300 "$TMP/body")"

# sessions: the second turn sends only its new tokens; the answer equals the whole conversation at once
P2=7,8,9,10
A1=$(serve_ids "$P1" 6 conv1)
A2=$(serve_ids "$P2" 6 conv1)
[ "$(jget "$TMP/body" "d['usage']['prompt_tokens']")" = 5 ] && ok || bad "session turn 2 prompt_tokens (pending + 4): $(cat "$TMP/body")"
want=$(generate_ids "$P1,$A1,$P2" 6)
[ -n "$A2" ] && [ "$A2" = "$want" ] && ok || bad "session answer $A2 vs whole conversation $want"
# the same prompt without a session starts from the cached state of P1 (prefix cache) and agrees
got=$(serve_ids "$P1,$A1,$P2" 6)
[ "$got" = "$want" ] && [ "$(jget "$TMP/body" "d['usage']['prompt_tokens_details']['cached_tokens']")" -ge 20 ] && ok ||
    bad "prefix-cached answer $got vs $want: $(cat "$TMP/body")"
hits=$(metric lizard_prefix_cache_hits_total)
[ "${hits:-0}" -ge 1 ] && ok || bad "prefix cache hits: $hits"
# chat in a session: the second turn is only the new message
req POST /v1/chat/completions "{\"messages\": $MSGS, \"max_tokens\": 5, \"session\": \"chat1\"}" "${AUTH[@]}" >/dev/null
first=$(jget "$TMP/body" "d['usage']['prompt_tokens']")
code=$(req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "More"}], "max_tokens": 5, "session": "chat1"}' "${AUTH[@]}")
second=$(jget "$TMP/body" "d['usage']['prompt_tokens']")
[ "$code" = 200 ] && [ "${second:-999}" -lt "${first:-0}" ] && ok || bad "chat session: $code, prompt tokens $first then $second"

# ---- errors: every one an OpenAI error object -----------------------------------
expect_error 401 - GET /v1/models ""
expect_error 401 - POST /v1/completions '{"prompt": "x"}' -H "Authorization: Bearer wrong"
expect_error 404 - GET /nope "" "${AUTH[@]}"
expect_error 405 - GET /v1/completions "" "${AUTH[@]}"
expect_error 405 - POST /health '{}'
expect_error 400 - POST /v1/completions '{"prompt": "x", ' "${AUTH[@]}"
expect_error 400 - POST /v1/completions '[1, 2]' "${AUTH[@]}"
expect_error 400 - POST /v1/completions '' "${AUTH[@]}"
# a field the API does not define is ignored and named in the server's log, as vLLM does
code=$(req POST /v1/completions '{"prompt": "x", "max_tokens": 2, "bogus": 1}' "${AUTH[@]}")
[ "$code" = 200 ] && grep -q "ignored fields the API does not define: bogus" "$TMP/a.log" && ok ||
    bad "unknown field: $code, log: $(grep -c ignored "$TMP/a.log")"
expect_error 400 max_tokens POST /v1/completions '{"prompt": "x", "max_tokens": "many"}' "${AUTH[@]}"
expect_error 400 max_tokens POST /v1/completions '{"prompt": "x", "max_tokens": 0}' "${AUTH[@]}"
expect_error 400 max_tokens POST /v1/completions '{"prompt": "x", "max_tokens": 33}' "${AUTH[@]}"
expect_error 400 temperature POST /v1/completions '{"prompt": "x", "temperature": 5}' "${AUTH[@]}"
expect_error 400 top_p POST /v1/completions '{"prompt": "x", "top_p": "high"}' "${AUTH[@]}"
expect_error 400 n POST /v1/completions '{"prompt": "x", "n": 2}' "${AUTH[@]}"
expect_error 400 stop POST /v1/completions '{"prompt": "x", "stop": [1]}' "${AUTH[@]}"
expect_error 400 tools POST /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}' "${AUTH[@]}"
expect_error 400 response_format POST /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}' "${AUTH[@]}"
expect_error 400 logit_bias POST /v1/completions '{"prompt": "x", "logit_bias": {"99999": 5}}' "${AUTH[@]}"
expect_error 400 stream POST /v1/completions '{"prompt": "x", "stream": "yes"}' "${AUTH[@]}"
expect_error 400 prompt POST /v1/completions '{"max_tokens": 3}' "${AUTH[@]}"
expect_error 400 prompt POST /v1/completions '{"prompt": {"a": 1}}' "${AUTH[@]}"
expect_error 400 prompt POST /v1/completions '{"prompt": [1, 99999]}' "${AUTH[@]}"
expect_error 400 prompt POST /v1/completions "{\"prompt\": \"$(printf 'word %.0s' $(seq 1 700))\"}" "${AUTH[@]}"
expect_error 400 session POST /v1/completions '{"prompt": "x", "session": "../etc"}' "${AUTH[@]}"
expect_error 400 messages POST /v1/chat/completions '{"messages": []}' "${AUTH[@]}"
expect_error 400 messages POST /v1/chat/completions '{"messages": [{"role": "robot", "content": "x"}]}' "${AUTH[@]}"
expect_error 400 messages POST /v1/chat/completions '{"messages": [{"role": "user"}]}' "${AUTH[@]}"
code=$(req POST /v1/chat/completions '{"prompt": "x", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}' "${AUTH[@]}")
[ "$code" = 200 ] && grep -q "ignored fields the API does not define: prompt" "$TMP/a.log" && ok ||
    bad "a completions field in a chat request: $code"
expect_error 404 model POST /v1/completions '{"prompt": "x", "model": "gpt-9"}' "${AUTH[@]}"
expect_error 413 - POST /v1/completions "{\"prompt\": \"$(head -c 9000 /dev/zero | tr '\0' a)\"}" "${AUTH[@]}"
code=$(printf '{"prompt": "\xff\xfe bad utf8"}' | curl -s -o "$TMP/body" -w '%{http_code}' "${AUTH[@]}" --data-binary @- "$URL/v1/completions")
[ "$code" = 400 ] && ok || bad "invalid UTF-8 body: $code"

# hostile clients: garbage instead of HTTP, a body shorter than its Content-Length, a client that
# hangs up while its answer is generated; the server keeps answering
printf 'GARBAGE \x01\x02\r\n\r\n' >/dev/tcp/127.0.0.1/"$PORT" 2>/dev/null
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"prompt"' >/dev/tcp/127.0.0.1/"$PORT" 2>/dev/null
curl -s -m 0.05 -o /dev/null "${AUTH[@]}" "$URL/v1/completions" --data-binary '{"prompt": "x", "max_tokens": 32, "ignore_eos": true}'
[ "$(req GET /health)" = 200 ] && ok || bad "/health after hostile clients"
wait_metric lizard_running_sequences 0 && ok || bad "a client that hung up still holds its slot"

# /metrics: Prometheus text with the counters moved
curl -s "$URL/metrics" >"$TMP/metrics"
for name in 'lizard_requests_total{status="400"}' lizard_time_to_first_token_seconds_count \
    lizard_inter_token_latency_seconds_count lizard_generation_tokens_total; do
    v=$(awk -v n="$name" '$1 == n {print $2}' "$TMP/metrics")
    [ "${v:-0}" -gt 0 ] 2>/dev/null && ok || bad "metric $name = '$v'"
done
grep -q '^lizard_state_bytes_in_use ' "$TMP/metrics" && grep -q '^lizard_queue_depth 0' "$TMP/metrics" && ok ||
    bad "gauges missing: $(head -c 400 "$TMP/metrics")"
stop_server && ok || bad "SIGTERM: exit code $?"

# ---- one slot, a queue of one: 429, a disconnect frees the slot, drain, sessions on disk ----
if [ -z "$NP" ]; then
    mkdir "$TMP/sd"
    start_server "$TMP/b.log" --model "$M" --max-batch 1 --queue-size 1 --max-tokens 100000 --max-prompt-tokens 64 \
        --session-memory 1 --session-dir "$TMP/sd" --drain-timeout 600 || { bad "server B did not start"; exit 1; }
    curl -sN -o "$TMP/long" "$URL/v1/completions" --data-binary '{"prompt": "x", "max_tokens": 100000, "ignore_eos": true, "stream": true}' &
    long=$!
    wait_metric lizard_running_sequences 1 && ok || bad "long request not running"
    curl -s -o "$TMP/queued" -w '%{http_code}' "$URL/v1/completions" --data-binary '{"prompt": "y", "max_tokens": 4}' >"$TMP/queued.code" &
    queued=$!
    wait_metric lizard_queue_depth 1 && ok || bad "second request not queued"
    expect_error 429 - POST /v1/completions '{"prompt": "z", "max_tokens": 4}'
    kill "$long" 2>/dev/null; wait "$long" 2>/dev/null
    wait "$queued"
    [ "$(cat "$TMP/queued.code")" = 200 ] && ok || bad "queued request after the disconnect: $(cat "$TMP/queued.code")"
    wait_metric lizard_running_sequences 0 && ok || bad "the disconnected request still holds its slot"
    # sessions spilled to disk (a 1-byte memory budget) continue the same way
    A1=$(serve_ids "$P1" 6 disk1)
    [ -f "$TMP/sd/disk1.lzs" ] && ok || bad "session not spilled to --session-dir: $(ls "$TMP/sd")"
    A2=$(serve_ids "$P2" 6 disk1)
    [ "$A2" = "$(generate_ids "$P1,$A1,$P2" 6)" ] && ok || bad "spilled session answer $A2"
    # SIGTERM while a request runs: it finishes (within --drain-timeout), its session is saved, exit 0
    curl -s -o "$TMP/drain" "$URL/v1/completions" --data-binary '{"prompt": "x", "max_tokens": 1000, "ignore_eos": true, "session": "drain1"}' &
    drainer=$!
    wait_metric lizard_running_sequences 1 && ok || bad "drain request not running"
    stop_server && ok || bad "SIGTERM with a request in flight: exit code $?"
    wait "$drainer"
    [ "$(jget "$TMP/drain" "d['usage']['completion_tokens']")" = 1000 ] && ok || bad "drained request: $(head -c 300 "$TMP/drain")"
    [ -f "$TMP/sd/drain1.lzs" ] && ok || bad "drained session not saved"
    # a restarted server continues a session from the folder
    start_server "$TMP/c.log" --model "$M" --session-dir "$TMP/sd" --chat-template mistral --max-prompt-tokens 512 ||
        bad "server C did not start"
    code=$(req POST /v1/completions '{"prompt": [7, 8], "max_tokens": 3, "session": "disk1"}')
    [ "$code" = 200 ] && [ "$(jget "$TMP/body" "d['usage']['prompt_tokens']")" = 3 ] && ok ||
        bad "session after restart: $code $(cat "$TMP/body")"
    # the Mistral format by flag: [INST] ... [/INST]; a session's second turn is only its new message
    grep -q "chat format mistral (--chat-template)" "$TMP/c.log" && ! grep -q "names no chat format" "$TMP/c.log" &&
        ok || bad "chat format line: $(cat "$TMP/c.log")"
    req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "session": "m1"}' >/dev/null
    first=$(jget "$TMP/body" "d['usage']['prompt_tokens']")
    req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "session": "m1"}' >/dev/null
    second=$(jget "$TMP/body" "d['usage']['prompt_tokens']")
    # "[INST] Hi [/INST]" with BOS first; then the pending token, "</s>" unless it ended at eos, and the message
    [ -n "$first" ] && [ -n "$second" ] && [ "$second" -le $((first + 1)) ] && [ "$second" -ge $((first - 1)) ] && ok ||
        bad "mistral chat session prompt tokens: $first then $second"
    stop_server && ok || bad "server C exit"
fi

echo "serve_test${NP:+ (mpirun -np $NP)}: $pass passed, $fail failed"
[ $fail -eq 0 ]
