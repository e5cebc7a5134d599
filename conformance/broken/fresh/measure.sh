#!/bin/bash
# measure.sh SET HARNESS OUT.md: the catch rate of a held-out set built by
# its own Makefile (d, e: `make -C SET`), one harness run per variant.
# own clause: the harness fails a test of one of the variant's own clauses
# (--include); any: the full harness fails (run only when the own-clause run
# passed).
HERE=$(cd "$(dirname "$0")/$1" && pwd); H=$2; OUT=$3; D=$HERE/build
{
echo "# set $(basename "$HERE"), $(date -u +%F' '%H:%M) UTC"; echo
echo '## base, full harness'; echo '```'
"$H" --timeout 120 "$D/base.so" 2>&1 | grep -E '^  (FAIL|CRASH|TIMEOUT|ERROR)|passed|failed' | head -20
echo '```'; echo
echo '| variant | clauses | own clause | full harness (own-clause misses only) |'
echo '|---|---|---|---|'
} > "$OUT"
own=0; any=0; total=0
while IFS=$'\t' read -r id clauses desc ev; do
  case "$id" in ''|'#'*) continue;; esac
  total=$((total+1)); so="$D/bug_$id.so"
  re=$(echo "$clauses" | tr -d ' ' | tr ',' '\n' | sed 's/.*/\\.&\\./' | paste -sd'|')
  r=$("$H" --timeout 120 --include "$re" "$so" 2>&1); rc=$?
  if [ $rc -eq 1 ]; then
    t=$(echo "$r" | grep -E '^  (FAIL|CRASH|TIMEOUT|ERROR)' | head -1 | cut -c1-90 | tr '|' '/')
    echo "| $id | $clauses | caught: $t | |" >> "$OUT"; own=$((own+1)); any=$((any+1))
  elif [ $rc -ne 0 ]; then
    echo "| $id | $clauses | rc $rc: $(echo "$r" | tail -1 | cut -c1-80 | tr '|' '/') | |" >> "$OUT"
  else
    f=$("$H" --timeout 120 "$so" 2>&1); frc=$?
    f=$(echo "$f" | grep -E '^  (FAIL|CRASH|TIMEOUT|ERROR)' | cut -c1-70 | tr '|' '/' | tr '\n' ';' | cut -c1-200)
    [ $frc -eq 1 ] && any=$((any+1))
    echo "| $id | $clauses | missed | ${f:-passes everything} |" >> "$OUT"
  fi
done < "$HERE/cases.txt"
echo >> "$OUT"; echo "**own clause: $own of $total; any clause: $any of $total**" >> "$OUT"
echo "own $own/$total any $any/$total"
