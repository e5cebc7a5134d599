#!/bin/sh
# serve_e2e.sh INFERLAB BACKEND BASE_URL [--set ...]...: `inferlab serve`
# in front of an adapter pointed at BASE_URL; one streamed completion must
# arrive with text chunks (at least 4 of the 8 tokens have text), finish
# reason length and [DONE]. Bounded: the server
# gets 10 s to listen, the request 20 s.
inferlab=$1 backend=$2 url=$3
shift 3
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
"$inferlab" serve --backend "$backend" --port 0 --set "$backend.base_url=$url" "$@" \
    >"$dir/out" 2>"$dir/err" &
pid=$!
i=0
while ! grep -q 'listening on' "$dir/out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "inferlab serve did not start:" >&2; cat "$dir/err" >&2; exit 1
    fi
    sleep 0.1
done
addr=$(grep -o 'http://[0-9.:]*' "$dir/out" | head -1)
curl -sN --max-time 20 "$addr/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Elizabeth said", "max_tokens": 8, "stream": true, "temperature": 0,
         "ignore_eos": true}' >"$dir/sse"
chunks=$(grep -c '^data: {' "$dir/sse")
if [ "$chunks" -lt 4 ] || ! grep -q '"finish_reason":"length"' "$dir/sse" ||
    ! grep -q '^data: \[DONE\]' "$dir/sse" || ! grep -q '"text":"[^"]' "$dir/sse"; then
    echo "unexpected stream ($chunks chunks):" >&2; cat "$dir/sse" "$dir/err" >&2; exit 1
fi
