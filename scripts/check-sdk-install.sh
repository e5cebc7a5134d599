#!/bin/sh
# check-sdk-install.sh [BUILD_DIR]
#
# Proves the SDK is usable from an installation alone: installs the "sdk"
# component of BUILD_DIR into a scratch prefix, builds sdk/template out of tree
# with find_package(inferlab) (CMAKE_PREFIX_PATH = that prefix), compiles a file
# with `pkg-config --cflags inferlab`, checks the plugin exports only the
# bootstrap symbol, and runs the conformance harness on it (which must be
# built, must pass it, and must pass at least one test).
set -eu
cd "$(dirname "$0")/.."
SRC=$(pwd)
BUILD=$(cd "${1:-build}" && pwd)

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/inferlab-sdk-check.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
PREFIX=$SCRATCH/prefix

echo "== install the SDK into $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" --component sdk >/dev/null
test -f "$PREFIX/include/inferlab/inferlab.h"

echo "== build sdk/template out of tree against the installed SDK"
# A copy, so nothing of the source tree (its headers, its CMake) can leak in.
cp -r "$SRC/sdk/template" "$SCRATCH/template"
cmake -S "$SCRATCH/template" -B "$SCRATCH/template-build" \
      -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$SCRATCH/template-build" -j2 >/dev/null
PLUGIN=$SCRATCH/template-build/template_backend.so
test -f "$PLUGIN"

echo "== exported symbols"
symbols=$(nm -D --defined-only "$PLUGIN" | awk '{print $NF}')
if [ "$symbols" != "ilab_plugin_entry" ]; then
    echo "check-sdk-install: $PLUGIN exports more than ilab_plugin_entry:" >&2
    echo "$symbols" >&2
    exit 1
fi

echo "== compile with pkg-config --cflags inferlab"
export PKG_CONFIG_PATH="$(dirname "$(find "$PREFIX" -name inferlab.pc | head -n1)")"
CFLAGS=$(pkg-config --cflags inferlab)
MAP=$(pkg-config --variable=plugin_map inferlab)
test -f "$MAP"
cc $CFLAGS -std=c11 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden \
   -Wl,--version-script="$MAP" -Wl,-z,defs \
   -o "$SCRATCH/template_pkgconfig.so" "$SCRATCH/template/template_backend.c" -lpthread
symbols=$(nm -D --defined-only "$SCRATCH/template_pkgconfig.so" | awk '{print $NF}')
test "$symbols" = "ilab_plugin_entry"

HARNESS=$BUILD/conformance/inferlab-conformance
echo "== conformance harness on the out-of-tree plugin"
if [ ! -x "$HARNESS" ]; then
    echo "check-sdk-install: $HARNESS is not built (build $BUILD first)" >&2
    exit 1
fi
# --require: an unavailable plugin is a failure here, not a row of skips; and
# a run in which nothing passed is no proof either.
rc=0
"$HARNESS" --require template_backend "$PLUGIN" >"$SCRATCH/conformance.txt" 2>&1 || rc=$?
cat "$SCRATCH/conformance.txt"
if [ "$rc" -ne 0 ]; then
    echo "check-sdk-install: the harness exited $rc on the out-of-tree plugin" >&2
    exit 1
fi
summary=$(tail -n 1 "$SCRATCH/conformance.txt")
passed=${summary%% passed*}
case "$passed" in
    ''|*[!0-9]*) echo "check-sdk-install: no summary line from the harness: $summary" >&2; exit 1 ;;
esac
if [ "$passed" -eq 0 ]; then
    echo "check-sdk-install: the harness passed no test of the out-of-tree plugin" >&2
    exit 1
fi
grep -Eq '^template_backend +PASS ' "$SCRATCH/conformance.txt" || {
    echo "check-sdk-install: the out-of-tree plugin did not PASS the harness" >&2
    exit 1
}
echo "check-sdk-install: OK"
