#!/bin/sh
# expect_run.sh EXIT PATTERN CMD ARG...: run CMD (at most 60 s), require its
# exit code to be EXIT and its output (stdout + stderr) to contain PATTERN
# (grep -E). Prints the output when either does not hold.
want_rc=$1 pattern=$2
shift 2
out=$(timeout 60 "$@" 2>&1)
rc=$?
if [ "$rc" -ne "$want_rc" ] || ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
    printf 'command: %s\nexit %s (want %s), output:\n%s\nwant a line matching: %s\n' \
        "$*" "$rc" "$want_rc" "$out" "$pattern" >&2
    exit 1
fi
