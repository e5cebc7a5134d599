#!/bin/sh
# check_junit.sh XMLLINT HARNESS GOOD_PLUGIN BROKEN_PLUGIN UNAVAILABLE_PLUGIN
#
# The harness's JUnit report for a run with a failing plugin: the harness
# exits 1; the file is well-formed XML; the counts in <testsuites> equal the
# <testcase>, <failure> and <skipped> elements there are; the broken
# plugin's TOK-2 cases carry a <failure>, the good plugin's none; skips carry
# their reason.
set -u
XMLLINT=$1 HARNESS=$2 GOOD=$3 BROKEN=$4 UNAVAILABLE=$5
fail() { echo "check_junit: $*" >&2; exit 1; }
[ -x "$XMLLINT" ] || fail "xmllint not found ('$XMLLINT'): run scripts/install-deps.sh --test"

"$HARNESS" "$GOOD" "$BROKEN" "$UNAVAILABLE" --format junit --output junit.xml >run.out 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat run.out >&2; fail "harness exited $rc, expected 1"; }
"$XMLLINT" --noout junit.xml || fail "junit.xml is not well-formed"

# xpath EXPR: the value of an XPath number expression
xpath() { "$XMLLINT" --xpath "$1" junit.xml 2>/dev/null || fail "xpath $1 failed"; }
for what in "tests testcase" "failures failure" "skipped skipped"; do
    set -- $what
    said=$(xpath "string(/testsuites/@$1)")
    have=$(xpath "count(//testcase/$2)")
    [ "$2" = testcase ] && have=$(xpath "count(//testcase)")
    [ -n "$said" ] && [ "$said" -eq "$have" ] ||
        fail "<testsuites $1=\"$said\"> but $have <$2> elements"
done
[ "$(xpath "count(/testsuites/testsuite)")" -eq 3 ] || fail "not one <testsuite> per plugin"
bad=$(xpath "count(//testcase[@classname='$(basename "$BROKEN" .so).tokens'][starts-with(@name,'tokens.TOK-2.')]/failure)")
[ "$bad" -ge 1 ] || fail "no <failure> in the broken plugin's TOK-2 cases"
good=$(xpath "count(/testsuites/testsuite[@name='$(basename "$GOOD" .so)']//failure)")
[ "$good" -eq 0 ] || fail "the good plugin has $good <failure> elements"
reasons=$(xpath "count(//skipped[string-length(@message) > 0])")
[ "$reasons" -eq "$(xpath "count(//skipped)")" ] || fail "a <skipped> without a reason"
[ "$reasons" -gt 0 ] || fail "no <skipped> at all"
echo "check_junit: OK"
