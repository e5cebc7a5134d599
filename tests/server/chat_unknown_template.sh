#!/bin/sh
# chat_unknown_template.sh URL: a backend whose chat template is not
# recognised answers a chat request with 400, naming the problem and the
# --chat-template override; completions still work.
set -u
out=$(curl -s --max-time 20 -w ' HTTP=%{http_code}' "$1/v1/chat/completions" \
    -H 'Content-Type: application/json' -d '{"messages": [{"role": "user", "content": "Hi"}]}')
case $out in
*HTTP=400*) ;;
*) echo "chat_unknown_template: want 400, got: $out" >&2; exit 1 ;;
esac
for s in 'not one this server recognises' '--chat-template NAME'; do
    printf '%s' "$out" | grep -qF -- "$s" || { echo "chat_unknown_template: '$s' missing: $out" >&2; exit 1; }
done
echo "chat_unknown_template: ok: $out"
