#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# MPI end to end over remapring: test/apps/mpi_e2e (ping-pong 0 B to 8 MiB,
# alltoallv with random sizes, a 2-D periodic halo exchange, an
# unexpected-message storm drained in reverse order with MPI_Probe and
# MPI_Iprobe, MPI_THREAD_MULTIPLE with two threads per rank; every byte
# checked) at 2, 4 and 8 ranks on this host (8 oversubscribes it), once
# built with mpicc.openmpi and run by Open MPI (pml ucx), once built with
# mpicc.mpich and run by MPICH (ch4:ucx, MPIR_CVAR_NOLOCAL=1 so that ranks
# on one host use UCX rather than MPICH's shared memory); UCX_TLS=
# remapring,self, the module preloaded, on each wire (UCX_REMAPRING_WIRE shm,
# then cma). One launch runs all the sub-tests, bounded by a timeout. Every
# rank must show that remapring carried its traffic: its own UCX log
# (UCX_LOG_LEVEL=info, one file per pid) has endpoint lanes (ep_cfg) over
# remapring and over nothing but remapring or self, names the wire, and
# does not say it fell back to cma; and the rank mapped the remapring
# control area of every other rank (the receiver's, which a sender maps to
# reach it). An MPI that is missing or
# not built with UCX is skipped, with the reason; so is the thread part
# where the MPI does not grant MPI_THREAD_MULTIPLE. All runs go on after a
# failure; a table of results and times ends the output.
#
# usage: test_mpi_e2e.sh    (run by ctest; REMAPRING_MODULE must be set)
#   MPI_E2E_RANKS    rank counts to run (default "2 4 8")
#   MPI_E2E_WIRES    remapring wires to run on (default "shm cma")
#   MPI_E2E_ARGS     mpi_e2e options (default "-i 6 -r 24 -n 600 -t 12");
#                    -s SEED repeats the random sizes of an earlier run
#   MPI_E2E_TIMEOUT  seconds one launch may take (default 60 + 15 per rank)
#   MPI_E2E_KEEP     a directory to keep every run's output and UCX logs in
#   MPI_E2E_NOTIFIER_RANKS  ranks of the one more launch per MPI, wire shm,
#                    with UCX_REMAPRING_NOTIFIER=seccomp and UCM's hooks
#                    off, every rank's log saying the source started
#                    (default 4; empty leaves it out)
#
. "$(dirname "$0")/common.sh"
set -euo pipefail

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
app=$REMAPRING_SRCDIR/test/apps/mpi_e2e.c
ranks=${MPI_E2E_RANKS:-2 4 8}
wires=${MPI_E2E_WIRES:-shm cma}
args=${MPI_E2E_ARGS:--i 6 -r 24 -n 600 -t 12}
ctl=memfd:remapring-ctl-
# one more launch per MPI with the seccomp notifier and UCM's hooks off
notifier_ranks=${MPI_E2E_NOTIFIER_RANKS-4}
# the lines of mpi_e2e's output shown (ranks' error reports among them)
shown='^mpi_e2e: |^   |^[a-z]+: |^PASS$|^FAIL$|^rank [0-9]+: '
skipped=()
failed=()
table=()

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=false    # never ssh: everything is local
export UCX_TLS=remapring,self UCX_LOG_LEVEL=info
export LD_PRELOAD=$REMAPRING_MODULE

# check_ranks NAME OUT NP WIRE: every rank of the run (the "rank R pid P"
# lines of its output) has a UCX log OUT.ucx.P whose ep_cfg lanes are
# remapring and nothing but remapring or self, that names the wire and has
# no fallback to cma, and mapped the control area of every other rank;
# prints what is wrong and returns 1 if anything is
check_ranks() {
    local name=$1 out=$2 np=$3 wire=$4 pids r p q lanes bad=0 maps miss
    pids=($(sed -n 's/^rank \([0-9]*\) pid \([0-9]*\)$/\2/p' "$out"))
    if [ ${#pids[@]} -ne "$np" ]; then
        echo "   $name: ${#pids[@]} ranks said their pid, not $np"
        return 1
    fi
    for r in "${!pids[@]}"; do
        p=${pids[$r]}
        if ! grep -q "ep_cfg\[.*remapring/memory" "$out.ucx.$p" 2>/dev/null
        then
            echo "   $name: rank $r (pid $p) has no endpoint over remapring"
            bad=1
        fi
        if ! grep -q "UCX_REMAPRING_WIRE=$wire\b" "$out.ucx.$p" 2>/dev/null
        then
            echo "   $name: rank $r (pid $p) does not run the $wire wire"
            bad=1
        elif [ "$wire" = shm ] &&
             grep -q "using the cma wire" "$out.ucx.$p"; then
            echo "   $name: rank $r (pid $p) fell back to the cma wire:" \
                 "$(grep -m1 "using the cma wire" "$out.ucx.$p")"
            bad=1
        fi
        if [ -n "${E2E_EXPECT_LOG:-}" ] &&
           ! grep -q "$E2E_EXPECT_LOG" "$out.ucx.$p" 2>/dev/null; then
            echo "   $name: rank $r (pid $p) did not log '$E2E_EXPECT_LOG'"
            bad=1
        fi
        maps=" $(sed -n "s/^rank $r maps $ctl: *//p" "$out") "
        miss=()
        for q in "${pids[@]}"; do
            [ "$q" = "$p" ] || [[ $maps == *" $q "* ]] || miss+=("$q")
        done
        if [ ${#miss[@]} -gt 0 ]; then
            echo "   $name: rank $r (pid $p) did not map the remapring" \
                 "control area of pid(s) ${miss[*]}"
            bad=1
        fi
    done
    lanes=$(for p in "${pids[@]}"; do cat "$out.ucx.$p" 2>/dev/null; done |
            { grep "ep_cfg\[" || true; } | sed 's/.*INFO *//' | sort -u)
    echo "   lanes: $(echo $lanes)"
    if echo "$lanes" | sed 's/^[^:]*: *//' |
       grep -o "[a-z0-9_]*/[a-z0-9_:.]*" | grep -qv "^remapring/\|^self/"
    then
        echo "   $name: another transport took a lane"
        bad=1
    fi
    return $bad
}

# run_e2e NAME NP CMD...: runs one launch of mpi_e2e under a timeout (with
# UCX_REMAPRING_WIRE set by the caller), shows
# its output without MPI's own noise, checks its exit status, its PASS line
# and every rank's lanes; a failure is recorded and shown with the ranks'
# error lines and UCX errors, and the next run goes on
run_e2e() {
    local name=$1 np=$2 out=$tmp/run.$RANDOM start=$SECONDS rc=0 why=""
    local limit=${MPI_E2E_TIMEOUT:-$((60 + 15 * np))} p
    shift 2
    note "$name, $np ranks"
    UCX_LOG_FILE=$out.ucx.%p timeout -k 10 "$limit" "$@" > "$out" 2>&1 ||
        rc=$?
    { grep -E "$shown" "$out" || true; } | sed 's/^/   /'
    local took=$((SECONDS - start))
    echo "   ($took s)"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        why="timed out after $limit s, in sub-test $(sed -n \
             's/^\([a-z]*\): start$/\1/p' "$out" | tail -1)"
        # ranks the launcher left behind: ours, by the pids they printed
        for p in $(sed -n 's/^rank [0-9]* pid \([0-9]*\)$/\1/p' "$out"); do
            kill -9 "$p" 2>/dev/null || true
        done
    elif [ $rc -ne 0 ]; then
        why="exit status $rc"
    elif ! grep -q "^PASS$" "$out"; then
        why="no PASS line"
    elif ! grep -q "^mpi_e2e: $np ranks," "$out"; then
        why="not $np ranks"
    fi
    if [ -z "$why" ] &&
       ! check_ranks "$name, $np ranks" "$out" "$np" "$UCX_REMAPRING_WIRE"
    then
        why="remapring did not carry every rank's traffic"
    fi
    if grep -q "^threads: SKIP" "$out"; then
        skipped+=("$name: $(sed -n 's/^threads: SKIP: //p' "$out" |
                            head -1); threads not run")
    fi
    if [ -n "${MPI_E2E_KEEP:-}" ]; then
        mkdir -p "$MPI_E2E_KEEP"
        cp "$out"* "$MPI_E2E_KEEP/" 2>/dev/null || true
    fi
    if [ -n "$why" ]; then
        echo "   FAIL: $why"
        { grep -Ev "$shown|^rank [0-9]+ (pid|maps) " "$out" || true; } |
            head -30 | sed 's/^/   | /'
        { cat "$out".ucx.* 2>/dev/null | grep "UCX  ERROR\|UCX  WARN" ||
            true; } | head -20 | sed 's/^/   | /'
        failed+=("$name, $np ranks: $why")
        table+=("$(printf '%-24s %2d ranks  %-4s %4d s' "$name" "$np" \
                   FAIL "$took")")
    else
        table+=("$(printf '%-24s %2d ranks  %-4s %4d s' "$name" "$np" \
                   ok "$took")")
    fi
    return 0
}

# Open MPI, pml ucx
if ! command -v mpicc.openmpi >/dev/null ||
   ! command -v mpirun.openmpi >/dev/null; then
    skipped+=("Open MPI not installed (openmpi-bin, libopenmpi-dev)")
elif ! ompi_info 2>/dev/null | grep -c "MCA pml: ucx" >/dev/null; then
    skipped+=("Open MPI has no pml ucx")
else
    LD_PRELOAD= mpicc.openmpi -O2 -g -Wall -pthread -o "$tmp/e2e_ompi" \
        "$app" || fail "mpicc.openmpi"
    for wire in $wires; do
        for np in $ranks; do
            UCX_REMAPRING_WIRE=$wire run_e2e "Open MPI pml ucx, $wire" "$np" \
                mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
                    -x LD_PRELOAD -x UCX_TLS -x UCX_LOG_LEVEL \
                    -x UCX_LOG_FILE -x UCX_REMAPRING_WIRE \
                    --mca pml ucx --mca pml_ucx_tls any \
                    --mca pml_ucx_devices any --mca btl self \
                    "$tmp/e2e_ompi" -p "$ctl" $args
        done
    done
    # UCM's hooks off, the seccomp notifier feeding UCX's caches; the
    # launcher has the same environment and gets no filter (it uses no
    # cache), every rank starts its own
    if [ -n "$notifier_ranks" ]; then
        UCX_REMAPRING_NOTIFIER=seccomp UCX_MEM_MALLOC_HOOKS=n \
            UCX_MEM_MMAP_HOOK_MODE=none UCX_REMAPRING_WIRE=shm \
            E2E_EXPECT_LOG="seccomp source started" \
            run_e2e "Open MPI, seccomp, no hooks" "$notifier_ranks" \
            mpirun.openmpi --allow-run-as-root --oversubscribe \
                -np "$notifier_ranks" -x LD_PRELOAD -x UCX_TLS \
                -x UCX_LOG_LEVEL -x UCX_LOG_FILE -x UCX_REMAPRING_WIRE \
                -x UCX_REMAPRING_NOTIFIER -x UCX_MEM_MALLOC_HOOKS \
                -x UCX_MEM_MMAP_HOOK_MODE \
                --mca pml ucx --mca pml_ucx_tls any \
                --mca pml_ucx_devices any --mca btl self \
                "$tmp/e2e_ompi" -p "$ctl" $args
    fi
fi

# MPICH, ch4:ucx
if ! command -v mpicc.mpich >/dev/null ||
   ! command -v mpiexec.mpich >/dev/null; then
    skipped+=("MPICH not installed (mpich, libmpich-dev)")
else
    dev=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Device: *//p' |
          tr -d '[:space:]')
    if [ "$dev" != "ch4:ucx" ]; then
        skipped+=("MPICH device is '$dev', not ch4:ucx")
    else
        LD_PRELOAD= mpicc.mpich -O2 -g -Wall -pthread -o "$tmp/e2e_mpich" \
            "$app" || fail "mpicc.mpich"
        for wire in $wires; do
            for np in $ranks; do
                UCX_REMAPRING_WIRE=$wire MPIR_CVAR_NOLOCAL=1 \
                    run_e2e "MPICH ch4:ucx, $wire" "$np" \
                    mpiexec.mpich -n "$np" "$tmp/e2e_mpich" -p "$ctl" $args
            done
        done
        if [ -n "$notifier_ranks" ]; then
            UCX_REMAPRING_NOTIFIER=seccomp UCX_MEM_MALLOC_HOOKS=n \
                UCX_MEM_MMAP_HOOK_MODE=none UCX_REMAPRING_WIRE=shm \
                MPIR_CVAR_NOLOCAL=1 \
                E2E_EXPECT_LOG="seccomp source started" \
                run_e2e "MPICH, seccomp, no hooks" "$notifier_ranks" \
                mpiexec.mpich -n "$notifier_ranks" "$tmp/e2e_mpich" \
                    -p "$ctl" $args
        fi
    fi
fi

note "summary"
for t in "${table[@]}"; do
    echo "   $t"
done
for s in "${skipped[@]}"; do
    echo "== skipped: $s"
done
[ ${#table[@]} -gt 0 ] || skip "no MPI to run: ${skipped[*]}"
if [ ${#failed[@]} -gt 0 ]; then
    for f in "${failed[@]}"; do
        echo "FAIL: $f" >&2
    done
    exit 1
fi
echo "PASS"
