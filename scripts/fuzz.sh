#!/bin/sh
# The long fuzz run (docs/fuzzing.md): every libFuzzer target in fuzz/, one
# after another, each until 1,000,000 executions, or for SECONDS each when
# given. Not part of the test suite (ctest runs each target for seconds).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Builds build-fuzz/ (clang, -DILAB_FUZZ=ON) when needed. The corpus each
# target grows is kept in build-fuzz/fuzz-run/<target>/corpus/ and is reused
# by the next run; findings (crash-*, leak-*, timeout-*, oom-*) land in
# build-fuzz/fuzz-run/<target>/findings/ (a timeout that does not reproduce
# when its input runs alone is load on the machine: it goes to spurious/ and
# the run resumes). Prints one line per target:
# executions, time, exec/s, coverage (edges, features), corpus size and
# findings. Exit status 1 when any target had a finding.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD_FUZZ:-build-fuzz}
seconds=${1:-}
[ "$seconds" = 0 ] && seconds=   # 0: until 1,000,000 executions, as with none
[ $# -gt 0 ] && shift
targets=${*:-"manifest settings checkpoint tokenizer_bin tokenizer gguf http_request sglang_request chat_template text_stream"}

# Largest input per target (as MAX_LEN in fuzz/CMakeLists.txt).
max_len_of() {
    case $1 in
        gguf) echo 16384 ;;   # seeds are whole small models
        *) echo 4096 ;;
    esac
}

scripts/install-deps.sh --fuzz   # clang and libFuzzer
cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DILAB_FUZZ=ON >/dev/null
cmake --build "$BUILD" --target fuzz_targets -j"${JOBS:-2}" >/dev/null

# One libFuzzer run of target $1 in $dir; limit "$2" (-runs=N or
# -max_total_time=S). Appends to $dir/log.txt; returns libFuzzer's status.
run_once() {
    set -- "$1" "$2" -timeout=1 -rss_limit_mb=2048 -max_len="$(max_len_of "$1")" -print_final_stats=1 \
           -artifact_prefix="$dir/findings/"
    t=$1
    shift
    [ -f "fuzz/dict/$t.dict" ] && set -- "$@" -dict="fuzz/dict/$t.dict"
    "$BUILD/fuzz/fuzz_$t" "$@" "$dir/corpus" "fuzz/corpus/$t" >"$dir/last.txt" 2>&1
    rc=$?
    cat "$dir/last.txt" >>"$dir/log.txt"
    return $rc
}

status=0
printf '%-14s %10s %7s %8s %7s %7s %7s %s\n' target executions seconds exec/s edges features corpus findings
for t in $targets; do
    dir="$BUILD/fuzz-run/$t"
    mkdir -p "$dir/corpus" "$dir/findings" "$dir/spurious"
    : >"$dir/log.txt"
    start=$(date +%s)
    total=0 spurious=0 ok=0
    # A timeout on this shared machine may be load, not the input: such an
    # input is run again alone, and when it then takes less than the limit
    # it is set aside (spurious/) and the run resumes from the grown corpus.
    while :; do
        if [ -n "$seconds" ]; then
            left=$(( seconds - ($(date +%s) - start) ))
            [ "$left" -gt 0 ] || { ok=1; break; }
            limit="-max_total_time=$left"
        else
            left=$(( 1000000 - total ))
            [ "$left" -gt 0 ] || { ok=1; break; }
            limit="-runs=$left"
        fi
        if run_once "$t" "$limit"; then rc=0; else rc=$?; fi
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/last.txt")
        total=$(( total + ${n:-0} ))
        [ "$rc" = 0 ] && { ok=1; [ -n "$seconds" ] && break; continue; }
        grep -q 'ERROR: libFuzzer: timeout' "$dir/last.txt" || break
        art=$(ls -t "$dir/findings"/timeout-* 2>/dev/null | head -n 1)
        [ -n "$art" ] && [ "$spurious" -lt 20 ] || break
        "$BUILD/fuzz/fuzz_$t" -timeout=1 "$art" >/dev/null 2>&1 || break
        mv "$art" "$dir/spurious/"
        spurious=$(( spurious + 1 ))
    done
    took=$(( $(date +%s) - start ))
    [ "$ok" = 1 ] || status=1
    rate=$(( total / (took > 0 ? took : 1) ))
    edges=$(grep -o 'cov: [0-9]*' "$dir/log.txt" | tail -n 1 | cut -d' ' -f2)
    features=$(grep -o 'ft: [0-9]*' "$dir/log.txt" | tail -n 1 | cut -d' ' -f2)
    corpus=$(ls "$dir/corpus" | wc -l)
    findings=$(ls "$dir/findings" | wc -l)
    [ "$ok" = 1 ] || findings="$findings (see $dir/log.txt)"
    [ "$spurious" = 0 ] || findings="$findings; $spurious load timeouts did not reproduce"
    printf '%-14s %10s %7s %8s %7s %7s %7s %s\n' "$t" "$total" "$took" "$rate" \
        "${edges:-?}" "${features:-?}" "$corpus" "$findings"
done
exit $status
