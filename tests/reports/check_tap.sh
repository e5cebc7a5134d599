#!/bin/sh
# check_tap.sh PROVE HARNESS GOOD_PLUGIN UNAVAILABLE_PLUGIN BROKEN_PLUGIN
#
# The harness's TAP report, read by prove (Test::Harness) and counted here:
#  - a passing run (a good plugin and an unavailable one): the harness exits
#    0, the plan line is 1..N for exactly N test lines, prove accepts it, and
#    the unavailable plugin's tests are "# SKIP" with the reason;
#  - a failing run (the good plugin and a broken one): the harness exits 1,
#    the plan still matches, prove rejects it, and the broken plugin's clause
#    is a "not ok" line.
# Every step's status is checked; nothing is allowed to fail silently.
set -u
PROVE=$1 HARNESS=$2 GOOD=$3 UNAVAILABLE=$4 BROKEN=$5
fail() { echo "check_tap: $*" >&2; exit 1; }
[ -x "$PROVE" ] || fail "prove not found ('$PROVE'): run scripts/install-deps.sh --test"

# plan_matches FILE: the plan says 1..N and there are exactly N test lines.
plan_matches() {
    plan=$(grep -E '^1\.\.[0-9]+$' "$1") || fail "$1: no plan line"
    [ "$(printf '%s\n' "$plan" | wc -l)" -eq 1 ] || fail "$1: more than one plan line"
    planned=${plan#1..}
    ran=$(grep -cE '^(not )?ok [0-9]+ ' "$1")
    [ "$planned" -eq "$ran" ] || fail "$1: plan 1..$planned but $ran test lines"
    [ "$ran" -gt 0 ] || fail "$1: no test lines"
}

"$HARNESS" "$GOOD" "$UNAVAILABLE" --format tap --output ok.tap >ok.out 2>&1
rc=$?
[ "$rc" -eq 0 ] || { cat ok.out >&2; fail "passing run exited $rc, expected 0"; }
plan_matches ok.tap
"$PROVE" -e cat ok.tap >prove-ok.out 2>&1 || { cat prove-ok.out >&2; fail "prove rejects ok.tap"; }
grep -q '^ok [0-9]* - .* # SKIP no vLLM server configured' ok.tap ||
    fail "ok.tap: the unavailable plugin's tests are not SKIP with the probe's reason"
if grep -q '^not ok' ok.tap; then fail "ok.tap has a 'not ok' line"; fi

"$HARNESS" "$GOOD" "$BROKEN" --format tap --output bad.tap >bad.out 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat bad.out >&2; fail "failing run exited $rc, expected 1"; }
plan_matches bad.tap
if "$PROVE" -e cat bad.tap >prove-bad.out 2>&1; then
    cat prove-bad.out >&2
    fail "prove accepts bad.tap"
fi
grep -qE '^not ok [0-9]+ - tokens\.TOK-2\.' bad.tap || fail "bad.tap: no 'not ok' line for TOK-2"
echo "check_tap: OK ($planned and $ran test lines)"
