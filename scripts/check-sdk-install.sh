#!/bin/sh
# Install the SDK from build dir $1 into a scratch prefix, build the template
# plugin out of tree against it alone (CMake and pkg-config), and run the
# conformance harness on the result.
set -eu
BUILD=${1:-build}
echo "check-sdk-install: not yet written" >&2
