#!/bin/sh
# serve_e2e.sh URL: against `inferlab serve` at URL (in front of an
# adapter, started by with_serve.sh), one streamed completion must arrive
# with text chunks (at least 4 of the 8 tokens have text), finish reason
# length and [DONE]. Bounded: the request gets 20 s.
addr=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
curl -sN --max-time 20 "$addr/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Elizabeth said", "max_tokens": 8, "stream": true, "temperature": 0,
         "ignore_eos": true}' >"$dir/sse"
chunks=$(grep -c '^data: {' "$dir/sse")
if [ "$chunks" -lt 4 ] || ! grep -q '"finish_reason":"length"' "$dir/sse" ||
    ! grep -q '^data: \[DONE\]' "$dir/sse" || ! grep -q '"text":"[^"]' "$dir/sse"; then
    echo "unexpected stream ($chunks chunks):" >&2; cat "$dir/sse" >&2; exit 1
fi
