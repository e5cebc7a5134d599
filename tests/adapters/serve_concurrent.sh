#!/bin/sh
# serve_concurrent.sh INFERLAB BACKEND BASE_URL [--set ...]...: four
# requests through `inferlab serve` at once against an engine that streams
# 40 tokens at 25 ms each (1 s a request): thread_safety full means
# concurrent HTTP transfers, so all four end well before the 4 s that one
# at a time would take (bound: 3 s).
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
t0=$(date +%s%N)
pids=""
for k in 1 2 3 4; do
    curl -s --max-time 20 "$addr/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"Elizabeth\", \"max_tokens\": 40, \"ignore_eos\": true, \"seed\": $k}" \
        >"$dir/r$k" &
    pids="$pids $!"
done
wait $pids
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
for k in 1 2 3 4; do
    if ! grep -q '"completion_tokens":40' "$dir/r$k"; then
        echo "request $k did not complete 40 tokens:" >&2; cat "$dir/r$k" "$dir/err" >&2; exit 1
    fi
done
echo "4 concurrent requests of 40 tokens at 25 ms/token: $ms ms"
if [ "$ms" -ge 3000 ]; then
    echo "they ran one at a time (>= 3000 ms)" >&2; exit 1
fi
