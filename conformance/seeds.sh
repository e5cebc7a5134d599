#!/bin/sh
# False failures over many seeds: run the whole harness on correct plugins
# with --seed FIRST..LAST and report every test that did not pass. A
# correct plugin must pass on every seed (issue 23: 20 seeds in a row).
#
#   conformance/seeds.sh HARNESS FIRST LAST PLUGIN.so... [-- harness options]
#
# Exit 0 when every run passed (or skipped as a whole), 1 otherwise. One
# line per run (plugin, seed, result, seconds) and, for a failing run, its
# non-passing tests.
set -u
harness=$1 first=$2 last=$3
shift 3
plugins=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do plugins="$plugins $1"; shift; done
[ $# -gt 0 ] && shift
status=0
for p in $plugins; do
    seed=$first
    while [ "$seed" -le "$last" ]; do
        t0=$(date +%s)
        out=$("$harness" "$p" --seed "$seed" "$@" 2>&1)
        rc=$?
        t1=$(date +%s)
        echo "$(basename "$p") seed $seed exit $rc $((t1 - t0)) s"
        if [ $rc -ne 0 ]; then
            status=1
            printf '%s\n' "$out" | grep -E '^  (FAIL|CRASH|TIMEOUT|ERROR) ' | sed 's/^/    /'
        fi
        seed=$((seed + 1))
    done
done
exit $status
