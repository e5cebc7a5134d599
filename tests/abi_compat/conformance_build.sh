#!/bin/sh
# conformance_build.sh HARNESS PLUGIN.so NOTE: the harness on one build of
# the template must pass (exit 0), and its JSON report must hold NOTE, a
# message only this build gives (so the check cannot pass on another build
# or when the clause that tells them apart did not run). The harness's
# human summary is printed.
set -u
harness=$1 plugin=$2 note=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$harness" "$plugin" --format json --output "$dir/report.json" --timeout 120 2>"$dir/human"
rc=$?
cat "$dir/human"
if [ "$rc" -ne 0 ]; then
    echo "conformance_build: the harness exited $rc on $plugin (want 0)" >&2
    exit 1
fi
if ! grep -qF -- "$note" "$dir/report.json"; then
    echo "conformance_build: the report on $plugin lacks '$note'" >&2
    exit 1
fi
echo "conformance_build: $plugin passes; the report says '$note'"
