#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Runs the same ucx_perftest tests over remapring, posix and cma in one run
# and prints one table: test, size, metric, the value per transport and the
# ratios remapring/posix and remapring/cma. A benchmark, not a test: it
# prints figures and asserts nothing.
#
set -u

usage() {
    cat <<EOF
usage: $0 [options]
  -n N        iterations for messages below 64 KiB (default 20000)
  -N N        iterations for messages of 64 KiB and more (default 400)
  -s LIST     message sizes for the UCP tag tests and the UCT put/get tests,
              comma separated (default 8,65536,4194304)
  -r N        runs of each measurement, the median is printed (default 3)
  -m PATH     the module (default \$REMAPRING_MODULE, else pkg-config's)
  -h          this help

Transports compared, two local processes each time:
  UCT  -x remapring -d memory | -x posix -d memory | -x cma -d memory
  UCP  UCX_TLS=remapring,self | posix,self | cma,posix,self
UCT posix has no zero-copy put/get and cma has no active messages, so those
cells are "-". cma alone cannot run UCP (it has no active messages): its
UCP column is cma for rendezvous with posix for everything else.
Metrics, each the median of the runs: lat = median latency (usec, one
way), bw = overall bandwidth (MB/s), rate = overall message rate (msg/s).
For latency a ratio below 1 means remapring is faster; for bw and rate,
above 1.
EOF
}

small=20000
large=400
sizes=8,65536,4194304
reps=3
module=${REMAPRING_MODULE:-$(pkg-config --variable=module remapring 2>/dev/null)}
while getopts "n:N:s:r:m:h" o; do
    case $o in
    n) small=$OPTARG ;;
    N) large=$OPTARG ;;
    s) sizes=$OPTARG ;;
    r) reps=$OPTARG ;;
    m) module=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
for n in "$small" "$large" "$reps"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] ||
        { echo "-n, -N, -r: a positive number, not '$n'" >&2; exit 2; }
done
[ -n "$module" ] && [ -f "$module" ] ||
    { echo "no module: set REMAPRING_MODULE or -m PATH" >&2; exit 2; }
export REMAPRING_MODULE=$module
. "$(dirname "$0")/../../test/scripts/common.sh"
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
IFS=, read -r -a size_list <<< "$sizes"

iters() {
    if [ "$1" -ge 65536 ]; then
        echo "-n $large -w $((large / 10 + 1))"
    else
        echo "-n $small -w $((small / 10 + 1))"
    fi
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0)
            printf "%.2f", a / b; else printf "-" }'
}

fmt="%-22s %9s %-5s %12s %12s %12s %8s %8s\n"
printf "$fmt" test size metric remapring posix cma "rr/posix" "rr/cma"
printf "$fmt" ---- ---- ------ --------- ----- --- -------- ------

# row TEST SIZE METRIC RR POSIX CMA
row() {
    printf "$fmt" "$1" "$2" "$3" "$4" "$5" "$6" "$(ratio "$4" "$5")" \
        "$(ratio "$4" "$6")"
}

# median of the arguments ("fail" if none)
median() {
    [ $# -gt 0 ] || { echo fail; return; }
    printf "%s\n" "$@" | sort -g | awk '{a[NR] = $1} END {
        if (NR % 2) print a[(NR + 1) / 2];
        else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# measure TL UCX_TLS METRICS ARGS...: run the pair $reps times and set
# v[TL.metric] (the caller's) to the median of each metric. A failed run
# counts for nothing; all failed: "fail".
measure() {
    local tl=$1 tlset=$2 metrics=$3 m c i load
    local -A got
    shift 3
    load=$([ "$tl" = remapring ] && echo yes || echo no)
    for m in $metrics; do got[$m]=""; done
    for ((i = 0; i < reps; i++)); do
        UCX_TLS=$tlset perftest_pair "$tmp/run" "$load" "$@" 2>/dev/null &&
            grep -q "^Final:" "$tmp/run.client" || continue
        for m in $metrics; do
            case $m in
            lat) c=3 ;; bw) c=6 ;; rate) c=8 ;;
            esac
            got[$m]+=" $(grep "^Final:" "$tmp/run.client" | awk -v c=$c '{print $c}')"
        done
    done
    for m in $metrics; do
        # shellcheck disable=SC2086
        v[$tl.$m]=$(median ${got[$m]})
    done
}

# uct NAME SIZE "METRICS" TLS ARGS...: a UCT test over the given transports
# (the others print "-")
uct() {
    local name=$1 size=$2 metrics=$3 tls=$4 tl m
    local -A v
    shift 4
    for tl in remapring posix cma; do
        for m in $metrics; do
            v[$tl.$m]=-
        done
        [[ " $tls " == *" $tl "* ]] || continue
        measure "$tl" "$tl" "$metrics" -x "$tl" -d memory -s "$size" \
            $(iters "$size") "$@"
    done
    for m in $metrics; do
        row "$name" "$size" "$m" "${v[remapring.$m]}" "${v[posix.$m]}" \
            "${v[cma.$m]}"
    done
}

# ucp NAME SIZE "METRICS" ARGS...: a UCP test over the three UCX_TLS sets
ucp() {
    local name=$1 size=$2 metrics=$3 tl m tlset
    local -A v
    shift 3
    for tl in remapring posix cma; do
        case $tl in
        remapring) tlset=remapring,self ;;
        posix)     tlset=posix,self ;;
        cma)       tlset=cma,posix,self ;;
        esac
        measure "$tl" "$tlset" "$metrics" -s "$size" $(iters "$size") "$@"
    done
    for m in $metrics; do
        row "$name" "$size" "$m" "${v[remapring.$m]}" "${v[posix.$m]}" \
            "${v[cma.$m]}"
    done
}

start=$SECONDS
uct "uct am_lat short" 8 lat "remapring posix" -t am_lat -D short
uct "uct am_bw short" 8 rate "remapring posix" -t am_bw -D short
uct "uct am_bw bcopy" 8192 "bw rate" "remapring posix" -t am_bw -D bcopy
for s in "${size_list[@]}"; do
    uct "uct put_lat zcopy" "$s" lat "remapring cma" -t put_lat -D zcopy
    uct "uct put_bw zcopy" "$s" bw "remapring cma" -t put_bw -D zcopy
    uct "uct get zcopy" "$s" bw "remapring cma" -t get -D zcopy
done
for s in "${size_list[@]}"; do
    ucp "ucp tag_lat" "$s" lat -t tag_lat
done
for s in "${size_list[@]}"; do
    ucp "ucp tag_bw" "$s" "bw rate" -t tag_bw
done
ucp "ucp ucp_am_bw" 65536 bw -t ucp_am_bw
ucp "ucp ucp_am_bw" 1048576 bw -t ucp_am_bw
ucp "ucp stream_bw" 65536 bw -t stream_bw
echo
echo "UCX $(ucx_info -v | sed -n "s/^# Version //p"), $(nproc) cores," \
     "$(uname -r); iterations $small (< 64 KiB) / $large;" \
     "median of $reps runs; $((SECONDS - start)) s"
echo "UCP cma column: UCX_TLS=cma,posix,self (cma has no active messages)"
