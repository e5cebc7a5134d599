#!/bin/sh
# For each case in cases.txt: the driver on build/base.so (must be OK) and on
# build/bug_ID.so (must be VIOLATION). One line per case to stdout and to
# run_all-results.txt; exit status 1 if any case is not base=OK variant=VIOLATION.
cd "$(dirname "$0")" || exit 2
out=run_all-results.txt
: > "$out"
bad=0
for id in $(grep -v '^#' cases.txt | cut -f1); do
    b=$(timeout 300 ./build/driver build/base.so "$id" 2>&1 | tail -n 1)
    v=$(timeout 300 ./build/driver "build/bug_$id.so" "$id" 2>&1 | tail -n 1)
    bs=$(printf '%s' "$b" | cut -d: -f1)
    vs=$(printf '%s' "$v" | cut -d: -f1)
    [ -n "$bs" ] || bs=NONE
    [ -n "$vs" ] || vs=NONE
    line="$id base=$bs variant=$vs"
    [ "$bs" = OK ] && [ "$vs" = VIOLATION ] || { bad=$((bad + 1)); line="$line   <-- base: $b | variant: $v"; }
    echo "$line" | tee -a "$out"
    printf '%s\t%s\n' "$id" "$v" >> run_all-evidence.tmp
done
mv -f run_all-evidence.tmp run_all-evidence.txt 2>/dev/null
if ./build/driver build/base.so --manifest | cmp -s - manifest.yaml; then
    echo "manifest.yaml equals the manifest base.so embeds" | tee -a "$out"
else
    echo "manifest.yaml DIFFERS from the manifest base.so embeds" | tee -a "$out"; bad=$((bad + 1))
fi
n=$(grep -vc '^#' cases.txt)
echo "summary: $((n - bad < 0 ? 0 : n - bad))/$n cases base=OK variant=VIOLATION" | tee -a "$out"
[ "$bad" -eq 0 ]
