#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build everything (contrib/build.sh), show the module under the unmodified
# UCX tools, and run the short benchmark (contrib/bench/bench.sh): one table
# of remapring against posix(+cma), with a CSV and plots in build/bench/.
#
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}

"$top/contrib/build.sh"
export REMAPRING_MODULE=$build/.libs/libuct_remapring.so
run=$build/contrib/remapring-run

# remapring alone (and self for loopback), not weighed against the others
export UCX_TLS=remapring,self

echo "== the module, preloaded, as ucx_info sees it"
"$run" ucx_info -d | sed -n '/Memory domain: remapring/,/^#$/p'
echo
echo "== its settings (ucx_info -c)"
"$run" ucx_info -c | grep '^UCX_REMAPRING_'
echo
unset UCX_TLS
echo "== the short benchmark (contrib/bench/bench.sh; --full for every size)"
"$top/contrib/bench/bench.sh" -m "$REMAPRING_MODULE"
