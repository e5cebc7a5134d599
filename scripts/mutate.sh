#!/bin/bash
# mutate.sh [options] [ID|GLOB ...]
#
# The mutation score of the test suite (docs/testing.md). Each line of
# scripts/mutations.tsv is one small bug put into the product code; for each
# one this script applies it to a scratch copy of the tree, rebuilds that copy
# incrementally, runs the ctest tests that cover the file and records whether
# they noticed:
#   killed        a covering test failed (or the run hit the time limit)
#   survived      every covering test passed: the suite misses this bug
#   build-failed  the mutant does not compile (a bad mutation, not counted)
# score = killed / (killed + survived), survivors the list marks equivalent
# (a change no test can see, with the reason) left out of both.
#
# The repository is only read. The scratch copy and its build directory live
# in DIR (default ${TMPDIR:-/tmp}/inferlab-mutate): DIR/src is synced from the
# working tree at the start of every run (only changed files are copied, so
# the build stays incremental), DIR/build is one RelWithDebInfo build reused
# by every mutant. The file being mutated is backed up in DIR/state first and
# put back after its mutant ran, on Ctrl-C or any other exit, and at the start
# of the next run if this one was killed outright.
#
# Options:
#   -j N        ctest parallelism (default 2)
#   -b N        build parallelism (default: nproc)
#   -t SECONDS  the most one stage of a mutant's tests may take (default
#               600); each stage's own limit is 60 s + 5 x what its tests took
#               in the baseline run, capped by this. Hitting it counts as
#               killed: a hang is a failure.
#   -l FILE     the mutation list (default scripts/mutations.tsv)
#   -d DIR      scratch directory (default ${TMPDIR:-/tmp}/inferlab-mutate)
#   -r          resume: skip mutations DIR/results.tsv already has a result for
#   -B          skip the baseline run of the covering tests on the unmutated tree
#   -n          only check the list (fields, files, each original occurs once)
#   ID|GLOB     run only these mutations (e.g. sp03 'kv*'); default: all
#
# The list: one mutation a line, tab-separated, '#' starts a comment line:
#   id  file  original  replacement  tests  description  [equivalent: why]
# original/replacement are exact text; \n, \t and \\ stand for a newline, a
# tab and a backslash. `original` must occur exactly once in the file.
# `tests`: ctest -R regexes separated by ';', run in order as stages (a
# later, slower stage runs only when the earlier ones pass). A 7th column starting "equivalent:" marks a
# mutation no test can kill, with the reason.
set -u -o pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
JOBS=2
BUILD_JOBS=$(nproc 2>/dev/null || echo 2)
LIMIT=600
LIST=$REPO/scripts/mutations.tsv
DIR=${TMPDIR:-/tmp}/inferlab-mutate
RESUME=0
BASELINE=1
CHECK_ONLY=0

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
while getopts "j:b:t:l:d:rBnh" opt; do
    case $opt in
    j) JOBS=$OPTARG ;;
    b) BUILD_JOBS=$OPTARG ;;
    t) LIMIT=$OPTARG ;;
    l) LIST=$OPTARG ;;
    d) DIR=$OPTARG ;;
    r) RESUME=1 ;;
    B) BASELINE=0 ;;
    n) CHECK_ONLY=1 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
SELECT=("$@")

die() { echo "mutate: $*" >&2; exit 1; }
[ -f "$LIST" ] || die "no mutation list $LIST"
for n in "$JOBS" "$BUILD_JOBS" "$LIMIT"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "-j, -b and -t take a positive integer, got '$n'"
done

SRC=$DIR/src
BUILD=$DIR/build
STATE=$DIR/state
LOGS=$DIR/logs
RESULTS=$DIR/results.tsv

# --- the list --------------------------------------------------------------

split_tabs() { # $1 -> F[0..]
    local s=$1
    F=()
    while [[ $s == *$'\t'* ]]; do
        F+=("${s%%$'\t'*}")
        s=${s#*$'\t'}
    done
    F+=("$s")
}

IDS=() ; declare -A M_FILE M_FROM M_TO M_TESTS M_DESC M_EQUIV
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    [[ -z ${line//[[:space:]]/} || $line =~ ^[[:space:]]*# ]] && continue
    split_tabs "$line"
    if [ ${#F[@]} -lt 6 ] || [ ${#F[@]} -gt 7 ]; then
        die "$LIST:$lineno: ${#F[@]} tab-separated fields, want 6 or 7 (id file original replacement tests description [equivalent: why])"
    fi
    id=${F[0]}
    [[ $id =~ ^[a-z]+[0-9]+$ ]] || die "$LIST:$lineno: id '$id' is not letters then digits"
    [ -z "${M_FILE[$id]+x}" ] || die "$LIST:$lineno: id $id is used twice"
    [ -n "${F[2]}" ] || die "$LIST:$lineno: $id has an empty original"
    [ "${F[2]}" != "${F[3]}" ] || die "$LIST:$lineno: $id: the replacement equals the original"
    [ -n "${F[4]}" ] || die "$LIST:$lineno: $id names no tests"
    if [ ${#F[@]} -eq 7 ] && [[ ${F[6]} != equivalent:* ]]; then
        die "$LIST:$lineno: $id: the 7th field must start with 'equivalent:'"
    fi
    IDS+=("$id")
    M_FILE[$id]=${F[1]} M_FROM[$id]=${F[2]} M_TO[$id]=${F[3]}
    M_TESTS[$id]=${F[4]} M_DESC[$id]=${F[5]} M_EQUIV[$id]=${F[6]:-}
done < "$LIST"
[ ${#IDS[@]} -gt 0 ] || die "$LIST has no mutations"

selected() {
    [ ${#SELECT[@]} -eq 0 ] && return 0
    local pat
    for pat in "${SELECT[@]}"; do
        # shellcheck disable=SC2053
        [[ $1 == $pat ]] && return 0
    done
    return 1
}
RUN=()
for id in "${IDS[@]}"; do selected "$id" && RUN+=("$id"); done
[ ${#RUN[@]} -gt 0 ] || die "no mutation matches: ${SELECT[*]}"

# Applies (or, with -c, only checks) mutation text to a file: the original
# must occur exactly once.
apply_text() { # mode file from to
    perl -e '
        my ($mode, $file, $from, $to) = @ARGV;
        sub unesc { my $s = shift; $s =~ s/\\(n|t|\\)/$1 eq "n" ? "\n" : $1 eq "t" ? "\t" : "\\"/ge; $s }
        $from = unesc($from); $to = unesc($to);
        open(my $fh, "<", $file) or die "$file: $!\n";
        my $text = do { local $/; <$fh> };
        close $fh;
        my $n = () = $text =~ /\Q$from\E/g;
        if ($n != 1) { print STDERR "$file: the original occurs $n times, not once\n"; exit 3 }
        exit 0 if $mode eq "-c";
        substr($text, index($text, $from), length $from) = $to;
        open($fh, ">", $file) or die "$file: $!\n";
        print $fh $text;
        close $fh or die "$file: $!\n";
    ' -- "$@"
}

bad=0
for id in "${RUN[@]}"; do
    f=$REPO/${M_FILE[$id]}
    if [ ! -f "$f" ]; then
        echo "mutate: $id: no file ${M_FILE[$id]}" >&2; bad=1
    elif ! apply_text -c "$f" "${M_FROM[$id]}" "${M_TO[$id]}"; then
        echo "mutate: $id: the original text occurs in ${M_FILE[$id]} not exactly once" >&2; bad=1
    fi
done
[ $bad -eq 0 ] || die "the list does not match the tree"
if [ $CHECK_ONLY -eq 1 ]; then
    echo "mutate: ${#RUN[@]} mutations, each original found once"
    exit 0
fi

# --- the scratch copy, and putting a mutated file back ----------------------

mkdir -p "$SRC" "$STATE" "$LOGS" || die "cannot create $DIR"
child=""

restore_current() {
    if [ -f "$STATE/current" ]; then
        local path
        path=$(cat "$STATE/current")
        # A plain copy: the file gets a new mtime, so the next build recompiles it.
        cp "$STATE/original" "$SRC/$path" && rm -f "$STATE/current" "$STATE/original"
    fi
}
stop_child() {
    if [ -n "$child" ]; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
        child=""
    fi
}
trap 'restore_current' EXIT
trap 'echo; echo "mutate: interrupted; the scratch copy is restored" >&2; stop_child; restore_current; exit 130' INT TERM HUP

# Runs a command in the background so that a signal reaches the trap at once
# (bash runs traps only after a foreground child ends).
run_bg() { # log cmd...
    local log=$1
    shift
    "$@" > "$log" 2>&1 &
    child=$!
    wait "$child"
    local rc=$?
    child=""
    return $rc
}

restore_current # left over from a run that was killed outright

# Copies every file git knows of (tracked, and untracked unless ignored) that
# differs, and removes scratch files no longer in the tree.
sync_tree() {
    local list=$STATE/files
    (cd "$REPO" && git ls-files -co --exclude-standard) | sort > "$list" || die "git ls-files failed in $REPO"
    local n=0 f
    while IFS= read -r f; do
        [ -f "$REPO/$f" ] || continue
        if ! cmp -s "$REPO/$f" "$SRC/$f"; then
            mkdir -p "$SRC/$(dirname "$f")"
            cp "$REPO/$f" "$SRC/$f" && n=$((n + 1))
        fi
    done < "$list"
    (cd "$SRC" && find . -type f | sed 's|^\./||' | sort) | comm -23 - "$list" |
        while IFS= read -r f; do rm -f "$SRC/$f"; done
    echo "mutate: scratch copy $SRC synced ($n files copied)"
}
sync_tree

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    gen=()
    command -v ninja > /dev/null && gen=(-G Ninja)
    cmake -S "$SRC" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$LOGS/configure.log" 2>&1 ||
        die "configure failed: $LOGS/configure.log"
fi
build() { run_bg "$1" cmake --build "$BUILD" -j"$BUILD_JOBS"; }
echo "mutate: building the unmutated tree in $BUILD"
build "$LOGS/build-base.log" || die "the unmutated tree does not build: $LOGS/build-base.log"

test_numbers() { # regex -> the numbers of the tests it selects
    ctest --test-dir "$BUILD" -N -R "$1" 2>/dev/null | sed -n 's/^ *Test *#\([0-9]*\):.*/\1/p'
}
# The baseline's duration of each test, by name (from the baseline log, or
# the previous run's when -B skips it).
declare -A BASE_SECONDS
read_baseline() {
    local name secs
    while read -r name secs; do BASE_SECONDS[$name]=$secs; done < <(
        sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) \.*  *Passed *\([0-9.]*\) sec$/\1 \2/p' \
            "$LOGS/baseline.log" 2>/dev/null)
}
stage_limit() { # regex -> seconds
    local total=0 name
    for name in $(ctest --test-dir "$BUILD" -N -R "$1" 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p'); do
        total=$(awk -v a="$total" -v b="${BASE_SECONDS[$name]:-60}" 'BEGIN { print a + b }')
    done
    awk -v t="$total" -v cap="$LIMIT" 'BEGIN { l = int(60 + 5 * t); print (l < cap ? l : cap) }'
}
# style.mutation_list checks that every original occurs in the tree: in a
# mutant's tree one does not, by construction, so it is never run here.
NOT_HERE='^style\.mutation_list$'
run_tests() { # log regex
    run_bg "$1" timeout -k 10 "$(stage_limit "$2")" ctest --test-dir "$BUILD" -R "$2" -E "$NOT_HERE" -j"$JOBS" \
        --stop-on-failure --no-tests=error --output-on-failure
}

# Every stage of every selected mutation must select a test: ctest fails
# when none runs, and that must not count as a kill.
declare -A NTESTS NUMBERS
for id in "${RUN[@]}"; do
    IFS=';' read -ra stages <<< "${M_TESTS[$id]}"
    for re in "${stages[@]}"; do
        if [ -z "${NTESTS[$re]+x}" ]; then
            nums=$(test_numbers "$re")
            NTESTS[$re]=$(echo $nums | wc -w)
            [ "${NTESTS[$re]}" -gt 0 ] || die "$id: the test regex '$re' selects no test"
            for n in $nums; do NUMBERS[$n]=1; done
        fi
    done
done
if [ $BASELINE -eq 1 ]; then
    # By number (ctest -I): one regex of them all would pass CMake's limit
    # on parentheses.
    echo "mutate: baseline: the ${#NUMBERS[@]} covering tests on the unmutated tree"
    t0=$(date +%s)
    list=$(printf ',%s' "${!NUMBERS[@]}")
    run_bg "$LOGS/baseline.log" timeout -k 10 "$LIMIT" ctest --test-dir "$BUILD" -I "0,0,0$list" -E "$NOT_HERE" \
        -j"$JOBS" --no-tests=error --output-on-failure ||
        die "the covering tests fail without any mutation (see $LOGS/baseline.log); fix that first"
    echo "mutate: baseline passed in $(( $(date +%s) - t0 )) s"
fi
read_baseline

# --- the mutants ---------------------------------------------------------------

declare -A DONE
if [ $RESUME -eq 1 ] && [ -f "$RESULTS" ]; then
    while IFS=$'\t' read -r id outcome _; do DONE[$id]=$outcome; done < "$RESULTS"
else
    printf 'id\toutcome\tseconds\tfile\tdescription\n' > "$RESULTS"
fi

t_start=$(date +%s)
i=0
for id in "${RUN[@]}"; do
    i=$((i + 1))
    if [ -n "${DONE[$id]+x}" ]; then
        printf '[%d/%d] %-6s %s (from the previous run)\n' "$i" "${#RUN[@]}" "$id" "${DONE[$id]}"
        continue
    fi
    path=${M_FILE[$id]}
    t0=$(date +%s)
    cp "$SRC/$path" "$STATE/original" || die "cannot back up $path"
    echo "$path" > "$STATE/current"
    apply_text -a "$SRC/$path" "${M_FROM[$id]}" "${M_TO[$id]}" || die "$id: cannot apply to $SRC/$path"
    note=""
    if ! build "$LOGS/$id.build.log"; then
        outcome=build-failed
    else
        # Stages in order; the first that fails kills the mutant.
        outcome=survived
        IFS=';' read -ra stages <<< "${M_TESTS[$id]}"
        : > "$LOGS/$id.test.log"
        for re in "${stages[@]}"; do
            run_tests "$LOGS/$id.stage.log" "$re"
            rc=$?
            cat "$LOGS/$id.stage.log" >> "$LOGS/$id.test.log"
            if [ $rc -ne 0 ]; then
                outcome=killed
                [ $rc -eq 124 ] && note=" (time limit)"
                note="$note by $(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (.*/\1/p' "$LOGS/$id.stage.log" | head -1)"
                break
            fi
        done
        rm -f "$LOGS/$id.stage.log"
        [ $outcome = survived ] && [ -n "${M_EQUIV[$id]}" ] && outcome=equivalent
    fi
    restore_current
    dt=$(( $(date +%s) - t0 ))
    printf '%s\t%s\t%s\t%s\t%s%s\n' "$id" "$outcome" "$dt" "$path" "${M_DESC[$id]}" "$note" >> "$RESULTS"
    printf '[%d/%d] %-6s %-12s %4ss  %s: %s%s\n' "$i" "${#RUN[@]}" "$id" "$outcome" "$dt" "$path" "${M_DESC[$id]}" "$note"
done

# The build directory holds the last mutant's objects until it is rebuilt
# from the restored tree: leave it unmutated.
build "$LOGS/build-restored.log" || echo "mutate: rebuilding the restored tree failed: $LOGS/build-restored.log" >&2

# --- the score -------------------------------------------------------------------

killed=0 survived=0 failed=0 equiv=0
survivors=()
while IFS=$'\t' read -r id outcome _; do
    selected "$id" || continue
    case $outcome in
    killed) killed=$((killed + 1)) ;;
    survived) survived=$((survived + 1)); survivors+=("$id") ;;
    build-failed) failed=$((failed + 1)) ;;
    equivalent) equiv=$((equiv + 1)) ;;
    esac
done < <(tail -n +2 "$RESULTS")
total=$((killed + survived + failed + equiv))
echo
echo "mutate: $total mutants: $killed killed, $survived survived, $equiv equivalent (survived, listed as such), $failed did not build"
if [ $((killed + survived)) -gt 0 ]; then
    echo "mutate: score $killed/$((killed + survived)) = $(( 1000 * killed / (killed + survived) / 10 )).$(( 1000 * killed / (killed + survived) % 10 ))% killed (equivalent and unbuildable left out); $(( $(date +%s) - t_start )) s"
fi
[ ${#survivors[@]} -eq 0 ] || echo "mutate: survivors: ${survivors[*]}"
echo "mutate: per mutant: $RESULTS, logs in $LOGS"
