#!/bin/sh
# The official `openai` npm client against `inferlab serve`.
#
# usage: run-openai-client.sh SRC_DIR WORK_DIR INFERLAB_EXE PLUGIN_DIR
#
# Installs the client pinned by SRC_DIR/package-lock.json into WORK_DIR (in
# the build tree) with `npm ci` the first time, then runs openai_client.mjs.
# Exit 77 (ctest: skipped) with the reason when the npm registry cannot be
# reached on the first run (tests/skip-allowlist.txt allows that one skip);
# a missing Node or npm, and any other failure, fails.
set -u
src=$1 work=$2 exe=$3 plugins=$4

skip() { echo "SKIPPED: $*"; exit 77; }
# A missing tool is an error: scripts/install-deps.sh --test installs both.
missing() { echo "FAILED: $1 is not installed (scripts/install-deps.sh --test installs it)"; exit 1; }
command -v node >/dev/null 2>&1 || missing node
command -v npm >/dev/null 2>&1 || missing npm

mkdir -p "$work"
if ! cmp -s "$src/package-lock.json" "$work/package-lock.json" || [ ! -d "$work/node_modules/openai" ]; then
    cp "$src/package.json" "$src/package-lock.json" "$work/" || exit 1
    rm -rf "$work/node_modules"
    if ! timeout 300 npm ci --prefix "$work" --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1; then
        if grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network' "$work/npm.log"; then
            tail -n 5 "$work/npm.log"
            rm -f "$work/package-lock.json"
            skip "the npm registry cannot be reached, so the openai client could not be installed"
        fi
        cat "$work/npm.log"
        rm -f "$work/package-lock.json"
        echo "npm ci failed (see above)"
        exit 1
    fi
fi
# The script imports 'openai' from the work directory's node_modules.
cp "$src/openai_client.mjs" "$work/" || exit 1
exec timeout 120 node "$work/openai_client.mjs" "$exe" "$plugins"
