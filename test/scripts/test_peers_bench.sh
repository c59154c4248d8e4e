#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# contrib/bench/peers_bench, small: 1 and 8 connected senders, one of them
# active in a short burst. What it must print: a row per sender count, and
# an idle connected sender costing its receiver exactly IDLE_SLOTS blocks
# (1 x 256 KiB = 256 KiB by default, 2 and 4 x 256 KiB with
# UCX_REMAPRING_IDLE_SLOTS=2 and 4): a memory figure, checked; the progress
# cost per call is printed, never judged here.
#
. "$(dirname "$0")/common.sh"
set -euo pipefail

: "${REMAPRING_BUILDDIR:?run through ctest}"
bench=$REMAPRING_BUILDDIR/contrib/bench/peers_bench
[ -x "$bench" ] || fail "no $bench: build it (make)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bench" -h | grep -q -- "-n  connected senders" || fail "peers_bench -h"

block_kib=256 # UCX_REMAPRING_BLOCK_SIZE's auto on this transport

for idle in auto 2 4; do
    note "IDLE_SLOTS=$idle"
    slots=$idle
    [ "$idle" = auto ] && slots=1
    UCX_REMAPRING_IDLE_SLOTS=$idle "$bench" -n 1,8 -a 1 -b 300 -c 20000 \
        > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "peers_bench failed"; }
    sed 's/^/   /' "$tmp/out"
    for n in 1 8; do
        row=$(awk -v n=$n '$1 == n' "$tmp/out")
        [ -n "$row" ] || fail "no row for $n senders"
        kib=$(echo "$row" | awk '{print $3}')
        [ "$kib" = "$((slots * block_kib)).0" ] ||
            fail "$n idle senders: $kib KiB each, $((slots * block_kib)) expected"
    done
done
echo "PASS"
