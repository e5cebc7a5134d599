#!/bin/sh
# test_install.sh BUILD_DIR LIBDIR: install BUILD_DIR into a scratch prefix
# and use it from there, as an operator would: `inferlab list` finds the
# installed plugins relative to its own location (and still does after the
# prefix is moved), the example backend is installed as an example and not
# served, `inferlab run` generates, and the harness tests the installed
# plugins.
set -eu
BUILD=$(cd "$1" && pwd)
LIBDIR=$2
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/inferlab-install.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
chmod 0755 "$SCRATCH"
PREFIX=$SCRATCH/prefix
fail() { echo "test_install: $*" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
PLUGINS=$PREFIX/$LIBDIR/inferlab/plugins
[ -f "$PLUGINS/torchlike.so" ] || fail "no $PLUGINS/torchlike.so"
[ ! -e "$PLUGINS/template_backend.so" ] || fail "the example backend is in the serving folder"
[ -f "$PREFIX/$LIBDIR/inferlab/examples/template_backend.so" ] || fail "example .so not installed"
[ -f "$PREFIX/share/inferlab/examples/template/template_backend.c" ] || fail "example source not installed"

unset INFERLAB_PLUGIN_PATH
list=$("$PREFIX/bin/inferlab" list) || fail "inferlab list exited $?"
echo "$list"
echo "$list" | grep -q "^torchlike .* $PLUGINS/torchlike.so  *available$" || fail "torchlike not listed from $PLUGINS"
echo "$list" | grep -q "vllm_stub" || fail "vllm_stub not listed"
if echo "$list" | grep -q template_backend; then fail "template_backend is listed as a backend"; fi

out=$("$PREFIX/bin/inferlab" run --prompt "Once upon a time" --max-tokens 4 2>&1) || fail "inferlab run: $out"
echo "$out"
echo "$out" | grep -q "completion 4 tokens" || fail "inferlab run did not generate 4 tokens"

out=$("$PREFIX/bin/inferlab-conformance" --include 'ABI-[1-6]' --timeout 120 2>&1) || fail "harness: $out"
echo "$out" | tail -n 5
echo "$out" | grep -q "^torchlike  *PASS .*$PLUGINS/torchlike.so" || fail "the harness did not pass the installed torchlike"

# Any prefix: move the whole installation and ask again.
mv "$PREFIX" "$SCRATCH/moved"
list=$("$SCRATCH/moved/bin/inferlab" list) || fail "moved inferlab list exited $?"
echo "$list" | grep -q "$SCRATCH/moved/$LIBDIR/inferlab/plugins/torchlike.so" || fail "moved prefix: plugins not found"
echo "test_install: OK"
