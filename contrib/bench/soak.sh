#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Soak: test/apps/ucp_hold for a fixed time (10 minutes by default) over
# remapring, holds and releases all along; each side samples its RSS,
# mappings, file descriptors and the transport's pool blocks in use every
# second. Prints the series and whether they stayed flat after a warm-up
# (contrib/bench/soak_report.py). A benchmark-style run, not a CI test.
#
set -euo pipefail

usage() {
    cat <<EOF
usage: contrib/bench/soak.sh [--wire shm|cma] [options]
  --wire WIRE  UCX_REMAPRING_WIRE of both processes: shm (default) or cma
  -t SECONDS   how long the sender sends (default \$SOAK_SECONDS, else 600)
  -W SECONDS   warm-up, not judged (default \$SOAK_WARMUP, else 10% of the
               run: 60 s of the 10 minutes)
  -i MS        sample interval of each side (default \$SOAK_INTERVAL_MS, else
               1000)
  -e SECONDS   a table row every so many seconds (default \$SOAK_EVERY, else
               the run / 60, at least 1)
  -H N         messages the receiver holds at once at most (ucp_hold -H;
               default \$SOAK_MAX_HELD, else 64)
  -a ARGS      more ucp_hold options (default \$SOAK_HOLD_ARGS), e.g.
               "-p 50 -t 5000" to hold half the messages up to 5 ms
  -m PATH      the module (default \$REMAPRING_MODULE, else
               BUILD_DIR/.libs/libuct_remapring.so, built with
               contrib/build.sh if missing; BUILD_DIR is build/ of the tree)
  -o DIR       where the results go (default BUILD_DIR/soak): soak-WIRE.csv
               (every sample: wire, side, t_s, rss_kib, anon_kib, shmem_kib,
               vmas, ring_vmas, fold_vmas, fds, pool_blocks, messages, held,
               msgs_per_s), soak-WIRE.log (ucp_hold's output), soak-WIRE.txt
               (the table and the verdict), smaps-WIRE-SIDE-warmup and
               -end (/proc/PID/smaps of each side at the end of the warm-up
               and 2 s before the end of the traffic)
  -h           this help

The traffic: two processes (test/apps/ucp_hold, built here with cc), UCP
active and tag messages of 0 B to 1 MiB (log-uniform), every byte checked;
the receiver keeps a quarter of the active-message data descriptors and
defers a quarter of the rendezvous receives, each up to 2 ms, at most -H at
once. UCX_TLS=remapring,self, the module preloaded; both processes' lanes
must be remapring's. Other UCX_REMAPRING_* settings in the environment
apply (UCX_REMAPRING_RING_SLOTS, default 8, sets a margin below).

Each side samples (proc_stats.h): RSS (VmRSS; RssAnon and RssShmem in the
CSV), VMAs (lines of /proc/self/maps; of them the transport's memfd
mappings, and those the pool's folded pages added), open fds, pool blocks in use (remapring_pool_blocks_in_use()),
messages done and held. The table shows both sides, a row every -e seconds.
After the verdict, where each side's RSS moved between its two smaps
snapshots: the mappings whose Rss changed most.

Verdict, for each side: after the warm-up, the maximum of each series may
exceed its value at the end of the warm-up (its last sample in it) by at
most:
  RSS          max(2 MiB, 5% of that value)
  VMAs         RING_SLOTS + 1, of the VMAs less those folded pages added:
               the ring view a process receives on is up to RING_SLOTS
               mappings once held blocks were remapped under its slots
               (cma wire), and the pool's view one more as it grows
  folded VMAs  4 x -H: the VMAs folded pages added (a page of a held
               message folded into a shared page is a mapping of its own
               inside the pool's, splitting it in three; each held message
               folds at most its first and last pages)
  fds          0
  pool blocks  -H + RING_SLOTS: each held message may keep a block out of
               its slot, and a ring's grant grows up to RING_SLOTS
A process's receive ring is resident whole only once its traffic has gone
round the window: on the cma wire, where both of its views count (the pool's
and the ring's, 2 x RING_SLOTS x BLOCK_SIZE, 2 MiB by default), the
sender's ring, which carries little, took about 3 minutes on a 2-core VM;
a shorter warm-up sees its pages still coming in.
Held messages and messages/s are shown, not judged. Exit status: 0 flat,
1 not flat (which series grew, from what to what, at what time) or
ucp_hold failed, 2 bad usage or not enough samples.
Run it where nothing else runs (memory is what it measures, not speed:
flock -s is enough), e.g. flock -s /work/cpu.lock nice -n 5 soak.sh.
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$top/build}

wire=shm
seconds=${SOAK_SECONDS:-600}
warmup=${SOAK_WARMUP:-}
interval=${SOAK_INTERVAL_MS:-1000}
every=${SOAK_EVERY:-}
max_held=${SOAK_MAX_HELD:-64}
hold_args=${SOAK_HOLD_ARGS:-}
module=${REMAPRING_MODULE:-}
out=
while [ $# -gt 0 ]; do
    case $1 in
    --wire) wire=${2:-}; shift ;;
    --wire=*) wire=${1#--wire=} ;;
    -t) seconds=${2:-}; shift ;;
    -W) warmup=${2:-}; shift ;;
    -i) interval=${2:-}; shift ;;
    -e) every=${2:-}; shift ;;
    -H) max_held=${2:-}; shift ;;
    -a) hold_args=${2:-}; shift ;;
    -m) module=${2:-}; shift ;;
    -o) out=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
case $wire in
shm|cma) ;;
*) echo "--wire: shm or cma, not '$wire'" >&2; exit 2 ;;
esac
for n in "$seconds" "$interval" "$max_held"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] ||
        { echo "-t, -i, -H: a positive number, not '$n'" >&2; exit 2; }
done
: "${warmup:=$(( seconds / 10 ))}"
: "${every:=$(( seconds / 60 > 0 ? seconds / 60 : 1 ))}"
[[ $warmup =~ ^[0-9]+$ ]] && [ "$warmup" -lt "$seconds" ] ||
    { echo "-W: seconds, less than -t, not '$warmup'" >&2; exit 2; }
[[ $every =~ ^[1-9][0-9]*$ ]] ||
    { echo "-e: a positive number, not '$every'" >&2; exit 2; }
ring_slots=${UCX_REMAPRING_RING_SLOTS:-8}

if [ -z "$module" ]; then
    module=$build/.libs/libuct_remapring.so
    [ -f "$module" ] || "$top/contrib/build.sh"
fi
[ -f "$module" ] || { echo "no module at $module" >&2; exit 2; }
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
out=${out:-$build/soak}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cc -O2 -g -Wall -o "$tmp/ucp_hold" "$top/test/apps/ucp_hold.c" \
    $(pkg-config --cflags --libs ucx) -lm -ldl

log=$out/soak-$wire.log
smaps=$out/smaps-$wire
rm -f "$smaps"-*

# Copies both sides' smaps when the receiver's samples reach the end of the
# warm-up, and 2 s before the end of the traffic. $1: the pid of timeout,
# whose child is the receiver, whose child is the sender.
smaps_watch() {
    local tpid=$1 phase=warmup at=$warmup t rpid spid
    while kill -0 "$tpid" 2>/dev/null; do
        t=$(tail -n 20 "$log" 2>/dev/null | awk '$1 == "sample" &&
            $2 == "receiver" { t = $3 } END { print int(t) }')
        if [ "$t" -ge "$at" ]; then
            rpid=$(pgrep -P "$tpid" | head -1)
            spid=${rpid:+$(pgrep -P "$rpid" | head -1)}
            [ -n "$spid" ] || return 0
            cp "/proc/$rpid/smaps" "$smaps-receiver-$phase" 2>/dev/null || :
            cp "/proc/$spid/smaps" "$smaps-sender-$phase" 2>/dev/null || :
            [ $phase = warmup ] || return 0
            phase=end
            at=$(( seconds - 2 ))
        fi
        sleep 0.5
    done
}
echo "soak: ucp_hold for $seconds s on the $wire wire, at most $max_held" \
     "held, a sample every $interval ms, warm-up $warmup s; $log"
start=$SECONDS
rc=0
UCX_TLS=remapring,self UCX_REMAPRING_WIRE=$wire UCX_LOG_LEVEL=info \
    LD_PRELOAD=$module timeout $(( seconds + 300 )) "$tmp/ucp_hold" \
    -d "$seconds" -S "$interval" -H "$max_held" -D 1024 $hold_args \
    > "$log" 2>&1 &
tpid=$!
smaps_watch "$tpid" &
wpid=$!
wait "$tpid" || rc=$?
wait "$wpid" || :
grep -v "^sample \|UCX  INFO\|UCX  DIAG" "$log" | sed 's/^/   /'
echo "   ($(( SECONDS - start )) s)"

failed=
[ $rc -eq 0 ] && grep -q "^PASS" "$log" ||
    failed="ucp_hold failed (exit status $rc)"
[ "$(grep -c "ep_cfg\[.*remapring/memory" "$log")" -ge 2 ] ||
    failed="${failed:+$failed; }remapring did not carry both processes' traffic"

src=0
python3 "$here/soak_report.py" --csv "$out/soak-$wire.csv" --wire "$wire" \
    --warmup "$warmup" --every "$every" --max-held "$max_held" \
    --ring-slots "$ring_slots" --smaps "$smaps" "$log" | tee "$out/soak-$wire.txt" ||
    src=${PIPESTATUS[0]}
echo "series: $out/soak-$wire.csv"
if [ -n "$failed" ]; then
    echo "FAIL: $failed"
    exit 1
fi
exit "$src"
