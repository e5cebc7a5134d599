#!/bin/sh
# check_sizes_1_0.sh LAYOUT_1_0 ABI_LAYOUT: every "type size" line that the
# ABI 1.0 headers give (layout_1_0) must be the frozen 1.0 size of today's
# SDK (abi_layout frozen-1.0). Prints each line and what it was checked
# against; fails on a difference or a type with no frozen size.
set -eu
have=$("$1") frozen=$("$2" frozen-1.0)
[ -n "$have" ] || { echo "check_sizes_1_0: layout_1_0 printed nothing" >&2; exit 1; }
status=0
printf '%s\n' "$have" | while read -r type size; do
    want=$(printf '%s\n' "$frozen" | awk -v t="$type" '$1 == t { print $2 }')
    if [ -z "$want" ]; then
        echo "MISSING  $type: no frozen 1.0 size in inferlab/struct_size.h"
        exit 1
    elif [ "$want" != "$size" ]; then
        echo "WRONG    $type: the 1.0 headers say $size bytes, ILAB_*_SIZE_1_0 says $want"
        exit 1
    fi
    echo "same     $type: $size bytes in the 1.0 headers and in the frozen 1.0 size"
done || status=1
exit $status
