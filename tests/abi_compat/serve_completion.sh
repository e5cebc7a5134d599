#!/bin/sh
# serve_completion.sh URL [MODEL]: one short completion from `inferlab serve`
# at URL (started by with_serve.sh): 8 greedy tokens, finish reason length,
# and, given MODEL, the answer's model starts with it (the backend that was
# meant answered). Bounded: the request gets 20 s.
body=$(curl -s --max-time 20 "$1/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": true}')
if ! printf '%s' "$body" | grep -q '"finish_reason": *"length"' ||
    ! printf '%s' "$body" | grep -Eq '"completion_tokens": *8[,}]' ||
    ! printf '%s' "$body" | grep -q "\"model\": *\"${2:-}"; then
    echo "serve_completion: unexpected answer: $body" >&2
    exit 1
fi
echo "serve_completion: $body"
