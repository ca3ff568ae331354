#!/usr/bin/env bash
# openai_client.sh LIZARD - the official OpenAI Node client (npm package
# `openai`, pinned in package-lock.json) against `lizard serve`. Installs it
# with `npm ci` into a temporary folder; skips (exit 77) without node/npm or
# without access to the npm registry.
set -u
LIZARD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found: skipped"; exit 77; }
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
TMP=$(mktemp -d)
LAUNCH=
. "$HERE/lib.sh"
mkdir "$TMP/client"
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/openai_client.mjs" "$TMP/client/"
if ! (cd "$TMP/client" && timeout 180 npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
    echo "npm ci failed (no network or registry?): skipped"; tail -3 "$TMP/npm.log"; exit 77
fi
"$LIZARD" init --config tiny-hybrid --out "$TMP/tiny" --seed 1 >/dev/null 2>&1 || { echo "FAIL: init" >&2; exit 1; }
start_server "$TMP/server.log" --model "$TMP/tiny" --api-key node-key --max-prompt-tokens 512 ||
    { echo "FAIL: server did not start" >&2; exit 1; }
(cd "$TMP/client" && timeout 120 node openai_client.mjs "$URL" node-key)
rc=$?
stop_server || { echo "FAIL: server exit code $?" >&2; rc=1; }
exit $rc
