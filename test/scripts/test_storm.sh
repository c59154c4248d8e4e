#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# contrib/bench/storm.sh, cheaply: its help, then a tiny run (256 B, 4 KiB
# and 64 KiB, 512 KiB held at each size, one run, both remapring wires and
# posix+cma). Every run must complete with every byte right (storm.sh exits
# non-zero otherwise), storm.csv must have, for every size and transport, a
# protocol and the held-memory and drain figures, remapring's rows the pool
# figures too, and remapring's runs must have gone over remapring (the
# sender's AM lane). Checks that the benchmark runs, never how much it
# holds or how fast it drains.
#
. "$(dirname "$0")/common.sh"
set -euo pipefail

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
storm=$REMAPRING_SRCDIR/contrib/bench/storm.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v cc >/dev/null || skip "no C compiler"
pkg-config --exists ucx || skip "pkg-config does not know ucx"

note "storm.sh -h"
"$storm" -h > "$tmp/help" || fail "storm.sh -h: exit status $?"
for w in -P --wire posix+cma RssShmem memfd 8k-desc; do
    grep -q -- "$w" "$tmp/help" || fail "storm.sh -h says nothing of $w"
done

note "a tiny run"
rc=0
start=$SECONDS
"$storm" -m "$REMAPRING_MODULE" -o "$tmp/out" -s 256,4096,65536 -P 512k \
    -r 1 -w shm,cma -t 60 > "$tmp/log" 2>&1 || rc=$?
sed 's/^/   /' "$tmp/log"
echo "   ($((SECONDS - start)) s)"
[ $rc -eq 0 ] || fail "storm.sh: exit status $rc"
csv=$tmp/out/storm.csv
[ -s "$csv" ] || fail "no storm.csv"
head -1 "$csv" | grep -q "^size,count,transport,proto,runs,rss_per_byte," ||
    fail "storm.csv's columns: $(head -1 "$csv")"
for s in 256 4096 65536; do
    for t in remapring-shm remapring-cma posix+cma; do
        # size,count,transport,proto,runs,rss,anon,shmem,pool,memfd,
        # drain_usec,drain_mbps,...
        row=$(awk -F, -v s=$s -v t=$t '$1 == s && $3 == t' "$csv")
        [ -n "$row" ] || fail "$t, $s B: no row in storm.csv"
        echo "$row" | awk -F, '$4 ~ /^(egr|rndv)/ && $5 == 1 && $6 != "" &&
            $11 > 0 && $12 > 0 { ok = 1 } END { exit !ok }' ||
            fail "$t, $s B: no protocol or figures: $row"
        if [ $t != posix+cma ]; then
            echo "$row" | awk -F, '$9 != "" && $10 != "" { ok = 1 }
                END { exit !ok }' || fail "$t, $s B: no pool figures: $row"
        fi
    done
done
# remapring's runs over remapring: the sender's AM lane (storm-raw.csv:
# size,count,transport,run,proto,am_lane,...)
awk -F, '$3 ~ /^remapring-/ && $6 !~ /^remapring\// { bad = 1 }
    END { exit bad }' "$tmp/out/storm-raw.csv" ||
    fail "a remapring run did not send over remapring"
grep -q "^held bytes per payload byte" "$tmp/log" || fail "no table"
echo "PASS"
