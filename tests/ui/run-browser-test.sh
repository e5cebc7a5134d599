#!/bin/sh
# usage: run-browser-test.sh SCRIPT ARTIFACT_DIR INFERLAB CONFORMANCE PLUGIN.so...
# Runs browser_test.mjs with the system Chromium. Exit 77 (ctest: skipped)
# only when no chromium is installed; a missing Node fails (both come from
# scripts/install-deps.sh --test).
set -u
command -v node >/dev/null 2>&1 || { echo "FAILED: node is not installed (scripts/install-deps.sh --test installs it)"; exit 1; }
browser=""
for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then browser=$(command -v "$b"); break; fi
done
if [ -z "$browser" ]; then
    echo "SKIPPED: chromium is not installed (scripts/install-deps.sh --test installs it)"
    exit 77
fi
script=$1
shift
exec timeout 100 node "$script" "$browser" "$@"
