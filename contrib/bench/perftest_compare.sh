#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Runs the same ucx_perftest tests over remapring (each wire asked for) and
# over posix(+cma) in one run, and prints one table: test, size, metric, the
# median per transport and the ratios remapring/posix(+cma). A benchmark,
# not a test: it prints figures and asserts nothing. contrib/bench/bench.sh
# runs it for its ucx_perftest part (-o).
#
set -u

usage() {
    cat <<EOF
usage: $0 [options]
  -s LIST     message sizes in bytes, comma separated (default
              8,64,1024,4096,65536,1048576,4194304); each test runs at the
              sizes it can take (below)
  -n N        iterations below 64 KiB (default 200000)
  -N N        iterations from 64 KiB on (default 2000)
  -r N        runs; each figure is the median of the runs (default 3)
  -w LIST     remapring wires, comma separated (default shm,cma;
              UCX_REMAPRING_WIRE)
  -t LIST     tests, comma separated (default all): uct_am_lat,
              uct_am_bw_short, uct_am_bw_bcopy, uct_am_bw_zcopy, uct_put_bw,
              uct_get, ucp_tag_lat, ucp_tag_bw, ucp_am_bw, ucp_stream_bw
  -c FILE     also write the medians and ratios as CSV to FILE
  -o FILE     append every run's figures to FILE (CSV: bench,size,metric,
              transport,run,value; the header if FILE is empty) and print
              no table (bench.sh's mode)
  -m PATH     the module (default \$REMAPRING_MODULE, else pkg-config's)
  -i          interleave: each test by itself, the transports in turn, a
              run at a time, instead of each transport's tests in one batch
              (slower: an ucx_perftest pair per test). On a machine whose
              cores drift between a far and a close pairing (a cache line
              between them slow or cheap: contrib/bench/c2c.c), both sides
              of each ratio are then measured seconds apart, not a batch
              apart
  -q          no progress line
  -h          this help

Transports, two local processes each time, all tests of one transport in
one ucx_perftest pair (batch mode, -b), the transports in turn in each run:
  remapring-WIRE  UCX_TLS=remapring,self UCX_REMAPRING_WIRE=WIRE, module
                  preloaded; UCT -x remapring -d memory
  posix+cma       UCX_TLS=posix,cma,self, what UCX uses on one host without
                  the module; UCT: -x posix for active messages, -x cma for
                  put and get (posix has no zero-copy)
Tests and sizes:
  uct_am_lat       am_lat, short at sizes <= 64 B (posix's am_short takes
                   100 B), bcopy at 1 KiB and 4 KiB
  uct_am_bw_short  am_bw short, sizes <= 64 B
  uct_am_bw_bcopy  am_bw bcopy, sizes <= 4 KiB (posix's am_bcopy: 8 KiB)
  uct_am_bw_zcopy  am_bw zcopy, sizes < 64 KiB; remapring only (posix has
                   no am_zcopy)
  uct_put_bw       put_bw zcopy, every size, against cma
  uct_get          get zcopy, every size, against cma
  ucp_tag_lat, ucp_tag_bw, ucp_am_bw, ucp_stream_bw: every size
Warm-up (-w): a tenth of the iterations, at least 20000 below 64 KiB and
4 MiB of messages from 64 KiB on, so that a remapring ring's first lap (its fresh blocks' page faults, its grant
growing from IDLE_SLOTS) is not measured: the figures are steady state.
Metrics, each the median of the runs: lat = median latency of a run (usec,
one way), bw = overall bandwidth (MB/s, 2^20 bytes), rate = overall message
rate (msg/s, for sizes up to 4 KiB). For latency a ratio below 1 means
remapring is faster; for bw and rate, above 1.
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
sizes=8,64,1024,4096,65536,1048576,4194304
small=200000
large=2000
reps=3
wires=shm,cma
tests=uct_am_lat,uct_am_bw_short,uct_am_bw_bcopy,uct_am_bw_zcopy,uct_put_bw
tests+=,uct_get,ucp_tag_lat,ucp_tag_bw,ucp_am_bw,ucp_stream_bw
csv_out=
raw_out=
progress=yes
interleave=no
module=${REMAPRING_MODULE:-$(pkg-config --variable=module remapring 2>/dev/null)}
while getopts "s:n:N:r:w:t:c:o:m:iqh" o; do
    case $o in
    s) sizes=$OPTARG ;;
    n) small=$OPTARG ;;
    N) large=$OPTARG ;;
    r) reps=$OPTARG ;;
    w) wires=$OPTARG ;;
    t) tests=$OPTARG ;;
    c) csv_out=$OPTARG ;;
    o) raw_out=$OPTARG ;;
    m) module=$OPTARG ;;
    i) interleave=yes ;;
    q) progress=no ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
for n in "$small" "$large" "$reps"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] ||
        { echo "-n, -N, -r: a positive number, not '$n'" >&2; exit 2; }
done
[[ $sizes =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    { echo "-s: sizes in bytes, comma separated, not '$sizes'" >&2; exit 2; }
[[ ,$wires, =~ ^(,(shm|cma))+,$ ]] ||
    { echo "-w: shm and/or cma, not '$wires'" >&2; exit 2; }
all_tests=" uct_am_lat uct_am_bw_short uct_am_bw_bcopy uct_am_bw_zcopy "
all_tests+="uct_put_bw uct_get ucp_tag_lat ucp_tag_bw ucp_am_bw ucp_stream_bw "
for t in ${tests//,/ }; do
    [[ $all_tests == *" $t "* ]] || { echo "-t: no test '$t'" >&2; exit 2; }
done
[ -n "$module" ] && [ -f "$module" ] ||
    { echo "no module: set REMAPRING_MODULE or -m PATH" >&2; exit 2; }
export REMAPRING_MODULE=$module
. "$here/../../test/scripts/common.sh"
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
IFS=, read -r -a size_list <<< "$sizes"
IFS=, read -r -a wire_list <<< "$wires"
transports=()
for w in "${wire_list[@]}"; do
    transports+=("remapring-$w")
done
transports+=(posix+cma)
raw=${raw_out:-$tmp/raw.csv}
[ -s "$raw" ] || echo "bench,size,metric,transport,run,value" > "$raw"

# batch TRANSPORT: writes the ucx_perftest batch file of the transport to
# $tmp/batch.TRANSPORT and, for each of its lines tN, "tN bench size
# metrics" to $tmp/index.TRANSPORT
batch() {
    local tr=$1 t s n=0 x lay bench metrics args
    local b=$tmp/batch.$tr i=$tmp/index.$tr
    : > "$b"
    : > "$i"
    # add BENCH SIZE METRICS ARGS...: one test of the batch
    add() {
        local it wu
        if [ "$2" -ge 65536 ]; then it=$large; else it=$small; fi
        # warm-up: a tenth of the iterations, and at least 20000 messages
        # below 64 KiB and 4 MiB of messages from 64 KiB on, past a
        # remapring ring's first lap (1 MiB: its fresh blocks' page faults,
        # its grant growing), which is start-up, not the steady state the
        # figures are about
        wu=$((it / 10 + 1))
        if [ "$2" -lt 65536 ]; then
            [ $wu -ge 20000 ] || wu=20000
        elif [ $((wu * $2)) -lt 4194304 ]; then
            wu=$(((4194304 + $2 - 1) / $2))
        fi
        echo "t$n ${*:4} -s $2 -n $it -w $wu" >> "$b"
        echo "t$n $1|$2|$3" >> "$i"
        n=$((n + 1))
    }
    # metrics of a bandwidth test at size $1: with the rate up to 4 KiB
    bwm() { if [ "$1" -le 4096 ]; then echo bw,rate; else echo bw; fi; }
    for t in ${tests//,/ }; do
        for s in "${size_list[@]}"; do
            if [ "$tr" = posix+cma ]; then
                case $t in
                uct_put_bw|uct_get) x="-x cma -d memory" ;;
                *) x="-x posix -d memory" ;;
                esac
            else
                x="-x remapring -d memory"
            fi
            case $t in
            uct_am_lat)
                if [ "$s" -le 64 ]; then lay=short
                elif [ "$s" -le 4096 ]; then lay=bcopy
                else continue; fi
                add "UCT am_lat $lay" "$s" lat -t am_lat -D $lay $x ;;
            uct_am_bw_short)
                [ "$s" -le 64 ] || continue
                add "UCT am_bw short" "$s" "$(bwm "$s")" -t am_bw -D short $x ;;
            uct_am_bw_bcopy)
                [ "$s" -le 4096 ] || continue
                add "UCT am_bw bcopy" "$s" "$(bwm "$s")" -t am_bw -D bcopy $x ;;
            uct_am_bw_zcopy)
                [ "$s" -lt 65536 ] && [ "$tr" != posix+cma ] || continue
                add "UCT am_bw zcopy" "$s" "$(bwm "$s")" -t am_bw -D zcopy $x ;;
            uct_put_bw)
                add "UCT put_bw zcopy" "$s" "$(bwm "$s")" -t put_bw -D zcopy $x ;;
            uct_get)
                add "UCT get zcopy" "$s" "$(bwm "$s")" -t get -D zcopy $x ;;
            ucp_tag_lat)
                add "UCP tag_lat" "$s" lat -t tag_lat ;;
            ucp_tag_bw)
                add "UCP tag_bw" "$s" "$(bwm "$s")" -t tag_bw ;;
            ucp_am_bw)
                add "UCP ucp_am_bw" "$s" "$(bwm "$s")" -t ucp_am_bw ;;
            ucp_stream_bw)
                add "UCP stream_bw" "$s" "$(bwm "$s")" -t stream_bw ;;
            esac
        done
    done
}

# measure TRANSPORT RUN [LINE]: one ucx_perftest pair running the
# transport's batch, or only its line LINE (tN); appends a row per figure to
# $raw ("fail" for a test that gave no Final line: the batch stops at the
# first test that fails)
measure() {
    local tr=$1 run=$2 line=${3:-} wire= tls=posix,cma,self load=no
    local b=$tmp/batch.$tr i=$tmp/index.$tr
    if [[ $tr == remapring-* ]]; then
        wire=${tr#remapring-} tls=remapring,self load=yes
    fi
    if [ -n "$line" ]; then
        grep "^$line " "$b" > "$tmp/batch.one"
        grep "^$line " "$i" > "$tmp/index.one"
        b=$tmp/batch.one i=$tmp/index.one
    fi
    UCX_TLS=$tls UCX_REMAPRING_WIRE=${wire:-shm} PERFTEST_TIMEOUT=600 \
        perftest_pair "$tmp/run" "$load" -b "$b" 2>/dev/null
    # Final: iterations, lat 50%ile, avg, overall; bw avg, overall;
    # rate avg, overall. ucx_perftest writes the batch line's name into the
    # table border above the test's figures.
    awk -v idx="$i" -v tr="$tr" -v run="$run" '
        BEGIN {
            while ((getline l < idx) > 0) {
                k = substr(l, 1, index(l, " ") - 1)
                key[k] = substr(l, index(l, " ") + 1)
                order[++n] = k
            }
        }
        /^\+t[0-9]+[-+]/ {
            match($0, /^\+t[0-9]+/)
            cur = substr($0, 2, RLENGTH - 1)
        }
        /^Final:/ && cur != "" {
            fig[cur, "lat"] = $3
            fig[cur, "bw"] = $6
            fig[cur, "rate"] = $8
            cur = ""
        }
        END {
            for (i = 1; i <= n; i++) {
                k = order[i]
                split(key[k], f, "|")
                nm = split(f[3], m, ",")
                for (j = 1; j <= nm; j++) {
                    v = ((k, m[j]) in fig) ? fig[k, m[j]] : "fail"
                    printf "%s,%s,%s,%s,%d,%s\n", f[1], f[2], m[j], tr, run, v
                }
            }
        }' "$tmp/run.client" >> "$raw"
}

start=$SECONDS
for tr in "${transports[@]}"; do
    batch "$tr"
done
ntests=$(cat "$tmp"/index.* | wc -l)
if [ $interleave = yes ]; then
    # the lines of the first transport's batch; a test another transport
    # has no line for (am_bw zcopy on posix) is measured without it
    lines=$(cut -d' ' -f1 "$tmp/index.${transports[0]}")
    for line in $lines; do
        key=$(grep "^$line " "$tmp/index.${transports[0]}" | cut -d' ' -f2-)
        [ $progress = yes ] &&
            printf "perftest_compare: %s, %d runs, %d s\n" "${key//|/ }" \
                   "$reps" $((SECONDS - start)) >&2
        for ((r = 1; r <= reps; r++)); do
            for tr in "${transports[@]}"; do
                l=$(awk -v k="$key" '{ i = index($0, " ")
                        if (substr($0, i + 1) == k) print substr($0, 1, i - 1)
                    }' "$tmp/index.$tr")
                [ -z "$l" ] || measure "$tr" "$r" "$l"
            done
        done
    done
else
    for ((r = 1; r <= reps; r++)); do
        for tr in "${transports[@]}"; do
            [ $progress = yes ] &&
                printf "perftest_compare: run %d/%d, %s (%d tests), %d s\n" \
                       "$r" "$reps" "$tr" "$(wc -l < "$tmp/index.$tr")" \
                       $((SECONDS - start)) >&2
            measure "$tr" "$r"
        done
    done
fi
[ $progress = yes ] &&
    echo "perftest_compare: $ntests tests x $reps runs in" \
         "$((SECONDS - start)) s" >&2
[ -n "$raw_out" ] && exit 0

/usr/bin/python3 "$here/bench_report.py" "$raw" ${csv_out:+--csv "$csv_out"}
echo
echo "UCX $("$here/../../config/ucx-version.sh"), $(nproc) cores," \
     "$(uname -r); iterations $small (< 64 KiB) / $large;" \
     "median of $reps runs; $((SECONDS - start)) s"
