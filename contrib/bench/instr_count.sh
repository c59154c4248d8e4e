#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Instructions per message of UCT active messages, remapring against posix,
# counted by valgrind (callgrind) in ucx_perftest's loopback mode: one
# process, one thread, sending to itself, so no cache line moves between
# cores and no poll spins. Only the instructions count, and they are
# counted exactly: the figure does not depend on how far apart the cores
# are, and little on the machine's load (see -h).
#
set -u

usage() {
    cat <<EOF
usage: $0 [options]
  -n N        iterations of the shorter run (default 20000); the figure is
              (Ir of a run of 3N - Ir of a run of N) / 2N, so that start-up
              and tear-down cancel out
  -t LIST     tests, comma separated (default all): am_lat_short,
              am_lat_bcopy, am_bw_short, am_bw_bcopy
  -s LIST     sizes in bytes (default 8,64,1024,4096); short tests take
              sizes up to 64 B (posix's am_short: 100 B), bcopy up to 4 KiB
  -m PATH     the module (default \$REMAPRING_MODULE, else pkg-config's)
  -h          this help

Each test: ucx_perftest -l -x TL -d memory -t am_lat|am_bw -D short|bcopy
(loopback), TL remapring (the module preloaded, the shm wire) and posix,
under valgrind --tool=callgrind. A column per transport, Ir per message
(am_lat: per iteration, a message and its delivery to the same process;
am_bw: per message sent and delivered), and the ratio remapring / posix
(below 1: remapring runs fewer). A count is exact for its run; where time
matters (a bandwidth test that fills the ring finds no credit more or less
often, the pool's timed work falls differently) it changes from run to
run: am_bw bcopy at 4 KiB by up to a half here. Slow: valgrind runs each
about 50 times slower.
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
n=20000
tests=am_lat_short,am_lat_bcopy,am_bw_short,am_bw_bcopy
sizes=8,64,1024,4096
module=${REMAPRING_MODULE:-$(pkg-config --variable=module remapring 2>/dev/null)}
while getopts "n:t:s:m:h" o; do
    case $o in
    n) n=$OPTARG ;;
    t) tests=$OPTARG ;;
    s) sizes=$OPTARG ;;
    m) module=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "-n: a positive number, not '$n'" >&2; exit 2; }
[[ $sizes =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    { echo "-s: sizes in bytes, comma separated, not '$sizes'" >&2; exit 2; }
for t in ${tests//,/ }; do
    case $t in
    am_lat_short|am_lat_bcopy|am_bw_short|am_bw_bcopy) ;;
    *) echo "-t: no test '$t'" >&2; exit 2 ;;
    esac
done
[ -n "$module" ] && [ -f "$module" ] ||
    { echo "no module: set REMAPRING_MODULE or -m PATH" >&2; exit 2; }
for c in valgrind ucx_perftest; do
    command -v $c >/dev/null || { echo "no $c" >&2; exit 2; }
done

# irefs TL ITERATIONS ARGS...: the instructions valgrind counted for one
# loopback run, or nothing if it failed
irefs() {
    local tl=$1 iters=$2 pre=
    shift 2
    [ "$tl" = remapring ] && pre=$module
    LD_PRELOAD=$pre UCX_REMAPRING_WIRE=shm \
        valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        ucx_perftest -l -x "$tl" -d memory -n "$iters" "$@" 2>&1 |
        awk '/^Final:/ { ok = 1 } /I +refs:/ { gsub(",", "", $NF); ir = $NF }
             END { if (ok && ir != "") print ir }'
}

# per_msg TL ARGS...: Ir per message, or "fail"
per_msg() {
    local a b
    a=$(irefs "$1" "$n" "${@:2}")
    b=$(irefs "$1" $((3 * n)) "${@:2}")
    if [ -z "$a" ] || [ -z "$b" ]; then
        echo fail
    else
        echo $(((b - a) / (2 * n)))
    fi
}

printf "%-14s %6s  %10s  %10s  %16s\n" test size remapring posix \
       "remapring/posix"
for t in ${tests//,/ }; do
    for s in ${sizes//,/ }; do
        case $t in
        *_short) [ "$s" -le 64 ] || continue ;;
        *_bcopy) [ "$s" -le 4096 ] || continue ;;
        esac
        args=(-t "${t%_*}" -D "${t##*_}" -s "$s")
        r=$(per_msg remapring "${args[@]}")
        p=$(per_msg posix "${args[@]}")
        ratio=-
        [[ $r =~ ^[0-9]+$ && $p =~ ^[1-9][0-9]*$ ]] &&
            ratio=$(awk -v r="$r" -v p="$p" 'BEGIN { printf "%.2f", r / p }')
        printf "%-14s %6s  %10s  %10s  %16s\n" "$t" "$s" "$r" "$p" "$ratio"
    done
done
echo "Ir per message, ucx_perftest -l (loopback, one thread), callgrind;" \
     "UCX $("$here/../../config/ucx-version.sh"), iterations $n and $((3 * n))"
