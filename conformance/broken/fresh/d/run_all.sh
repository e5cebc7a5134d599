#!/bin/sh
# Runs the driver for every case on the base and on its variant; one line each:
# id  base-result  variant-result  evidence (the variant's VIOLATION line)
cd "$(dirname "$0")"
pass=0; fail=0
for id in $(grep -v "^#" cases.txt | cut -f1); do
    b=$(timeout 200 build/driver build/base.so "$id" 2>&1); brc=$?
    v=$(timeout 200 build/driver build/bug_$id.so "$id" 2>&1); vrc=$?
    bs=$( [ $brc -eq 0 ] && echo OK || echo "FAIL($brc)" )
    vs=$( [ $vrc -eq 1 ] && echo VIOLATION || echo "MISSED($vrc)" )
    ev=$(printf '%s\n' "$v" | grep -m1 '^VIOLATION' | tr '\t' ' ')
    printf '%s\tbase=%s\tvariant=%s\t%s\n' "$id" "$bs" "$vs" "$ev"
    if [ $brc -eq 0 ] && [ $vrc -eq 1 ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
done
echo "summary: $pass cases base OK + variant VIOLATION, $fail not"
