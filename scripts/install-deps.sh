#!/bin/sh
# Install the Debian 12 packages inferlab needs to build and test, when any
# is missing. As root this runs apt-get; otherwise it prints the command and
# stops, so nothing is installed behind your back.
set -eu

PACKAGES="build-essential cmake pkg-config libyaml-dev libcmocka-dev \
libopenblas-dev libopenblas0-pthread libjansson-dev libmicrohttpd-dev \
libcurl4-openssl-dev libpcre2-dev clang"
# Only the test command needs these: xmllint and prove check the harness's
# JUnit and TAP output (perl also runs scripts/check-type-names.pl); Node
# and npm run the official OpenAI client against `inferlab serve`
# (tests/server/node; the client itself comes from the npm registry into the
# build tree). A Node already on the PATH (from any
# source) is used as it is. python3-sentencepiece is the reference the
# torchlike.tokenizer_oracle_* tests compare the tokenizer with (SentencePiece
# itself; the product never uses it); stress-ng loads the machine for
# scripts/stress-test.sh; chromium (headless, driven over its DevTools pipe
# by tests/ui/browser_test.mjs) tests the status page and the HTML report --
# a large package, so only here.
if [ "${1:-}" = "--test" ]; then
    PACKAGES="$PACKAGES libxml2-utils perl python3 python3-sentencepiece stress-ng chromium"
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        PACKAGES="$PACKAGES nodejs npm"
    fi
fi
# `make fuzz` (and scripts/fuzz.sh) build the libFuzzer targets with clang;
# libFuzzer itself is in libclang-rt-14-dev, which clang only recommends.
if [ "${1:-}" = "--fuzz" ]; then
    PACKAGES="$PACKAGES libclang-rt-14-dev"
fi

missing=""
for p in $PACKAGES; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "inferlab needs these Debian packages:$missing" >&2
    echo "run:  sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing
