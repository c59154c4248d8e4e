#!/bin/sh
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# usage: ucx-src-version.sh UCX_SOURCE_DIR
# Prints the version (major.minor.patch) of a UCX source tree.
#
sed -n 's/^define(\[ucx_ver_\(major\|minor\|patch\)\], *\([0-9]*\)).*/\2/p' \
    "$1/configure.ac" | paste -sd.
