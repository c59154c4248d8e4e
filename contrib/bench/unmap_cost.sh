#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# What keeping UCX's registration caches coherent costs, side by side in one
# run, for each source of unmap events (contrib/bench/unmap_bench.c):
#   none     hooks off, nothing reported (the baseline)
#   ucm      UCM's hooks, UCX's default
#   uffd     remapring's userfaultfd monitor (watched memory only)
#   seccomp  remapring's seccomp source (every unmap of the process)
# 1. munmap() of a touched mapping (through libc, and as a raw system
#    call, which UCM's hooks do not see) and malloc()+free() of a block
#    above glibc's mmap threshold: p50 and p99 per source, what each adds
#    to the baseline, and that as a multiple of what UCM's hooks add (for
#    munmap: measured in one process, the hooked call against the raw one);
# 2. ucx_perftest UCP tag_bw by rendezvous (1 MiB, posix+cma, a run that
#    does not unmap) with the process under each source: MB/s and the ratio
#    to UCM's hooks.
#
# Each source runs in its own process, ROUNDS times in turn with the
# others; the table gives the median over the rounds (at 1 MiB, a
# munmap()'s own time differs by tens of microseconds from one process to
# the next here, more than any source adds: -s 4096 shows the added cost
# per call more precisely).
#
# usage: unmap_cost.sh [-n ITERS] [-s LEN] [-r ROUNDS] [-o OUTDIR] [-P]
#   -r  rounds (default 3)
#   -P  leave out the ucx_perftest part
#
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
iters=2000 len=$((1 << 20)) out=. perftest=1 rounds=3
while getopts "n:s:r:o:Ph" o; do
    case $o in
    n) iters=$OPTARG ;;
    r) rounds=$OPTARG ;;
    s) len=$OPTARG ;;
    o) out=$OPTARG ;;
    P) perftest=0 ;;
    *) sed -n '3,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    esac
done
build=${BUILD_DIR:-$top/build}
bench=$build/contrib/bench/unmap_bench
module=$build/.libs/libuct_remapring.so
[ -x "$bench" ] || { echo "unmap_cost: no $bench: build first" >&2; exit 1; }
mkdir -p "$out"

off=(UCX_MEM_MALLOC_HOOKS=n UCX_MEM_MMAP_HOOK_MODE=none)
# (auto would choose the seccomp source with the hooks off, as root)
declare -A envs=(
    [none]="${off[*]} UCX_REMAPRING_NOTIFIER=uffd"
    [ucm]="UCX_REMAPRING_NOTIFIER=uffd"
    [uffd]="${off[*]} UCX_REMAPRING_NOTIFIER=uffd UCX_REMAPRING_UCM_EXTERNAL=y"
    [seccomp]="${off[*]} UCX_REMAPRING_NOTIFIER=seccomp"
)
sources=(none ucm uffd seccomp)

csv=$out/unmap_cost.csv
rm -f "$out/perf.csv"
echo "source,what,p50_us,p99_us" > "$csv"
for r in $(seq "$rounds"); do
    for s in "${sources[@]}"; do
        # shellcheck disable=SC2086
        env ${envs[$s]} "$bench" "$s" -n "$iters" -s "$len" \
            > "$out/unmap_$s.$r.txt"
        awk -v s="$s" '/p50_us/ { split($2, a, "="); split($3, b, "=");
                                  printf "%s,%s,%s,%s\n", s, $1, a[2], b[2] }' \
            "$out/unmap_$s.$r.txt" >> "$csv"
    done
done

printf "\nunmapping calls, %s bytes, %s each, medians of %s rounds" \
       "$len" "$iters" "$rounds"
printf " (microseconds)\n"
python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs = {}
for r in rows:
    runs.setdefault((r["source"], r["what"]), []).append(
        (float(r["p50_us"]), float(r["p99_us"])))
val = {k: (statistics.median(p for p, _ in v), statistics.median(q for _, q in v))
       for k, v in runs.items()}
# What UCM's hooks add, in one process: munmap() through them against the
# raw system call, timed in turn (they do not see the raw call). Against
# the baseline process it is lost in the spread between processes.
ucm_add = {"munmap": val[("ucm", "munmap")][0] - val[("ucm", "munmap_raw")][0]}
for what in ("munmap", "munmap_raw", "malloc_free"):
    base = val[("none", what)][0]
    ucm_add.setdefault(what, val[("ucm", what)][0] - base)
    print(f"{what:12s} {'source':8s} {'p50':>8s} {'p99':>8s} {'added':>8s} "
          f"{'x ucm':>6s}")
    for s in ("none", "ucm", "uffd", "seccomp"):
        p50, p99 = val[(s, what)]
        add = p50 - base
        ratio = (f"{add / ucm_add[what]:6.2f}"
                 if ucm_add[what] > 0.05 and s in ("uffd", "seccomp")
                 and what != "munmap_raw"
                 else "     -")
        print(f"{'':12s} {s:8s} {p50:8.2f} {p99:8.2f} {add:8.2f} {ratio}")
print(f"UCM's hooks add {ucm_add['munmap']:.2f} us per munmap() (p50 through "
      f"the hooks minus p50 of the raw call, one process); 'added' is p50 "
      f"minus the baseline process's p50, 'x ucm' that over what the hooks "
      f"add")
PY

[ "$perftest" = 1 ] || exit 0
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest"; exit 0; }
printf "\nucx_perftest tag_bw 1 MiB (rendezvous), posix+cma, no unmapping\n"
port=$((20000 + RANDOM % 20000))
for s in ucm none uffd seccomp ucm none uffd seccomp; do
    # shellcheck disable=SC2086
    env ${envs[$s]} LD_PRELOAD="$module" UCX_TLS=posix,cma,self \
        timeout 120 ucx_perftest -p $port -t tag_bw -s 1048576 -n 2000 \
        > "$out/perf_$s.server" 2>&1 &
    sleep 1
    # shellcheck disable=SC2086
    env ${envs[$s]} LD_PRELOAD="$module" UCX_TLS=posix,cma,self \
        timeout 120 ucx_perftest localhost -p $port -t tag_bw -s 1048576 \
        -n 2000 > "$out/perf_$s.client" 2>&1 || true
    wait || true
    port=$((port + 1))
    awk -v s="$s" '/Final:/ { print s "," $(NF-3) }' "$out/perf_$s.client" \
        >> "$out/perf.csv"
done
python3 - "$out/perf.csv" <<'PY'
import sys, statistics
v = {}
for line in open(sys.argv[1]):
    s, mbs = line.strip().split(",")
    v.setdefault(s, []).append(float(mbs))
ucm = statistics.median(v.get("ucm", [0]))
for s in ("ucm", "none", "uffd", "seccomp"):
    if s in v:
        m = statistics.median(v[s])
        print(f"  {s:8s} {m:9.1f} MB/s  x{m / ucm:.2f} of ucm" if ucm else s)
PY
