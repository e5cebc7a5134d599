#!/bin/sh
# check_exports.sh PLUGIN_DIR [EXPECTED.so...]: every .so in PLUGIN_DIR (and
# each expected file, which must exist) exports exactly one defined dynamic
# symbol, ilab_plugin_entry.
set -u
dir=$1
shift
fail=0
checked=0
for f in "$@"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: expected plugin $f was not built"
        fail=1
    fi
done
for f in "$dir"/*.so "$@"; do
    [ -f "$f" ] || continue
    symbols=$(nm -D --defined-only "$f" | awk '{print $NF}' | sort -u)
    if [ "$symbols" != "ilab_plugin_entry" ]; then
        echo "FAIL: $f exports:"
        echo "$symbols" | sed 's/^/    /'
        fail=1
    else
        echo "ok: $f exports only ilab_plugin_entry"
    fi
    checked=$((checked + 1))
done
if [ "$checked" -eq 0 ]; then
    echo "FAIL: no plugin found in $dir"
    fail=1
fi
exit $fail
