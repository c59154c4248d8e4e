#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build everything (contrib/build.sh) and run the whole test suite with ctest.
# Extra arguments go to ctest (e.g. -R ring, -j2, --output-on-failure).
#
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}

"$top/contrib/build.sh"
cd "$build/test/gtest"
exec ctest --output-on-failure "$@"
