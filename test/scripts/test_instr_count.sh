#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# contrib/bench/instr_count.sh, cheaply, so that it does not rot: its help,
# then one test at one size with few iterations, whose row must carry a
# count of instructions per message for remapring and for posix, and their
# ratio. Checks that the count runs, never what it counts.
#
. "$(dirname "$0")/common.sh"
set -euo pipefail

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
count=$REMAPRING_SRCDIR/contrib/bench/instr_count.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v ucx_perftest >/dev/null || skip "no ucx_perftest"
command -v valgrind >/dev/null || skip "no valgrind"

note "instr_count.sh -h"
"$count" -h > "$tmp/help" || fail "instr_count.sh -h: exit status $?"
for w in callgrind loopback am_lat_short am_bw_bcopy; do
    grep -q -- "$w" "$tmp/help" || fail "instr_count.sh -h says nothing of $w"
done

note "am_lat short, 8 B, 2000 and 6000 iterations"
rc=0
"$count" -m "$REMAPRING_MODULE" -n 2000 -t am_lat_short -s 8 > "$tmp/log" \
    2>&1 || rc=$?
sed 's/^/   /' "$tmp/log"
[ $rc -eq 0 ] || fail "instr_count.sh: exit status $rc"
grep -Eq "^am_lat_short +8 +[1-9][0-9]* +[1-9][0-9]* +[0-9]+\.[0-9]{2}$" \
    "$tmp/log" || fail "no row with both counts and their ratio"
echo "PASS"
