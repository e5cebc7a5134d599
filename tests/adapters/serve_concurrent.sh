#!/bin/sh
# serve_concurrent.sh URL: four requests through `inferlab serve` at URL
# (in front of an adapter, started by with_serve.sh) at once against an engine that streams
# 40 tokens at 25 ms each (1 s a request): thread_safety full means
# concurrent HTTP transfers, so all four end well before the 4 s that one
# at a time would take (bound: 3 s).
addr=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
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
        echo "request $k did not complete 40 tokens:" >&2; cat "$dir/r$k" >&2; exit 1
    fi
done
echo "4 concurrent requests of 40 tokens at 25 ms/token: $ms ms"
if [ "$ms" -ge 3000 ]; then
    echo "they ran one at a time (>= 3000 ms)" >&2; exit 1
fi
