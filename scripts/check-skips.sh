#!/bin/sh
# check-skips.sh CTEST_OUTPUT LAST_TEST_LOG ALLOWLIST
#
# Fails when a test skipped without being on the allow-list:
#  - tests ctest reports as "(Skipped)" (a SKIP_RETURN_CODE exit, see
#    tests/support/ilab_skip.h) or "(Disabled)";
#  - tests ctest reports as passed whose output still shows a cmocka skip
#    ("[  SKIPPED ]"): a skip() that bypassed ilab_skip.h.
# ALLOWLIST: one "test.name  reason" a line; '#' starts a comment. An entry
# without a reason is an error.
set -eu
OUT=$1 LOG=$2 ALLOW=$3
fail=0

[ -f "$OUT" ] || { echo "check-skips: no ctest output $OUT" >&2; exit 1; }
[ -f "$LOG" ] || { echo "check-skips: no ctest log $LOG" >&2; exit 1; }
[ -f "$ALLOW" ] || { echo "check-skips: no allow-list $ALLOW" >&2; exit 1; }

bad=$(grep -vE '^[[:space:]]*(#|$)' "$ALLOW" | awk 'NF < 2 {print $1}')
if [ -n "$bad" ]; then
    echo "check-skips: allow-list entries without a reason: $bad" >&2
    exit 1
fi
allowed() { grep -vE '^[[:space:]]*#' "$ALLOW" | awk '{print $1}' | grep -qxF "$1"; }

# "  66 - support.x (Skipped)" in the summary after "did not run:"
skipped=$(sed -n '/^The following tests did not run:/,/^$/p' "$OUT" |
          sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (\(Skipped\|Disabled\))$/\1/p')
for t in $skipped; do
    if allowed "$t"; then
        echo "check-skips: $t skipped (allowed: $(grep -E "^$t[[:space:]]" "$ALLOW" | cut -d' ' -f2- | sed 's/^ *//'))"
    else
        echo "check-skips: $t SKIPPED and not on $ALLOW" >&2
        fail=1
    fi
done

# Blocks of LastTest.log: "N/M Test: name" ... "Test Passed." with
# "[  SKIPPED ]" in between.
hidden=$(awk '
    /^[0-9]+\/[0-9]+ Test: / { name = $3; skip = 0; next }
    /^\[  SKIPPED \]/ { skip = 1 }
    /^Test Passed\./ { if (skip) print name; skip = 0 }
' "$LOG")
for t in $hidden; do
    echo "check-skips: $t passed but its output shows a cmocka skip (use tests/support/ilab_skip.h)" >&2
    fail=1
done

ran=$(grep -cE '^[[:space:]]*[0-9]+/[0-9]+ Test +#' "$OUT" || true)
echo "check-skips: $ran tests ran, $(echo $skipped | wc -w) skipped, $(echo $hidden | wc -w) hidden skips"
exit $fail
