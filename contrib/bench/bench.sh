#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# One benchmark command: ucx_perftest (UCT and UCP, through
# perftest_compare.sh), MPI under Open MPI and MPICH (test/apps/mpi_bench.c),
# mpi4py and the UCP unexpected-message storm (storm.sh), each over
# remapring (every wire) and over posix(+cma); one table with the ratios, a
# CSV and PNG plots (bench_report.py). A benchmark, not a test: it prints
# figures and asserts nothing.
#
set -euo pipefail

usage() {
    cat <<EOF
usage: contrib/bench/bench.sh [--full] [options]
  (no option)  the short run, about three minutes on a 2-core machine: sizes
               8 B, 4 KiB, 64 KiB, 1 MiB, 2 runs, fewer iterations; the
               storm at 256 B, 4 KiB, 16 KiB, 16 MiB held
  --full       sizes 8 B, 64 B, 1 KiB, 4 KiB, 64 KiB, 1 MiB, 4 MiB, 3 runs,
               the default iterations; the storm at 64 B to 64 KiB,
               32 MiB held; and the large-message part (some thirty
               minutes, the storm's 64 B runs the longest part: 524288
               messages each; the large part about seven, MPI five of them)
  -o DIR       where the results go (default BUILD_DIR/bench, BUILD_DIR
               being build/ of the source tree): raw.csv (every run),
               bench.csv (medians and ratios), latency.png, bandwidth.png,
               ratio.png, summary.png, bench.txt (the table)
  -m PATH      the module; without it (and without \$REMAPRING_MODULE) the
               tree is built first with contrib/build.sh, which installs
               what is missing (as root, on Debian 12)
  -w LIST      remapring wires (default shm,cma)
  -s LIST      sizes in bytes, comma separated
  -r N         runs; each figure is the median of the runs
  -n N, -N N   iterations below 64 KiB / from 64 KiB on (ucx_perftest; MPI
               takes half of them)
  -p LIST      parts (default perftest,mpi,mpi4py,storm; with --full,
               large too)
  -L LIST      the large part's sizes in bytes (default 128 KiB, 1, 4, 16
               and 64 MiB); its iterations are what moves about 2 GiB a
               run (100 to 20000), or -N if given
  -t LIST      ucx_perftest tests (perftest_compare.sh -t; default all)
  -S LIST      storm message sizes in bytes (storm.sh -s)
  -P BYTES     storm payload held at each size (storm.sh -P; k, m, g)
  -h           this help

Transports, two processes on this host each time, in turn in each run:
  remapring-WIRE  the module preloaded, UCX_TLS=remapring,self,
                  UCX_REMAPRING_WIRE=WIRE
  posix+cma       no module, UCX_TLS=posix,cma,self (UCT: posix for active
                  messages, cma for put and get)
Parts:
  perftest  contrib/bench/perftest_compare.sh -i: UCT am_lat, am_bw
            short, bcopy and zcopy, put_bw, get; UCP tag_lat, tag_bw,
            ucp_am_bw, stream_bw (its -h says which sizes each test takes),
            each test by itself, the transports in turn, so that the two
            sides of a ratio are measured seconds apart
  mpi       test/apps/mpi_bench.c, built with mpicc.openmpi and mpicc.mpich:
            latency, bandwidth, bidirectional bandwidth, message rate (up to
            4 KiB), allreduce; under Open MPI (mpirun.openmpi --mca pml ucx
            --mca pml_ucx_tls any --mca pml_ucx_devices any) and MPICH
            (mpiexec.mpich, ch4:ucx, MPIR_CVAR_NOLOCAL=1 so that local ranks
            use UCX)
  mpi4py    python3 -m mpi4py.bench ringtest between two ranks (a ping-pong;
            Debian 12's mpi4py 3.1.4 has no pingpong command) under Open
            MPI, one-way latency; 8 B in the short run
  storm     contrib/bench/storm.sh (test/apps/ucp_storm.c): N tag messages
            of S bytes sent before any receive is posted, UCP keeping them
            all; rows "UCP storm held RSS" (the receiver's RssAnon + RssFile
            + RssShmem, peak - before, per payload byte), "UCP storm held
            pool" (remapring: what its pool memfd holds, per payload byte)
            and "UCP storm drain" (MB/s from the first receive posted to
            the last complete); storm.txt and storm.csv have every column
  large     UCP tag_bw, ucp_am_bw, stream_bw and tag_lat at the -L sizes
            (perftest_compare.sh -i, as the perftest part), and one core's
            memcpy() of each size measured in the same run
            (contrib/bench/memcpy_bw.c); its own table, large.txt (and
            large.csv, large-raw.csv): each figure, its ratio to posix+cma
            and its share of memcpy's bandwidth; below it, plain copies
            (plain.csv, memcpy_bw -c): what two processes move at
            each size with nothing of a transport around one
            process_vm_readv a message (1copy-cma) or around copies in and
            out of four shared 256 KiB slots (2copy-shm), and their share
            of memcpy's: what each way of moving the bytes gets here by
            itself, busy-polling as the transports do, so a run in which
            the scheduler parts the two processes can measure them below
            a transport. Both transports' buffers come from malloc()
            (UCX_ALLOC_PRIO=heap) and are written once (MALLOC_PERTURB_),
            as an application's: ucx_perftest never writes them, and an
            untouched buffer reads the zero page at every address, several
            times slower than memory on some CPUs (a 16 MiB copy 4.7
            against 36 GB/s on the test machine, an AMD EPYC; both
            transports alike). By default ucx_perftest allocates them
            through UCP, which takes posix's shared memory (small pages)
            for posix+cma and transparent huge pages for remapring, a
            difference of 2-3x from 4 MiB on that is the allocation's, not
            the transport's. Then
            test/apps/mpi_bench.c at the same sizes under each MPI: bw,
            bibw and allreduce between two ranks, and mbw, the bandwidth of
            two pairs at once (four ranks, rank i sending to i + 2, as
            osu_mbw_mr; on a 2-core machine two ranks share a core, alike
            for both transports); bibw and mbw are totals, so their share
            of one core's memcpy can pass 1
An MPI that is missing or not built with UCX is left out, with the reason.
Metrics: lat = one-way latency (usec), bw = bandwidth (MB/s, 2^20 bytes),
rate = messages/s, held = bytes held per payload byte. Ratios are
remapring / posix+cma: for lat and held below 1 means remapring is ahead,
for bw and rate above 1 ("+" in the table). Run it alone on the machine
(e.g. under flock -x): the processes busy-poll. The footer gives the round
trip of a cache line between the first two cpus (contrib/bench/c2c.c) at
the start and the end of the run: the small-size ratios depend on it, and
on a VM it can change from one run to the next (README, Benchmarks).
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$top/build}

full=no
out=
module=${REMAPRING_MODULE:-}
wires=shm,cma
sizes= reps= small= large= large_iters=
parts=
large_sizes=131072,1048576,4194304,16777216,67108864
tests=
storm_sizes= storm_payload=
while [ $# -gt 0 ]; do
    case $1 in
    --full) full=yes ;;
    -o) out=$2; shift ;;
    -m) module=$2; shift ;;
    -w) wires=$2; shift ;;
    -s) sizes=$2; shift ;;
    -r) reps=$2; shift ;;
    -n) small=$2; shift ;;
    -N) large=$2; large_iters=$2; shift ;;
    -L) large_sizes=$2; shift ;;
    -p) parts=$2; shift ;;
    -t) tests=$2; shift ;;
    -S) storm_sizes=$2; shift ;;
    -P) storm_payload=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
if [ $full = yes ]; then
    : "${sizes:=8,64,1024,4096,65536,1048576,4194304}" "${reps:=3}"
    : "${small:=200000}" "${large:=2000}"
    : "${storm_sizes:=64,256,1024,4096,16384,65536}" "${storm_payload:=32m}"
    py_sizes=8,65536,1048576
    : "${parts:=perftest,mpi,mpi4py,storm,large}"
else
    : "${sizes:=8,4096,65536,1048576}" "${reps:=2}"
    : "${small:=50000}" "${large:=1000}"
    : "${storm_sizes:=256,4096,16384}" "${storm_payload:=16m}"
    py_sizes=8
    : "${parts:=perftest,mpi,mpi4py,storm}"
fi
for n in "$small" "$large" "$reps"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] ||
        { echo "-n, -N, -r: a positive number, not '$n'" >&2; exit 2; }
done
[[ ,$parts, =~ ^(,(perftest|mpi|mpi4py|storm|large))+,$ ]] ||
    { echo "-p: perftest, mpi, mpi4py, storm and/or large, not '$parts'" >&2
      exit 2; }
[[ $large_sizes =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    { echo "-L: sizes in bytes, comma separated, not '$large_sizes'" >&2
      exit 2; }

if [ -z "$module" ]; then
    "$top/contrib/build.sh"
    module=$build/.libs/libuct_remapring.so
fi
[ -f "$module" ] || { echo "no module at $module" >&2; exit 2; }
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
export REMAPRING_MODULE=$module
# plots: Debian's matplotlib for Debian's python (contrib/setup.sh has it)
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null &&
   [ "$(id -u)" = 0 ]; then
    "$top/contrib/setup.sh"
fi

out=${out:-$build/bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
raw=$out/raw.csv
rm -f "$raw" "$out"/*.png "$out/bench.csv" "$out/bench.txt"
echo "bench,size,metric,transport,run,value" > "$raw"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
IFS=, read -r -a wire_list <<< "$wires"
transports=()
for w in "${wire_list[@]}"; do
    transports+=("remapring-$w")
done
transports+=(posix+cma)
skipped=()
start=$SECONDS

progress() {
    printf "bench: %s, %d s\n" "$*" $((SECONDS - start)) >&2
}

# c2c_measure: the round trip of a cache line between the first two cpus
# (contrib/bench/c2c.c, built here), e.g. "460 ns"; "not measured" without
# a compiler or a second cpu
c2c_measure() {
    local line
    if [ ! -x "$tmp/c2c" ] &&
       ! cc -O2 -pthread "$here/c2c.c" -o "$tmp/c2c" 2>/dev/null; then
        echo "not measured"
        return
    fi
    line=$("$tmp/c2c" 2>/dev/null) || { echo "not measured"; return; }
    echo "${line##* round trip }"
}
c2c_start=$(c2c_measure)

# with_transport TRANSPORT CMD...: runs CMD in the transport's environment
with_transport() {
    local tr=$1
    shift
    if [[ $tr == remapring-* ]]; then
        LD_PRELOAD=$module UCX_TLS=remapring,self \
            UCX_REMAPRING_WIRE=${tr#remapring-} "$@"
    else
        LD_PRELOAD= UCX_TLS=posix,cma,self "$@"
    fi
}

# --- ucx_perftest -------------------------------------------------------------
if [[ ,$parts, == *,perftest,* ]]; then
    progress "ucx_perftest, $reps runs over ${transports[*]}"
    "$here/perftest_compare.sh" -i -m "$module" -s "$sizes" -n "$small" \
        -N "$large" -r "$reps" -w "$wires" ${tests:+-t "$tests"} -o "$raw"
fi

# --- MPI ----------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=false    # never ssh: everything is local
mpis=()
if [[ ,$parts, =~ ,(mpi|mpi4py|large), ]]; then
    if ! command -v mpicc.openmpi >/dev/null ||
       ! command -v mpirun.openmpi >/dev/null; then
        skipped+=("Open MPI: not installed")
    elif ! ompi_info 2>/dev/null | grep -q "MCA pml: ucx"; then
        skipped+=("Open MPI: no pml ucx")
    else
        mpis+=(ompi)
    fi
fi
if [[ ,$parts, =~ ,(mpi|large), ]]; then
    if ! command -v mpicc.mpich >/dev/null ||
       ! command -v mpiexec.mpich >/dev/null; then
        skipped+=("MPICH: not installed")
    elif [ "$(mpichversion 2>/dev/null | sed -n 's/^MPICH Device: *//p' |
              tr -d '[:space:]')" != "ch4:ucx" ]; then
        skipped+=("MPICH: its device is not ch4:ucx")
    else
        mpis+=(mpich)
    fi
fi

# mpi_launch MPI TRANSPORT OUT CMD...: NP ranks of CMD under the MPI (NP
# from the environment, 2 without it)
mpi_launch() {
    local mpi=$1 tr=$2 o=$3 np=${NP:-2}
    shift 3
    if [ "$mpi" = ompi ]; then
        with_transport "$tr" timeout 180 mpirun.openmpi --allow-run-as-root \
            --oversubscribe -np "$np" -x LD_PRELOAD -x UCX_TLS \
            -x UCX_REMAPRING_WIRE --mca pml ucx --mca pml_ucx_tls any \
            --mca pml_ucx_devices any --mca btl self "$@" > "$o" 2>&1
    else
        MPIR_CVAR_NOLOCAL=1 with_transport "$tr" timeout 180 \
            mpiexec.mpich -n "$np" "$@" > "$o" 2>&1
    fi
}

# mpi_build: test/apps/mpi_bench.c, once, with each MPI's compiler
mpi_build() {
    local mpi
    for mpi in "${mpis[@]}"; do
        [ -x "$tmp/mpi_bench.$mpi" ] && continue
        LD_PRELOAD= mpicc.$( [ $mpi = ompi ] && echo openmpi || echo mpich) \
            -O2 -o "$tmp/mpi_bench.$mpi" "$top/test/apps/mpi_bench.c"
    done
}

mpi_name() { if [ "$1" = ompi ]; then echo "Open MPI"; else echo MPICH; fi; }

# mpi_row MPI TRANSPORT RUN OUT TEST SIZE METRIC: the CSV row of
# mpi_bench's "mpi_bench: TEST SIZE METRIC VALUE" line in OUT; the value
# "fail" where a failed run did not print it
mpi_row() {
    local v
    v=$(awk -v t="$5" -v s="$6" -v m="$7" \
        '$1 == "mpi_bench:" && $2 == t && $3 == s && $4 == m { print $5 }' \
        "$4")
    echo "$(mpi_name "$1") $5,$6,$7,$2,$3,${v:-fail}"
}

if [[ ,$parts, == *,mpi,* ]]; then
    mpi_build
    for ((r = 1; r <= reps; r++)); do
        for mpi in "${mpis[@]}"; do
            for tr in "${transports[@]}"; do
                progress "MPI run $r/$reps, $(mpi_name $mpi), $tr"
                o=$tmp/mpi.out
                mpi_launch "$mpi" "$tr" "$o" "$tmp/mpi_bench.$mpi" \
                    -s "$sizes" -n $(((small + 1) / 2)) \
                    -N $(((large + 1) / 2)) ||
                    { echo "bench: $(mpi_name $mpi) over $tr failed:" >&2
                      tail -5 "$o" >&2; }
                for s in ${sizes//,/ }; do
                    for tm in lat:lat bw:bw bw:rate bibw:bw allreduce:lat; do
                        [ "${tm#*:}" != rate ] || [ "$s" -le 4096 ] ||
                            continue
                        mpi_row "$mpi" "$tr" "$r" "$o" "${tm%:*}" "$s" \
                            "${tm#*:}"
                    done
                done >> "$raw"
            done
        done
    done
fi

# --- mpi4py -------------------------------------------------------------------
if [[ ,$parts, == *,mpi4py,* ]]; then
    if [[ " ${mpis[*]} " != *" ompi "* ]]; then
        skipped+=("mpi4py: no Open MPI with pml ucx to run it")
    elif ! /usr/bin/python3 -c "import mpi4py.bench" 2>/dev/null; then
        skipped+=("mpi4py: /usr/bin/python3 has no mpi4py (python3-mpi4py)")
    else
        for ((r = 1; r <= reps; r++)); do
            for tr in "${transports[@]}"; do
                for s in ${py_sizes//,/ }; do
                    progress "mpi4py run $r/$reps, $tr, $s B"
                    loops=$([ "$s" -ge 65536 ] && echo $((large / 2 + 1)) ||
                            echo $((small / 5 + 1)))
                    o=$tmp/py.out
                    mpi_launch ompi "$tr" "$o" /usr/bin/python3 -m \
                        mpi4py.bench ringtest -n "$s" -l "$loops" \
                        -s $((loops / 10 + 1)) || true
                    # "time for L loops = T seconds (2 processes, N bytes)":
                    # a loop is a round trip
                    v=$(awk '/^time for/ { printf "%.3f", $6 * 1e6 / $3 / 2 }' \
                        "$o")
                    echo "mpi4py ringtest,$s,lat,$tr,$r,${v:-fail}" >> "$raw"
                done
            done
        done
    fi
fi

# --- the unexpected-message storm ----------------------------------------------
missing=()
if [[ ,$parts, == *,storm,* ]]; then
    progress "UCP storm, $reps runs over ${transports[*]}"
    "$here/storm.sh" -m "$module" -s "$storm_sizes" -P "$storm_payload" \
        -r "$reps" -w "$wires" -o "$out" -R "$raw" > /dev/null ||
        skipped+=("UCP storm: a run failed (storm.sh's messages above)")
else
    missing+=(--missing "UCP unexpected storm:left out of this run (-p)")
fi

# --- large messages ------------------------------------------------------------
large_raw=$out/large-raw.csv
plain_raw=$out/plain-raw.csv
rm -f "$large_raw" "$plain_raw" "$out/large.csv" "$out/large.txt" \
      "$out/plain.csv"
if [[ ,$parts, == *,large,* ]]; then
    echo "bench,size,metric,transport,run,value" > "$large_raw"
    echo "bench,size,metric,transport,run,value" > "$plain_raw"
    cc -O2 "$here/memcpy_bw.c" -o "$tmp/memcpy_bw" ||
        { echo "bench: cannot build memcpy_bw.c" >&2; exit 1; }
    for s in ${large_sizes//,/ }; do
        # about 2 GiB a run: enough copies at 128 KiB, a second at 64 MiB
        n=${large_iters:-$(( (2 << 30) / s ))}
        [ -n "$large_iters" ] || n=$(( n < 100 ? 100 : n > 20000 ? 20000 : n ))
        progress "large messages, $s B, $reps runs, $n iterations"
        # malloc()ed buffers, written once as an application's are
        # (MALLOC_PERTURB_: glibc fills what malloc returns): ucx_perftest
        # never writes them, and an untouched buffer reads the one zero
        # page at each of its addresses, which some CPUs copy several times
        # slower than memory (docs/performance.md)
        UCX_ALLOC_PRIO=heap MALLOC_PERTURB_=165 \
            "$here/perftest_compare.sh" -i -q -m "$module" -s "$s" -N "$n" \
            -r "$reps" -w "$wires" \
            -t ucp_tag_bw,ucp_am_bw,ucp_stream_bw,ucp_tag_lat \
            -o "$large_raw" > /dev/null
        for ((r = 1; r <= reps; r++)); do
            "$tmp/memcpy_bw" "$s" "$r" | tee -a "$plain_raw" >> "$large_raw"
            "$tmp/memcpy_bw" -c "$s" "$r" >> "$plain_raw" ||
                echo "bench: the plain copies at $s B failed" >&2
        done
    done
    # MPI at the same sizes: bw, bibw and allreduce between two ranks, and
    # the multi-pair bandwidth of two pairs (four ranks: on a 2-core
    # machine two to a core, each transport alike), a launch per size
    mpi_build
    for s in ${large_sizes//,/ }; do
        # about 1 GiB a run from rank 0 (mpi_bench: iterations are
        # messages, round trips and allreduce calls)
        n=${large_iters:-$(( (1 << 30) / s ))}
        [ -n "$large_iters" ] || n=$(( n < 20 ? 20 : n > 4000 ? 4000 : n ))
        # the bandwidths from 64 messages at least: at 64 MiB mpi_bench's
        # window is two messages, and 20 of them (ten windows) gave MPICH's
        # bw 3.9-6.4 GB/s in runs where 64 gave 10.8-13.6
        nbw=${large_iters:-$(( n < 64 ? 64 : n ))}
        for ((r = 1; r <= reps; r++)); do
            for mpi in "${mpis[@]}"; do
                for tr in "${transports[@]}"; do
                    progress "large messages, $s B, MPI run $r/$reps," \
                             "$(mpi_name $mpi), $tr"
                    # ranks:tests:iterations:output
                    for l in 2:bw,bibw:$nbw:bw 2:allreduce:$n:ar \
                             4:mbw:$nbw:mbw; do
                        IFS=: read -r np t i o <<< "$l"
                        o=$tmp/mpi-large.$o.out
                        NP=$np mpi_launch "$mpi" "$tr" "$o" \
                            "$tmp/mpi_bench.$mpi" -s "$s" -N "$i" -t "$t" ||
                            { echo "bench: $(mpi_name $mpi) over $tr," \
                                   "$np ranks, $t, $s B failed:" >&2
                              tail -5 "$o" >&2; }
                    done
                    {
                        # test:metric:output
                        for l in bw:bw:bw bibw:bw:bw allreduce:lat:ar \
                                 mbw:bw:mbw; do
                            IFS=: read -r t m o <<< "$l"
                            mpi_row "$mpi" "$tr" "$r" \
                                "$tmp/mpi-large.$o.out" "$t" "$s" "$m"
                        done
                    } >> "$large_raw"
                done
            done
        done
    done
fi

# --- the table, the CSV, the plots ---------------------------------------------
c2c_end=$(c2c_measure)
elapsed=$((SECONDS - start))
mode=$([ $full = yes ] && echo "--full" || echo "short run")
machine="$(. /etc/os-release && echo "$PRETTY_NAME"), $(nproc) cores,"
machine+=" Linux $(uname -r), UCX $("$top/config/ucx-version.sh")"
{
    # no table without a figure (-p large alone)
    [ "$(wc -l < "$raw")" -le 1 ] ||
        /usr/bin/python3 "$here/bench_report.py" "$raw" \
            --csv "$out/bench.csv" --plots "$out" \
            --summary "$out/summary.png" --title "$machine; $mode" \
            ${missing[@]+"${missing[@]}"}
    for s in ${skipped[@]+"${skipped[@]}"}; do
        echo "left out: $s"
    done
    echo
    echo "$machine"
    echo "$mode: sizes $sizes, median of $reps runs, iterations $small" \
         "(< 64 KiB) / $large; $elapsed s"
    # the small-size ratios depend on it (README, Benchmarks)
    echo "cache line round trip between the first two cpus (c2c):" \
         "$c2c_start at the start, $c2c_end at the end"
    [[ ,$parts, != *,storm,* ]] ||
        echo "storm: sizes $storm_sizes, $storm_payload held at each," \
             "the table in $out/storm.txt"
} | tee "$out/bench.txt"
if [ -f "$large_raw" ]; then
    {
        echo
        echo "large messages (memcpy: one core's, the same size, this run):"
        /usr/bin/python3 "$here/bench_report.py" "$large_raw" \
            --csv "$out/large.csv" --share-of memcpy
        echo
        echo "plain copies: what two processes of this machine move with" \
             "no transport around the copies (memcpy_bw -c; 1copy-cma: one" \
             "process_vm_readv a message, 2copy-shm: copied in and out of" \
             "4 shared 256 KiB slots on two cores)"
        /usr/bin/python3 "$here/bench_report.py" "$plain_raw" \
            --csv "$out/plain.csv" --share-of memcpy
    } | tee "$out/large.txt"
fi
echo "results in $out (raw.csv, bench.csv, *.png, storm.txt, storm.csv$(
    [ -f "$large_raw" ] && echo ", large.txt, large.csv, plain.csv"))"
