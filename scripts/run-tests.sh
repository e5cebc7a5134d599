#!/bin/bash
# run-tests.sh [BUILD_DIR] [JOBS]
#
# The test command behind `make test`: every ctest test of BUILD_DIR, with
# output on failure; it fails when no test ran (--no-tests=error), when any
# test failed, and when any test skipped that tests/skip-allowlist.txt does
# not allow (scripts/check-skips.sh).
set -u -o pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
BUILD=${1:-build}
JOBS=${2:-2}

cd "$BUILD"
# ILAB_CTEST_ARGS: extra ctest arguments (e.g. "--timeout 600", or
# "-LE <label>" for a stage that leaves a label out).
# shellcheck disable=SC2086
ctest --no-tests=error --output-on-failure -j"$JOBS" ${ILAB_CTEST_ARGS:-} 2>&1 | tee ctest.out
rc=$?
"$SRC/scripts/check-skips.sh" ctest.out Testing/Temporary/LastTest.log \
    "$SRC/tests/skip-allowlist.txt" || rc=1
exit "$rc"
