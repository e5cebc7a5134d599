#!/bin/sh
# relative_path.sh HARNESS PLUGIN.so: run from the plugin's folder, the
# harness given the bare file name ("ok.so", no slash; once handed to
# dlopen()'s library search, failing every test) and "./ok.so" reports
# exactly what it reports given the absolute path (TAP, the ABI-1..6 tests:
# no measured figures in them; durations blanked). A missing file is one
# usage error (exit 2) naming it, and no test runs.
set -u
harness=$1 plugin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$(dirname "$plugin")" || exit 1
base=$(basename "$plugin")
report() { # report FORM OUT
    "$harness" "$1" --format tap --include 'ABI-[1-6]' >"$tmp/raw" 2>&1
    rc=$?
    sed -E 's/[0-9]+\.[0-9]+ ?s/Ts/g' "$tmp/raw" >"$2"
    echo "exit $rc" >>"$2"
}
report "$(pwd)/$base" "$tmp/absolute"
report "$base" "$tmp/bare"
report "./$base" "$tmp/dot"
status=0
if ! grep -q '^ok ' "$tmp/absolute" || ! grep -qx 'exit 0' "$tmp/absolute"; then
    echo "relative_path: the harness did not pass $plugin given its absolute path:" >&2
    cat "$tmp/absolute" >&2
    status=1
fi
for form in bare dot; do
    if ! diff -u "$tmp/absolute" "$tmp/$form"; then
        echo "relative_path: the report for the $form name differs from the absolute path's" >&2
        status=1
    fi
done
"$harness" "missing-$base" >"$tmp/missing" 2>&1
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "plugin 'missing-$base': No such file or directory" "$tmp/missing" ||
    grep -Eq '^(ok|not ok) |^ +FAIL ' "$tmp/missing"; then
    echo "relative_path: a missing plugin file gave exit $rc (want 2, one message, no test):" >&2
    cat "$tmp/missing" >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "relative_path: '$base', './$base' and the absolute path give the same report"
exit $status
