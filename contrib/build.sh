#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Set up (contrib/setup.sh), configure and build everything, test programs
# included, out of tree in BUILD_DIR (default: build/).
#
# usage: contrib/build.sh [extra configure arguments]
#   BUILD_DIR=DIR  build directory (default: <source>/build)
#
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}

"$top/contrib/setup.sh"

if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
    "$top/autogen.sh" >/dev/null 2>&1
fi

mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || { [ $# -gt 0 ] && ! grep -qF -- "$*" config.log; }; then
    "$top/configure" --prefix=/usr "$@" >configure.out ||
        { tail -20 configure.out; exit 1; }
fi
make -j"$(nproc)" all >/dev/null
make -j"$(nproc)" check TESTS= >/dev/null
echo "built in $build"
