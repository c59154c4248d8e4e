#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# ucx_perftest between two local processes over remapring, with the module
# preloaded:
#   UCT (-x remapring -d memory): am_lat and am_bw with -D short, bcopy and
#   zcopy up to the limits the interface reports; put_lat, put_bw and get
#   with zcopy from 8 B to 4 MiB;
#   UCP (UCX_TLS=remapring,self): tag_lat, tag_bw, stream_lat, stream_bw,
#   ucp_am_bw, from 8 B to 4 MiB (eager and rendezvous).
# Every run must exit 0 and print a "Final:" line; for UCP the lane dump
# (ep_cfg line at UCX_LOG_LEVEL=info, and ucx_info -e) must show remapring
# carrying the traffic. Iteration counts are small: this checks that the
# transport works, it times nothing.
#
. "$(dirname "$0")/common.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

command -v ucx_perftest >/dev/null || skip "ucx_perftest not installed"

# the interface's limits, from the remapring block of ucx_info -d
LD_PRELOAD=$REMAPRING_MODULE ucx_info -d > "$tmp/d" 2>&1 || fail "ucx_info -d"
cap() {
    local v
    v=$(sed -n '/Transport: remapring/,/Transport:\|Memory domain:/p' "$tmp/d" |
        sed -n "s/^# *$1: <= \([0-9]*[KM]\{0,1\}\).*/\1/p" | head -1)
    case $v in
    *K) echo $((${v%K} * 1024)) ;;
    *M) echo $((${v%M} * 1048576)) ;;
    *)  echo "$v" ;;
    esac
}
max_short=$(cap am_short)
max_bcopy=$(cap am_bcopy)
max_zcopy=$(cap am_zcopy)
[ -n "$max_short" ] && [ -n "$max_bcopy" ] && [ -n "$max_zcopy" ] ||
    fail "remapring limits not found in ucx_info -d"
note "remapring: am_short <= $max_short, am_bcopy <= $max_bcopy," \
     "am_zcopy <= $max_zcopy"

runs=0
failed=()
# run NAME ARGS...: one server/client pair; checks the exit status and the
# result line, prints the result line. A failure is recorded and the other
# tests still run; the script fails at the end.
run() {
    local name=$1 out
    shift
    runs=$((runs + 1))
    out=$tmp/run$runs
    last=$out
    if ! perftest_pair "$out" yes "$@" 2>"$out.shell"; then
        echo "   $name: FAILED (ucx_perftest $*)"
        grep -h "ERROR\|Caught\|corruption\|Assertion" "$out".* | head -n 5 |
            sed 's/^/      /'
        failed+=("$name")
        return 1
    fi
    if ! grep -q "^Final:" "$out.client"; then
        echo "   $name: FAILED (no Final: line)"
        failed+=("$name")
        return 1
    fi
    printf '   %-34s %s\n' "$name" \
        "$(grep '^Final:' "$out.client" | sed 's/^Final: *//')"
}

# iterations by size: enough to cross many ring slots, little time
iters() {
    if [ "$1" -ge 1048576 ]; then
        echo "-n 40 -w 5"
    elif [ "$1" -ge 65536 ]; then
        echo "-n 300 -w 30"
    else
        echo "-n 2000 -w 200"
    fi
}

note "UCT -x remapring -d memory (iterations, median/avg/overall usec," \
     "MB/s, msg/s)"
uct="-x remapring -d memory"
for s in 8 256 "$max_short"; do
    run "am_lat short $s" -t am_lat $uct -D short -s "$s" $(iters "$s")
    run "am_bw short $s" -t am_bw $uct -D short -s "$s" $(iters "$s")
done
for s in 8 4096 "$max_bcopy"; do
    run "am_lat bcopy $s" -t am_lat $uct -D bcopy -s "$s" $(iters "$s")
    run "am_bw bcopy $s" -t am_bw $uct -D bcopy -s "$s" $(iters "$s")
done
for s in 8 8192 "$max_zcopy"; do
    run "am_lat zcopy $s" -t am_lat $uct -D zcopy -s "$s" $(iters "$s")
    run "am_bw zcopy $s" -t am_bw $uct -D zcopy -s "$s" $(iters "$s")
done
for s in 8 65536 1048576 4194304; do
    run "put_lat zcopy $s" -t put_lat $uct -D zcopy -s "$s" $(iters "$s")
    run "put_bw zcopy $s" -t put_bw $uct -D zcopy -s "$s" $(iters "$s")
    run "get zcopy $s" -t get $uct -D zcopy -s "$s" $(iters "$s")
done

note "UCP UCX_TLS=remapring,self"
export UCX_TLS=remapring,self
export UCX_LOG_LEVEL=info
for t in tag_lat tag_bw stream_lat stream_bw ucp_am_bw; do
    for s in 8 4096 65536 1048576 4194304; do
        case $t in
        *_lat) [ "$s" = 1048576 ] && continue ;;  # 4 MiB covers rndv
        esac
        run "$t $s" -t "$t" -s "$s" $(iters "$s") || continue
        # UCX 1.13 prints the lanes of each endpoint configuration, e.g.
        # "ep_cfg[0]: tag(remapring/memory)"
        lanes=$(grep -h "ep_cfg\[" "$last.client" "$last.server" |
                sed 's/.*INFO *//' | sort -u)
        [ -n "$lanes" ] || fail "$t $s: no ep_cfg line"
        echo "$lanes" | grep -q "remapring/memory" ||
            fail "$t $s: remapring carries no lane: $lanes"
        # every transport/device named must be remapring (or self)
        echo "$lanes" | sed 's/^[^:]*: *//' |
            grep -o "[a-z0-9_]*/[a-z0-9_:.]*" | grep -qv "^remapring/\|^self/" &&
            fail "$t $s: another transport took a lane: $lanes"
    done
    echo "   lanes: $lanes"
done
unset UCX_LOG_LEVEL

note "ucx_info -e: remapring takes the am and rma_bw (rendezvous) lanes"
LD_PRELOAD=$REMAPRING_MODULE ucx_info -e -u t -P intra > "$tmp/e" 2>&1 ||
    fail "ucx_info -e"
lane=$(grep "lane\[" "$tmp/e") || { cat "$tmp/e"; fail "no lanes printed"; }
echo "   $lane" | sed 's/  */ /g'
echo "$lane" | grep -q "remapring/memory.*\bam\b" || fail "no remapring am lane"
echo "$lane" | grep -q "remapring/memory.*rma_bw" ||
    fail "no remapring rma_bw lane"
grep "tag_send:" "$tmp/e" | sed 's/^# */   /'
grep -q "<rndv>" "$tmp/e" || fail "no rendezvous threshold"
unset UCX_TLS

[ ${#failed[@]} -eq 0 ] ||
    fail "${#failed[@]} of $runs runs failed: $(printf '%s, ' "${failed[@]}")"
note "$runs runs"
echo "PASS"
