#!/bin/sh
# One short fuzz run for ctest: TARGET SEEDS WORKDIR SECONDS MIN_RUNS MAX_LEN [DICT].
# Runs every seed (regression inputs included) and then mutates them for
# SECONDS; new inputs go to WORKDIR, never into the source tree. Fails on any
# finding (crash, leak, more than 2 GB, or an input slower than
# ILAB_FUZZ_TIMEOUT seconds — 5 by default, as CI machines are busy; the long
# run in scripts/fuzz.sh uses 1), and when fewer than MIN_RUNS inputs ran: a
# run that did not happen must not pass.
set -eu
target=$1 seeds=$2 work=$3 seconds=$4 min_runs=$5 max_len=$6 dict=${7:-}
mkdir -p "$work/corpus" "$work/findings"
log="$work/log.txt"
set -- -max_total_time="$seconds" -timeout="${ILAB_FUZZ_TIMEOUT:-5}" -rss_limit_mb=2048 -max_len="$max_len" \
       -print_final_stats=1 -artifact_prefix="$work/findings/"
[ -n "$dict" ] && set -- "$@" -dict="$dict"
if ! "$target" "$@" "$work/corpus" "$seeds" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $(basename "$target") found a problem; the input is in $work/findings/" >&2
    exit 1
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
echo "$(basename "$target"): $runs inputs in ${seconds}s, $cov"
if [ -z "$runs" ] || [ "$runs" -lt "$min_runs" ]; then
    tail -n 20 "$log"
    echo "fuzz: $(basename "$target") ran ${runs:-no} inputs, fewer than $min_runs" >&2
    exit 1
fi
