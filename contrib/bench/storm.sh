#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The unexpected-message storm through UCP (test/apps/ucp_storm.c), over
# remapring and over posix in the same run: N messages of S bytes sent
# before the receiver posts any receive, so that UCP keeps them all; the
# receiver's memory held per held payload byte, and the time to drain them.
# A benchmark: it prints figures and asserts nothing but that each run
# completed with every byte right.
#
set -euo pipefail

usage() {
    cat <<EOF
usage: contrib/bench/storm.sh [options]
  -s LIST      message sizes in bytes (default 64,256,1024,4096,16384,65536)
  -P BYTES     payload held in one storm, the same at every size: each
               size S keeps N = BYTES / S messages (default 16m: 262144 x
               64 B ... 512 x 64 KiB); k, m, g suffixes
  -k K         a sparse storm: the sender sends K messages for each one
               kept, and K - 1 of them find a receive the receiver posted
               before the storm (default 1: every message kept). With K,
               N x K messages go through the receiver and 1 in K is kept
               for the rest of the storm: what a receiver keeps when some
               of its traffic comes before its receives
  -r N         runs; each figure is the median of the runs (default 3). In
               each run every size goes through every transport in turn
  -w LIST      remapring wires (default shm; --wire shm,cma adds cma)
  --wire LIST  the same as -w
  -m PATH      the module (default \$REMAPRING_MODULE, else
               BUILD_DIR/.libs/libuct_remapring.so, BUILD_DIR being build/
               of the source tree)
  -o DIR       where the results go (default BUILD_DIR/bench): storm.csv
               (medians and ratios), storm-raw.csv (every run), storm.txt
               (the table)
  -R FILE      also append every run's figures to FILE, a contrib/bench
               raw CSV (bench,size,metric,transport,run,value), for
               bench.sh's table
  -t SEC       a storm or its drain that takes longer fails the run
               (default 120); a run is killed after 3 x SEC in all
  -h           this help

Transports, two processes on this host (ucp_storm forks), in turn:
  remapring-WIRE  the module preloaded, UCX_TLS=remapring,self,
                  UCX_REMAPRING_WIRE=WIRE
  posix+cma       no module, UCX_TLS=posix,cma,self
Both with UCX's defaults otherwise (rendezvous threshold, eager sizes,
UCX_REMAPRING_RX_INLINE, RX_COPY): the table says which protocol the sender's UCP
took at each size and the run's first "tag_send" line per transport gives
the thresholds.
Figures, for the receiver (ucp_storm's header says how each is taken):
  rss        (peak - before) / payload of RssAnon + RssFile + RssShmem
  anon,shmem the same for RssAnon and RssShmem alone (UCP's own copies
             are anonymous memory; the transports' receive memory, pool,
             copies or posix segments, is shared memory)
  pool       remapring only: receive pool blocks off their free lists
             (the bytes remapring_pool_blocks_in_use() reports)
  memfd      remapring only: bytes the pool memfds, their fold memfds and
             the copies of small messages hold (st_blocks; pages punched
             under kept blocks are not counted)
  8k-desc    computed, not measured: what fixed 8 KiB receive descriptors
             (posix's) would hold per payload byte, ceil(S / 8 KiB) x 8 KiB / S
  drain      from the first receive posted to the last one complete, and
             payload / that time (MB/s, 2^20 bytes)
Ratios are remapring / posix+cma (held memory and drain time: below 1 means
remapring holds less, drains faster). Run it alone on the machine (e.g.
under flock -x): the processes busy-poll.
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$top/build}

sizes=64,256,1024,4096,16384,65536
payload=16m
keep=1
reps=3
wires=shm
module=${REMAPRING_MODULE:-}
out=
rawbench=
timeout=120
while [ $# -gt 0 ]; do
    case $1 in
    -s) sizes=$2; shift ;;
    -P) payload=$2; shift ;;
    -k) keep=$2; shift ;;
    -r) reps=$2; shift ;;
    -w|--wire) wires=$2; shift ;;
    -m) module=$2; shift ;;
    -o) out=$2; shift ;;
    -R) rawbench=$2; shift ;;
    -t) timeout=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

bytes() {
    local v=$1 m=1
    case $v in
    *[kK]) m=1024; v=${v%?} ;;
    *[mM]) m=$((1024 * 1024)); v=${v%?} ;;
    *[gG]) m=$((1024 * 1024 * 1024)); v=${v%?} ;;
    esac
    [[ $v =~ ^[0-9]+$ ]] || { echo "not a size: '$1'" >&2; exit 2; }
    echo $((v * m))
}
payload=$(bytes "$payload")
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "-r: a positive number" >&2; exit 2; }
[[ $keep =~ ^[1-9][0-9]*$ ]] || { echo "-k: a positive number" >&2; exit 2; }
[[ ,$sizes, =~ ^(,[0-9]+)+,$ ]] || { echo "-s: sizes, not '$sizes'" >&2; exit 2; }
for s in ${sizes//,/ }; do
    [ "$s" -ge 8 ] || { echo "-s: at least 8 bytes" >&2; exit 2; }
done
[[ ,$wires, =~ ^(,(shm|cma))+,$ ]] || { echo "-w: shm and/or cma" >&2; exit 2; }

module=${module:-$build/.libs/libuct_remapring.so}
[ -f "$module" ] || { echo "no module at $module (-m)" >&2; exit 2; }
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
command -v cc >/dev/null || { echo "no C compiler" >&2; exit 2; }
pkg-config --exists ucx || { echo "pkg-config does not know ucx" >&2; exit 2; }

out=${out:-$build/bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -g -Wall -o "$tmp/ucp_storm" "$top/test/apps/ucp_storm.c" \
    $(pkg-config --cflags --libs ucx) -ldl

transports=()
IFS=, read -r -a wire_list <<< "$wires"
for w in "${wire_list[@]}"; do
    transports+=("remapring-$w")
done
transports+=(posix+cma)

raw=$out/storm-raw.csv
keys="size count transport run proto am_lane rss_per_byte anon_per_byte"
keys+=" shmem_per_byte pool_per_byte memfd_per_byte drain_usec drain_mbps"
keys+=" ready_at_post"
echo "${keys// /,}" > "$raw"
start=$SECONDS
failed=0

run_one() {
    local tr=$1 s=$2 n=$3 r=$4 o=$tmp/run.out rc=0
    if [[ $tr == remapring-* ]]; then
        LD_PRELOAD=$module UCX_TLS=remapring,self \
            UCX_REMAPRING_WIRE=${tr#remapring-} \
            timeout $((3 * timeout)) "$tmp/ucp_storm" -n "$n" -s "$s" \
            -k "$keep" -t "$timeout" > "$o" 2>&1 || rc=$?
    else
        LD_PRELOAD= UCX_TLS=posix,cma,self \
            timeout $((3 * timeout)) "$tmp/ucp_storm" -n "$n" -s "$s" \
            -k "$keep" -t "$timeout" > "$o" 2>&1 || rc=$?
    fi
    if [ $rc -ne 0 ] || ! grep -q "^storm-result:" "$o"; then
        echo "storm: $tr, $s B x $n, run $r failed (status $rc):" >&2
        tail -5 "$o" >&2
        failed=$((failed + 1))
        echo "$s,$n,$tr,$r,fail,,,,,,,,," >> "$raw"
        return
    fi
    [ "$r" -eq 1 ] && [ "$s" = "${sizes%%,*}" ] &&
        echo "storm: $tr: $(sed -n 's/^storm: sender.s //p' "$o")" >&2
    sed -n 's/^storm-result: //p' "$o" | tr ' ' '\n' | awk -F= -v keys="$keys" \
        -v tr="$tr" -v run="$r" '
        { v[$1] = $2 }
        END {
            v["transport"] = tr; v["run"] = run
            n = split(keys, k, " ")
            for (i = 1; i <= n; i++)
                printf "%s%s", v[k[i]], (i < n ? "," : "\n")
        }' >> "$raw"
}

for ((r = 1; r <= reps; r++)); do
    for s in ${sizes//,/ }; do
        n=$((payload / s))
        [ $n -ge 1 ] || n=1
        for tr in "${transports[@]}"; do
            printf "storm: run %d/%d, %d B x %d, %s, %d s\n" $r $reps $s $n \
                "$tr" $((SECONDS - start)) >&2
            run_one "$tr" "$s" "$n" "$r"
        done
    done
done

# the medians, the table, the CSV, and bench.sh's rows
STORM_KEEP=$keep \
python3 - "$raw" "$out/storm.csv" "${rawbench:-}" <<'EOF' | tee "$out/storm.txt"
import csv, math, os, statistics, sys

raw, out_csv, bench_raw = sys.argv[1:4]
BASE = "posix+cma"
rows = list(csv.DictReader(open(raw)))
order, transports, per = [], [], {}
for r in rows:
    key = (int(r["size"]), int(r["count"]))
    if key not in order:
        order.append(key)
    if r["transport"] not in transports:
        transports.append(r["transport"])
    per.setdefault((key, r["transport"]), []).append(r)
transports.sort(key=lambda t: t == BASE)

def med(rs, f):
    v = []
    for r in rs:
        try:
            v.append(float(r[f]))
        except (ValueError, TypeError):
            pass
    return statistics.median(v) if v else None

def size_name(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n

def f2(v, fmt="%.2f"):
    return "-" if v is None else fmt % v

fields = ["rss_per_byte", "anon_per_byte", "shmem_per_byte", "pool_per_byte",
          "memfd_per_byte", "drain_usec", "drain_mbps"]
med_of = {}
for key in order:
    for t in transports:
        rs = per.get((key, t), [])
        m = {f: med(rs, f) for f in fields}
        m["proto"] = "/".join(sorted({r["proto"] for r in rs
                                      if r["proto"] != "fail"})) or "fail"
        m["runs"] = sum(1 for r in rs if r["proto"] != "fail")
        m["ready"] = med(rs, "ready_at_post")
        med_of[(key, t)] = m

head = ["size", "N", "transport", "proto", "rss", "anon", "shmem", "pool",
        "memfd", "8k-desc", "drain ms", "MB/s", "rss/posix", "drain/posix"]
table = []
for key in order:
    s, n = key
    desc = math.ceil(s / 8192) * 8192 / s
    b = med_of[(key, BASE)]
    for t in transports:
        m = med_of[(key, t)]
        rr = dr = "-"
        if t != BASE:
            if m["rss_per_byte"] is not None and b["rss_per_byte"]:
                rr = "%.2f" % (m["rss_per_byte"] / b["rss_per_byte"])
            if m["drain_usec"] is not None and b["drain_usec"]:
                dr = "%.2f" % (m["drain_usec"] / b["drain_usec"])
        table.append([size_name(s), str(n), t.replace("remapring-", "rr-"),
                      m["proto"], f2(m["rss_per_byte"]),
                      f2(m["anon_per_byte"]), f2(m["shmem_per_byte"]),
                      f2(m["pool_per_byte"]), f2(m["memfd_per_byte"]),
                      "%.2f" % desc,
                      f2(None if m["drain_usec"] is None
                         else m["drain_usec"] / 1e3, "%.1f"),
                      f2(m["drain_mbps"], "%.0f"), rr, dr])
w = [max(len(r[i]) for r in [head] + table) for i in range(len(head))]
line = lambda c: "  ".join(x.ljust(w[i]) if i < 4 else x.rjust(w[i])
                           for i, x in enumerate(c)).rstrip()
print(line(head))
print(line(["-" * x for x in w]))
for r in table:
    print(line(r))
print("held bytes per payload byte, (peak - before) / payload, medians of "
      "%d run(s); rss = RssAnon + RssFile + RssShmem; pool = remapring "
      "pool blocks in use, memfd = what the pool, fold and copies memfds hold; 8k-desc "
      "computed; ratios remapring / %s (below 1: remapring holds less, "
      "drains faster)" % (max(m["runs"] for m in med_of.values()), BASE))
keep = int(os.environ.get("STORM_KEEP", "1"))
if keep > 1:
    print("sparse storm: one message in %d kept, N the kept ones (N x %d "
          "sent), payload = N x size" % (keep, keep))

with open(out_csv, "w", newline="") as f:
    wr = csv.writer(f)
    wr.writerow(["size", "count", "transport", "proto", "runs"] + fields +
                ["desc8k_per_byte", "rss_ratio", "drain_ratio"])
    for key in order:
        b = med_of[(key, BASE)]
        for t in transports:
            m = med_of[(key, t)]
            rat = lambda f: ("" if t == BASE or m[f] is None or not b[f]
                             else "%.4f" % (m[f] / b[f]))
            wr.writerow(list(key) + [t, m["proto"], m["runs"]] +
                        ["" if m[f] is None else "%.6g" % m[f]
                         for f in fields] +
                        ["%.4f" % (math.ceil(key[0] / 8192) * 8192 / key[0]),
                         rat("rss_per_byte"), rat("drain_usec")])

# bench.sh's raw rows: held bytes per payload byte (metric "held") and
# drain bandwidth (metric "bw"), one row per run
if bench_raw:
    with open(bench_raw, "a", newline="") as f:
        wr = csv.writer(f)
        for r in rows:
            for bench, field in (("UCP storm held RSS", "rss_per_byte"),
                                 ("UCP storm held pool", "memfd_per_byte"),
                                 ("UCP storm drain", "drain_mbps")):
                if bench.endswith("pool") and r["transport"] == BASE:
                    continue
                v = r[field] if r["proto"] != "fail" else "fail"
                wr.writerow([bench, r["size"],
                             "bw" if field == "drain_mbps" else "held",
                             r["transport"], r["run"], v or "fail"])
EOF
echo "storm: $((SECONDS - start)) s; results in $out (storm.csv, storm-raw.csv)" >&2
[ $failed -eq 0 ] || { echo "storm: $failed run(s) failed" >&2; exit 1; }
