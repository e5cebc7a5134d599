#!/bin/sh
# run_compare.sh INFERLAB ADAPTER URL: `inferlab run --backend ADAPTER` against
# the `inferlab serve --backend torchlike` at URL gives the same tokens (id
# and text, in --json) and finish as `inferlab run --backend torchlike`,
# with the CLI's default sampling (seeded) and greedy.
inferlab=$1 adapter=$2 url=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
for mode in "--seed 11" "--temperature 0"; do
    # shellcheck disable=SC2086 # $mode is two words on purpose
    set -- --prompt "It is a truth universally acknowledged" --max-tokens 48 --ignore-eos --json $mode
    "$inferlab" run --backend torchlike "$@" >"$dir/direct" 2>"$dir/direct.err"
    rc_d=$?
    "$inferlab" run --backend "$adapter" --set "$adapter.base_url=$url" "$@" \
        >"$dir/adapter" 2>"$dir/adapter.err"
    rc_a=$?
    # logprobs are printed with other digits after a trip through JSON, and
    # timings differ: compare ids, texts, the finish reason and usage
    for side in direct adapter; do
        sed -e 's/,"logprob":[^}]*}/}/' -e 's/,"ttft_seconds".*//' "$dir/$side" >"$dir/$side.cut"
    done
    tokens=$(grep -c '"type":"token"' "$dir/direct.cut")
    if [ "$rc_d" -ne 0 ] || [ "$rc_a" -ne 0 ] || [ "$tokens" -ne 48 ] ||
        ! grep -q '"reason":"length"' "$dir/direct.cut" || ! cmp -s "$dir/direct.cut" "$dir/adapter.cut"; then
        echo "run $mode: direct exit $rc_d, adapter exit $rc_a, $tokens direct tokens; the outputs:" >&2
        diff "$dir/direct.cut" "$dir/adapter.cut" >&2
        cat "$dir/direct.err" "$dir/adapter.err" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "inferlab run through $adapter -> inferlab serve == torchlike direct (seeded, greedy)"
exit $status
