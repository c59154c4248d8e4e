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
#    then the same munmap() under the kernel's ways of stopping it alone,
#    nothing reported (contrib/bench/trap_cost.c): a filter that lets it
#    through, SIGSYS in the calling thread, a bare supervisor thread;
# 2. ucx_perftest UCP tag_bw by rendezvous (1 MiB, posix+cma, a run that
#    does not unmap) with the process under each source: MB/s and the ratio
#    to UCM's hooks;
# 3. an MPI program that unmaps: Open MPI over UCX (posix+cma), a
#    ping-pong whose buffers are malloc()ed and freed for every message
#    (test/apps/mpi_bench.c -t fresh, glibc's mmap threshold fixed at
#    16 KiB, so each free() is an munmap()), at 32 KiB (eager) and 1 MiB
#    (rendezvous), with each source: microseconds per message and the
#    ratio to UCM's hooks.
#
# Each source runs in its own process, ROUNDS times in turn with the
# others; the table gives the median over the rounds (at 1 MiB, a
# munmap()'s own time differs by tens of microseconds from one process to
# the next here, more than any source adds: -s 4096 shows the added cost
# per call more precisely).
#
# usage: unmap_cost.sh [-n ITERS] [-s LEN] [-r ROUNDS] [-o OUTDIR] [-P] [-M]
#   -r  rounds (default 3)
#   -P  leave out the ucx_perftest part
#   -M  leave out the MPI part
#
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
iters=2000 len=$((1 << 20)) out=. perftest=1 mpi=1 rounds=3
while getopts "n:s:r:o:PMh" o; do
    case $o in
    n) iters=$OPTARG ;;
    r) rounds=$OPTARG ;;
    s) len=$OPTARG ;;
    o) out=$OPTARG ;;
    P) perftest=0 ;;
    M) mpi=0 ;;
    *) sed -n '3,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
trap=$out/trap_cost.csv
trap_bin=$build/contrib/bench/trap_cost
rm -f "$out/perf.csv"
echo "source,what,p50_us,p99_us" > "$csv"
echo "way,added_us" > "$trap"
for r in $(seq "$rounds"); do
    for s in "${sources[@]}"; do
        # shellcheck disable=SC2086
        env ${envs[$s]} "$bench" "$s" -n "$iters" -s "$len" \
            > "$out/unmap_$s.$r.txt"
        awk -v s="$s" '/p50_us/ { split($2, a, "="); split($3, b, "=");
                                  printf "%s,%s,%s,%s\n", s, $1, a[2], b[2] }' \
            "$out/unmap_$s.$r.txt" >> "$csv"
    done
    # the kernel's ways alone, the same mapping size (small ones: more
    # calls, each is cheap)
    if [ -x "$trap_bin" ]; then
        "$trap_bin" -n $((len <= 65536 ? iters * 10 : iters)) -s "$len" \
            > "$out/trap_cost.$r.txt"
        awk '/added_us=/ { for (i = 1; i <= NF; ++i)
                               if ($i ~ /^added_us=/) {
                                   split($i, a, "="); print $1 "," a[2] } }' \
            "$out/trap_cost.$r.txt" >> "$trap"
    fi
done

printf "\nunmapping calls, %s bytes, %s each, medians of %s rounds" \
       "$len" "$iters" "$rounds"
printf " (microseconds)\n"
python3 - "$csv" "$trap" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs = {}
for r in rows:
    runs.setdefault((r["source"], r["what"]), []).append(
        (float(r["p50_us"]), float(r["p99_us"])))
val = {k: (statistics.median(p for p, _ in v), statistics.median(q for _, q in v))
       for k, v in runs.items()}
# In one process, two calls timed in turn: the median over the rounds of
# the difference of their p50s (between processes it is lost in the
# spread: a baseline process differs by microseconds from the next)
def paired(s, a, b):
    return statistics.median(x[0] - y[0] for x, y in
                             zip(runs[(s, a)], runs[(s, b)]))
# What UCM's hooks add: munmap() through them against the raw system call
# (they do not see it).
ucm_add = {"munmap": paired("ucm", "munmap", "munmap_raw")}
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
      f"the hooks minus p50 of the raw call, one process, median of the "
      f"rounds); 'added' is p50 "
      f"minus the baseline process's p50, 'x ucm' that over what the hooks "
      f"add; for seccomp, munmap() is the in-thread path, munmap_raw the "
      f"worker's")

ways = {}
for r in csv.DictReader(open(sys.argv[2])):
    ways.setdefault(r["way"], []).append(float(r["added_us"]))
trap = {w: statistics.median(v) for w, v in ways.items()}
if trap:
    print("\nthe kernel's ways alone, nothing reported (trap_cost, added "
          "p50, median of the rounds): " +
          ", ".join(f"{w} {trap[w]:.2f}" for w in ("allow", "trap", "notify")
                    if w in trap))
if ("seccomp", "munmap_unreported") in val and "allow" in trap:
    # against munmap() made unreported from the instruction the filter lets
    # through, in the same process; plus what the filter itself adds
    for what, name in (("munmap", "in-thread path"),
                       ("munmap_raw", "a worker (raw call)")):
        own = paired("seccomp", what, "munmap_unreported")
        total = own + trap["allow"]
        print(f"seccomp, {name}, in one process: {own:.2f} (against the "
              f"call made unreported) + the filter {trap['allow']:.2f} "
              f"(trap_cost allow) = {total:.2f} us, "
              f"x{total / ucm_add['munmap']:.2f} of UCM's hooks")
PY

perftest_part() {
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
}

# mpi_part: mpi_bench -t fresh under Open MPI with each source, in turn,
# ROUNDS times; the medians and their ratio to UCM's hooks
mpi_part() {
    local src=$top/test/apps/mpi_bench.c prog=$out/mpi_bench.ompi s r v
    local -a pass
    LD_PRELOAD='' mpicc.openmpi -O2 -o "$prog" "$src"
    rm -f "$out/mpi.csv"
    printf "\nOpen MPI ping-pong, buffers malloc()ed and freed for every message"
    printf " (mpi_bench -t fresh), posix+cma, usec per message\n"
    for r in $(seq "$rounds"); do
        for s in "${sources[@]}"; do
            pass=()
            for v in ${envs[$s]}; do pass+=(-x "${v%%=*}"); done
            # shellcheck disable=SC2086
            env ${envs[$s]} LD_PRELOAD="$module" UCX_TLS=posix,cma,self \
                MALLOC_MMAP_THRESHOLD_=16384 OMPI_ALLOW_RUN_AS_ROOT=1 \
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                timeout 300 mpirun.openmpi --oversubscribe -np 2 \
                "${pass[@]}" \
                -x LD_PRELOAD -x UCX_TLS -x MALLOC_MMAP_THRESHOLD_ \
                --mca pml ucx --mca pml_ucx_tls any \
                --mca pml_ucx_devices any --mca btl self \
                "$prog" -t fresh -s 32768,1048576 -n 1000 -N 200 \
                > "$out/mpi_$s.$r.txt" 2>&1 ||
                echo "  $s, round $r: failed (see $out/mpi_$s.$r.txt)"
            awk -v s="$s" '$1 == "mpi_bench:" && $2 == "fresh" {
                               print s "," $3 "," $5 }' \
                "$out/mpi_$s.$r.txt" >> "$out/mpi.csv"
        done
    done
    python3 - "$out/mpi.csv" <<'PY'
import sys, statistics
v = {}
for line in open(sys.argv[1]):
    s, size, us = line.strip().split(",")
    v.setdefault((int(size), s), []).append(float(us))
for size in sorted({k[0] for k in v}):
    ucm = statistics.median(v.get((size, "ucm"), [0]))
    print(f"  {size:>8d} B")
    for s in ("ucm", "none", "uffd", "seccomp"):
        if (size, s) in v:
            m = statistics.median(v[(size, s)])
            runs = " ".join(f"{x:.0f}" for x in v[(size, s)])
            print(f"    {s:8s} {m:9.1f}  x{m / ucm:.2f} of ucm  (runs: {runs})"
                  if ucm else f"    {s:8s} {m:9.1f}")
PY
}

if [ "$perftest" = 1 ]; then
    if command -v ucx_perftest >/dev/null; then
        perftest_part
    else
        echo "no ucx_perftest: its part left out"
    fi
fi
if [ "$mpi" = 1 ]; then
    if command -v mpirun.openmpi >/dev/null; then
        mpi_part
    else
        echo "no mpirun.openmpi: the MPI part left out"
    fi
fi
