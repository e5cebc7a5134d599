#!/bin/sh
# Run some ctest tests N times in a row while stress-ng keeps every core
# busy, and fail if any run fails: a test that fails under load is a bug.
#
#   scripts/stress-test.sh BUILD REGEX [RUNS [WORKERS]]
#   scripts/stress-test.sh build '^server\.http_limits$' 20 2
#
# RUNS defaults to 20, WORKERS (stress-ng --cpu) to the number of cores.
# Prints one line per run (status and seconds) and a summary.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUILD REGEX [RUNS [WORKERS]]" >&2; exit 2; }
build=$1
regex=$2
runs=${3:-20}
workers=${4:-$(nproc)}
command -v stress-ng >/dev/null 2>&1 ||
    { echo "stress-test: stress-ng is not installed (scripts/install-deps.sh --test)" >&2; exit 1; }
[ -f "$build/CTestTestfile.cmake" ] || { echo "stress-test: $build is not a build folder" >&2; exit 1; }

stress-ng --cpu "$workers" --timeout 24h --quiet &
load=$!
trap 'kill "$load" 2>/dev/null || true; wait "$load" 2>/dev/null || true' EXIT INT TERM
sleep 1
failed=0
i=0
while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    start=$(date +%s.%N)
    if (cd "$build" && ctest -R "$regex" --no-tests=error -V \
            > "ctest-stress-$i.log" 2>&1); then
        status=passed
    else
        status=FAILED
        failed=$((failed + 1))
    fi
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    printf 'run %2d: %s in %.1f s, load %s\n' "$i" "$status" "$secs" \
        "$(cut -d' ' -f1 /proc/loadavg)"
done
echo "stress-test: $((runs - failed)) of $runs runs passed under stress-ng --cpu $workers" \
     "(logs: $build/ctest-stress-N.log)"
[ "$failed" -eq 0 ]
