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

# remapring alone (and self for loopback), not weighed against the others
export UCX_TLS=remapring,self

echo "== the module, preloaded, as ucx_info sees it"
"$run" ucx_info -d | sed -n '/Memory domain: remapring/,/^#$/p'
echo
echo "== its settings (ucx_info -c)"
"$run" ucx_info -c | grep '^UCX_REMAPRING_'
echo
echo "== UCP over remapring alone: ucx_perftest tag_lat and tag_bw, two processes"
. "$top/test/scripts/common.sh"
for args in "-t tag_lat -s 8 -n 20000" "-t tag_bw -s 4194304 -n 500"; do
    # shellcheck disable=SC2086
    perftest_pair /tmp/remapring-demo yes $args ||
        { cat /tmp/remapring-demo.*; exit 1; }
    echo "ucx_perftest $args:"
    grep -E "^Final:" /tmp/remapring-demo.client
done
rm -f /tmp/remapring-demo.*
