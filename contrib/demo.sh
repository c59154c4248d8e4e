#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build everything (contrib/build.sh) and show the module at work under the
# unmodified UCX tools.
#
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}

"$top/contrib/build.sh"
export REMAPRING_MODULE=$build/.libs/libuct_remapring.so
run=$build/contrib/remapring-run

echo "== the module, preloaded, as ucx_info sees it"
"$run" ucx_info -d | sed -n '/Memory domain: remapring/,/^#$/p'
echo
echo "== its settings (ucx_info -c)"
"$run" ucx_info -c | grep '^UCX_REMAPRING_'
