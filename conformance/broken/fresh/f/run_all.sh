#!/bin/sh
# For every case in cases.txt: the driver on build/base.so must print OK,
# on build/bug_N.so VIOLATION. One line per case; exit 1 when any case fails.
cd "$(dirname "$0")" || exit 2
fail=0
grep -v '^#' cases.txt | while IFS="$(printf '\t')" read -r id clauses bug evidence; do
    [ -n "$id" ] || continue
    base=$(./build/driver build/base.so "$id" 2>&1 | head -1)
    var=$(./build/driver "build/bug_$id.so" "$id" 2>&1 | head -1)
    case "$base" in OK) b=ok ;; *) b=bad ;; esac
    case "$var" in VIOLATION:*) v=ok ;; *) v=bad ;; esac
    if [ "$b" = ok ] && [ "$v" = ok ]; then verdict=PASS; else verdict=FAIL; fi
    printf '%s\tcase %s\t[%s]\tbase: %s\tvariant: %s\n' "$verdict" "$id" "$clauses" "$base" "$var"
done | tee build/run_all.out
! grep -q '^FAIL' build/run_all.out
