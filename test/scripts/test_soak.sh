#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# contrib/bench/soak.sh, cheaply, so that it does not rot: its help; its
# verdict on made-up series (flat with VMAs that folded pages added; the
# receiver's RSS growing by 3 MiB after the warm-up, its VMAs by 20 more
# than folding added, or folded pages adding 300: each must be named, exit
# status 1); then a 20 s soak on the shm wire with a 5 s warm-up, which
# must print the series of both sides, a verdict and where RSS moved
# (smaps), write the CSV, and exit 0.
# The 10-minute soak is run by hand (README, Performance).
#
. "$(dirname "$0")/common.sh"

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
soak=$REMAPRING_SRCDIR/contrib/bench/soak.sh
report=$REMAPRING_SRCDIR/contrib/bench/soak_report.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

command -v cc >/dev/null || skip "no C compiler"
command -v python3 >/dev/null || skip "no python3"
pkg-config --exists ucx || skip "pkg-config does not know ucx"

note "soak.sh -h"
"$soak" -h > "$tmp/help" || fail "soak.sh -h: exit status $?"
for w in --wire SOAK_SECONDS SOAK_WARMUP SOAK_MAX_HELD RSS VMAs fds \
         "pool blocks" csv; do
    grep -q -- "$w" "$tmp/help" || fail "soak.sh -h says nothing of $w"
done

note "the verdict on made-up series"
# sample SIDE T RSS ANON SHMEM VMAS RING_VMAS FOLD_VMAS FDS BLOCKS MESSAGES
# HELD; after 15 s the receiver's RSS grows by 3 MiB, and 40 of its VMAs
# are those folded pages added ($fold: 40, or 300 for too many)
made_up() {
    local t rss vmas f
    for t in $(seq 0 20); do
        rss=10000 vmas=130 f=0
        [ "$t" -gt 15 ] && rss=13072 vmas=170 f=$1
        echo "sample sender $t 20000 1000 100 150 4 0 20 6 $((t * 100)) -1"
        echo "sample receiver $t $rss 1000 100 $vmas 4 $f 18 8 $((t * 100)) 2"
    done
}
# not_flat FOLD NAME PATTERN: the report on made_up FOLD, the receiver's RSS
# growing or not (NAME "RSS" or not), must exit 1 with the line PATTERN
# (grep), or 0 and FLAT if PATTERN is empty
not_flat() {
    local rc=0 want=1
    made_up "$1" > "$tmp/v.log"
    [ "$2" = RSS ] ||
        sed -i 's/^\(sample receiver [0-9]* \)13072/\110000/' "$tmp/v.log"
    python3 "$report" --csv "$tmp/v.csv" --warmup 5 --max-held 64 \
        "$tmp/v.log" > "$tmp/v.out" || rc=$?
    grep "NOT FLAT" "$tmp/v.out" | sed 's/^/   /'
    if [ -z "$3" ]; then
        [ $rc -eq 0 ] && grep -q "^FLAT" "$tmp/v.out" && return 0
    else
        [ $rc -eq 1 ] && grep -q "^NOT FLAT: $3" "$tmp/v.out" && return 0
    fi
    cat "$tmp/v.out"
    fail "$2: exit status $rc"
}
not_flat 40 "flat series (VMAs folding added)" ""
not_flat 40 RSS "receiver RSS: 10000 .* 13072 at 16 s"
not_flat 20 "growing VMAs" "receiver VMAs: 130 .* 150 at 16 s"
not_flat 300 "folded VMAs" "receiver folded VMAs: 0 .* 300 at 16 s"

note "soak.sh -t 20 -W 5 on the shm wire"
start=$SECONDS
rc=0
"$soak" --wire shm -t 20 -W 5 -e 5 -m "$REMAPRING_MODULE" -o "$tmp/out" \
    > "$tmp/log" 2>&1 || rc=$?
sed 's/^/   /' "$tmp/log"
echo "   ($((SECONDS - start)) s)"
[ $rc -eq 0 ] || fail "soak.sh: exit status $rc"
grep -q "^FLAT" "$tmp/log" || fail "no verdict"
grep -q "^ *t (s) *RSS MiB" "$tmp/log" || fail "no table"
grep -q "^  receiver: RSS [-+][0-9]* KiB in all" "$tmp/log" ||
    fail "no smaps comparison"
rows=$(grep -c "^ *1[05] " "$tmp/log")
[ "$rows" -ge 2 ] || fail "the table has no rows at 10 s and 15 s"
csv=$tmp/out/soak-shm.csv
head -1 "$csv" | grep -q "^wire,side,t_s,rss_kib" || fail "CSV header"
for side in sender receiver; do
    n=$(grep -c "^shm,$side," "$csv")
    [ "$n" -ge 15 ] || fail "$n samples of the $side in the CSV"
done
echo "PASS"
