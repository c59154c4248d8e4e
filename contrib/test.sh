#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build everything (contrib/build.sh) and run the whole test suite with ctest.
#
# usage: contrib/test.sh [--asan] [ctest arguments...]
#   --asan   build with AddressSanitizer in build-asan/ and run the
#            GoogleTest suites under it (the shell tests preload the module
#            into the stock UCX tools, which cannot host an ASan library)
#   e.g.     contrib/test.sh -R ring -j2
#
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = "--asan" ]; then
    shift
    export BUILD_DIR=${BUILD_DIR:-$top/build-asan}
    "$top/contrib/build.sh" --enable-asan
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
    # UCX's own one-time allocations (config tables, global lists) are
    # reachable at exit through its destructors, but LeakSanitizer runs
    # first: see contrib/lsan.supp
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$top/contrib/lsan.supp:print_suppressions=0}
    cd "$BUILD_DIR/test/gtest"
    exec ctest --output-on-failure -E '\.sh$' "$@"
fi

export BUILD_DIR=${BUILD_DIR:-$top/build}
"$top/contrib/build.sh"
cd "$BUILD_DIR/test/gtest"
exec ctest --output-on-failure "$@"
