#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# contrib/bench/bench.sh, cheaply: its help, then a tiny run (8 B, one run,
# a few hundred iterations, UCP tag_lat and UCT am_lat, MPI and mpi4py if
# installed, the UCP storm at 4 KiB with 1 MiB held) whose CSV must have a
# figure, not "fail", from every transport (remapring on each wire,
# posix+cma) for UCP tag_lat, the storm's held memory and drain and, where
# the MPI is there, for each MPI's latency; whose table must end with
# the ratios; and whose large-message part (128 KiB, 10 iterations) must
# give UCP tag_bw from every transport, memcpy's bandwidth and the shares
# of it, each MPI's bw, bibw, mbw (two pairs) and allreduce from every
# transport, and both plain copies with their shares of memcpy.
# Checks that the benchmark runs, never how fast.
#
. "$(dirname "$0")/common.sh"
set -euo pipefail

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
bench=$REMAPRING_SRCDIR/contrib/bench/bench.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v ucx_perftest >/dev/null || skip "no ucx_perftest"

note "bench.sh -h"
"$bench" -h > "$tmp/help" || fail "bench.sh -h: exit status $?"
for w in --full perftest mpi4py storm large memcpy "plain copies" posix+cma; do
    grep -q -- "$w" "$tmp/help" || fail "bench.sh -h says nothing of $w"
done

note "a tiny run"
rc=0
"$bench" -m "$REMAPRING_MODULE" -o "$tmp/out" -s 8 -r 1 -n 400 -N 10 \
    -t ucp_tag_lat,uct_am_lat -S 4096 -P 1m \
    -p perftest,mpi,mpi4py,storm,large -L 131072 > "$tmp/log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/log"; fail "bench.sh: exit status $rc"; }
sed 's/^/   /' "$tmp/log"
csv=$tmp/out/bench.csv
[ -s "$csv" ] || fail "no bench.csv"
head -1 "$csv" | grep -q "remapring-shm,remapring-cma,posix+cma," ||
    fail "bench.csv's columns: $(head -1 "$csv")"
benches=("UCP tag_lat" "UCT am_lat short")
grep -q "^left out: Open MPI" "$tmp/log" || benches+=("Open MPI lat" "mpi4py ringtest")
grep -q "^left out: MPICH" "$tmp/log" || benches+=("MPICH lat")
for b in "${benches[@]}"; do
    # bench,size,metric,unit,shm,cma,posix,...: three figures
    awk -F, -v b="$b" '$1 == b && $2 == 8 && $3 == "lat" &&
        $5 > 0 && $6 > 0 && $7 > 0 { found = 1 } END { exit !found }' \
        "$csv" || fail "$b 8 B: not a figure from every transport in bench.csv"
done
for b in "UCP storm held RSS,4096,held" "UCP storm drain,4096,bw"; do
    awk -F, -v b="$b" '$1 "," $2 "," $3 == b &&
        $5 != "" && $6 != "" && $7 != "" { found = 1 }
        END { exit !found }' \
        "$csv" || fail "$b: not a figure from every transport in bench.csv"
done
awk -F, '$1 == "UCP storm held pool" && $2 == 4096 && $5 != "" && $6 != "" {
    found = 1 } END { exit !found }' "$csv" ||
    fail "UCP storm held pool: not a figure from each remapring wire"
[ -s "$tmp/out/storm.txt" ] || fail "no storm.txt"
grep -q "^ratios: remapring / posix+cma" "$tmp/log" || fail "no ratios"
# the cache line round trip, in ns (or why not, with fewer than two cpus)
# large.csv: bench,size,metric,unit,shm,cma,posix,shm/posix,cma/posix,
# memcpy,shm/memcpy,cma/memcpy,posix+cma/memcpy,runs
lcsv=$tmp/out/large.csv
[ -s "$lcsv" ] || fail "no large.csv"
head -1 "$lcsv" | grep -q ",memcpy,remapring-shm/memcpy," ||
    fail "large.csv's columns: $(head -1 "$lcsv")"
awk -F, '$1 == "UCP tag_bw" && $2 == 131072 && $3 == "bw" &&
    $5 > 0 && $6 > 0 && $7 > 0 && $10 > 0 && $11 > 0 && $13 > 0 {
    found = 1 } END { exit !found }' "$lcsv" ||
    fail "UCP tag_bw 128 KiB: not every figure and share in large.csv"
lbenches=()
grep -q "^left out: Open MPI" "$tmp/log" || lbenches+=("Open MPI")
grep -q "^left out: MPICH" "$tmp/log" || lbenches+=("MPICH")
for m in "${lbenches[@]}"; do
    for t in bw bibw mbw; do
        awk -F, -v b="$m $t" '$1 == b && $2 == 131072 && $3 == "bw" &&
            $5 > 0 && $6 > 0 && $7 > 0 && $10 > 0 { found = 1 }
            END { exit !found }' "$lcsv" ||
            fail "$m $t 128 KiB: not a figure from every transport in large.csv"
    done
    awk -F, -v b="$m allreduce" '$1 == b && $2 == 131072 && $3 == "lat" &&
        $5 > 0 && $6 > 0 && $7 > 0 { found = 1 } END { exit !found }' \
        "$lcsv" ||
        fail "$m allreduce 128 KiB: not a figure from every transport in large.csv"
done
grep -q "^memcpy: its bandwidth at the size" "$tmp/log" ||
    fail "no large-message table"
# plain.csv: each way's figure and its share of memcpy, by column name
ccsv=$tmp/out/plain.csv
[ -s "$ccsv" ] || fail "no plain.csv"
for w in 1copy-cma 2copy-shm; do
    awk -F, -v w="$w" 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
        $1 == "plain copy" && $2 == 131072 && $3 == "bw" &&
        $col[w] > 0 && $col["memcpy"] > 0 && $col[w "/memcpy"] > 0 {
        found = 1 } END { exit !found }' "$ccsv" ||
        fail "plain copy $w 128 KiB: no figure or share in plain.csv"
done
if [ "$(nproc)" -ge 2 ]; then
    grep -Eq "^cache line round trip .*: [0-9]+ ns at the start, [0-9]+ ns" \
        "$tmp/log" || fail "no cache line round trip in the footer"
fi
echo "PASS"
