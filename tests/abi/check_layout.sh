#!/bin/sh
# The ABI layout test: the SDK's structs and constants as this machine's
# compiler lays them out, and as Clang lays them out for aarch64, each
# compared with the committed record (sdk/abi/<arch>.layout). Fails, printing
# every change, when an existing member moved or changed size; appending is
# allowed (and listed).
#   check_layout.sh ABI_LAYOUT_EXE SOURCE_DIR CLANG            check
#   check_layout.sh ABI_LAYOUT_EXE SOURCE_DIR CLANG --record   rewrite the records
#                                                              (after appending)
set -eu
exe=$1 src=$2 clang=$3 record=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

native=$(uname -m)
if [ "$record" = --record ]; then
    "$exe" print > "$src/sdk/abi/$native.layout"
fi
if [ -f "$src/sdk/abi/$native.layout" ]; then
    "$exe" print > "$tmp/$native.layout"
    "$exe" compare "$src/sdk/abi/$native.layout" "$tmp/$native.layout" || status=1
else
    echo "check_layout: no committed layout for this machine ($native): record one with" >&2
    echo "  $exe print > sdk/abi/$native.layout" >&2
    status=1
fi

# The other LP64 target, laid out by Clang without running anything: the
# table is compiled to assembly and its numbers read back in order.
cross=aarch64
[ "$native" = aarch64 ] && cross=x86_64
"$clang" --target=$cross-linux-gnu -ffreestanding -std=c11 -S -o "$tmp/values.s" \
    -I "$src/sdk/include" -I "$src/sdk/abi" "$src/tests/abi/layout_values.c"
awk '$1 == ".xword" || $1 == ".quad" { print $2 - 1 }' "$tmp/values.s" > "$tmp/numbers"
"$exe" names > "$tmp/names"
# Pair each name line with its one or two numbers.
awk 'NR == FNR { num[++n] = $1; next }
     $1 == "struct" { printf "struct %s size %s align %s\n", $2, num[++i], num[++i]; next }
     $1 == "member" { printf "member %s offset %s size %s\n", $2, num[++i], num[++i]; next }
     $1 == "value"  { printf "value %s %s\n", $2, num[++i]; next }
     END { if (i != n) { printf "check_layout: %d numbers for %d fields\n", n, i > "/dev/stderr"; exit 1 } }' \
    "$tmp/numbers" "$tmp/names" > "$tmp/$cross.layout"
if [ "$record" = --record ]; then
    cp "$tmp/$cross.layout" "$src/sdk/abi/$cross.layout"
fi
"$exe" compare "$src/sdk/abi/$cross.layout" "$tmp/$cross.layout" || status=1
exit $status
