#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The fuzz targets (contrib/fuzz/run.sh) replay their saved corpus
# (contrib/fuzz/corpus/<target>, crashes found before among it) and fuzz a
# few seconds more, with AddressSanitizer and UndefinedBehaviorSanitizer.
# Built with clang in the build tree's fuzz/ the first time (some minutes).
# Skips (77) where clang with libFuzzer is missing and cannot be installed.
#
set -euo pipefail
top=${REMAPRING_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${REMAPRING_BUILDDIR:-$top/build}

export FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-$build/fuzz}
export FUZZ_SECONDS=${FUZZ_SECONDS:-3}
exec "$top/contrib/fuzz/run.sh" --replay
