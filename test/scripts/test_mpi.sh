#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# MPI over remapring: test/apps/mpi_pingpong (ping-pong from 0 B to 4 MiB
# with every byte checked, a burst of nonblocking messages, an allreduce),
# and test/apps/mpi_held_blocks (held unexpected messages never stop the
# sender)
# built with mpicc.openmpi and run by Open MPI (pml ucx), and built with
# mpicc.mpich and run by MPICH (ch4:ucx, MPIR_CVAR_NOLOCAL=1 so that ranks
# on one host use UCX rather than MPICH's own shared memory), two ranks on
# this host, UCX_TLS=remapring,self, the module preloaded. Each rank's UCX
# endpoint (ep_cfg at UCX_LOG_LEVEL=info) must run over remapring. Then the
# same over mpi4py when /usr/bin/python3 has it (python3-mpi4py). An MPI
# that is missing or not built with UCX is skipped, with the reason.
# MPI_PINGPONG_ARGS (iterations, burst) overrides the defaults 20 64.
#
. "$(dirname "$0")/common.sh"

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
app=$REMAPRING_SRCDIR/test/apps/mpi_pingpong.c
# unexpected messages kept in place past what the pool holds (20000 x 2 KiB,
# each pinning a page, in a 64 MiB pool): the receiver must deliver to be
# copied before its senders would wait for credit only its later receives
# could give
held_app=$REMAPRING_SRCDIR/test/apps/mpi_held_blocks.c
held_pool=64m
held_args="20000 2048 60000"
ran=0
skipped=()

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=false    # never ssh: everything is local
export UCX_TLS=remapring,self UCX_LOG_LEVEL=info
export LD_PRELOAD=$REMAPRING_MODULE

# check_lanes NAME OUT: every rank's ep_cfg lines (in its own UCX log file,
# OUT.ucx.<pid>: ranks writing one stream may interleave their lines) name
# remapring and nothing but remapring or self
check_lanes() {
    local name=$1 out=$2 pids lanes
    pids=$(grep -l "ep_cfg\[.*remapring/memory" "$out".ucx.* 2>/dev/null |
           wc -l)
    lanes=$(cat "$out".ucx.* 2>/dev/null | grep "ep_cfg\[" |
            sed 's/.*INFO *//' | sort -u)
    echo "   lanes: $(echo $lanes)"
    [ "$pids" -ge 2 ] ||
        fail "$name: remapring carries the traffic of $pids rank(s), not 2"
    echo "$lanes" | sed 's/^[^:]*: *//' | grep -o "[a-z0-9_]*/[a-z0-9_:.]*" |
        grep -qv "^remapring/\|^self/" &&
        fail "$name: another transport took a lane: $lanes"
    return 0
}

# run_app NAME OUT CMD...: runs an MPI command, shows its output without the
# UCX log lines, checks its exit status, PASS line and lanes
run_app() {
    local name=$1 out=$2 start=$SECONDS rc
    shift 2
    note "$name"
    UCX_LOG_FILE=$out.ucx.%p timeout 90 "$@" > "$out" 2>&1
    rc=$?
    grep -v "UCX  INFO\|UCX  DIAG\|^\[.*\] *$" "$out" | sed 's/^/   /'
    echo "   ($((SECONDS - start)) s)"
    [ $rc -eq 124 ] && fail "$name timed out"
    [ $rc -eq 0 ] || fail "$name: exit status $rc"
    grep -q "^PASS" "$out" || fail "$name: no PASS line"
    check_lanes "$name" "$out"
    ran=$((ran + 1))
}

# Open MPI, pml ucx
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null
then
    if ! ompi_info 2>/dev/null | grep -q "MCA pml: ucx"; then
        skipped+=("Open MPI: no pml ucx")
    else
        LD_PRELOAD= mpicc.openmpi -O2 -o "$tmp/pp_ompi" "$app" ||
            fail "mpicc.openmpi"
        run_app "Open MPI, pml ucx" "$tmp/ompi.out" \
            mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 \
                -x LD_PRELOAD -x UCX_TLS -x UCX_LOG_LEVEL -x UCX_LOG_FILE \
                --mca pml ucx --mca pml_ucx_tls any \
                --mca pml_ucx_devices any --mca osc ucx \
                --mca btl self "$tmp/pp_ompi" ${MPI_PINGPONG_ARGS:-}
        LD_PRELOAD= mpicc.openmpi -O2 -o "$tmp/hb_ompi" "$held_app" ||
            fail "mpicc.openmpi"
        UCX_REMAPRING_POOL_MAX=$held_pool \
            run_app "Open MPI, held unexpected messages" "$tmp/ompi_hb.out" \
            mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 \
                -x LD_PRELOAD -x UCX_TLS -x UCX_LOG_LEVEL -x UCX_LOG_FILE \
                -x UCX_REMAPRING_POOL_MAX --mca pml ucx --mca pml_ucx_tls any \
                --mca pml_ucx_devices any --mca btl self \
                "$tmp/hb_ompi" $held_args
    fi
else
    skipped+=("Open MPI not installed")
fi

# MPICH, ch4:ucx
if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null
then
    dev=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Device: *//p' |
          tr -d '[:space:]')
    if [ "$dev" != "ch4:ucx" ]; then
        skipped+=("MPICH device is '$dev', not ch4:ucx")
    else
        LD_PRELOAD= mpicc.mpich -O2 -o "$tmp/pp_mpich" "$app" ||
            fail "mpicc.mpich"
        MPIR_CVAR_NOLOCAL=1 run_app "MPICH, ch4:ucx" "$tmp/mpich.out" \
            mpiexec.mpich -n 2 "$tmp/pp_mpich" ${MPI_PINGPONG_ARGS:-}
        LD_PRELOAD= mpicc.mpich -O2 -o "$tmp/hb_mpich" "$held_app" ||
            fail "mpicc.mpich"
        MPIR_CVAR_NOLOCAL=1 UCX_REMAPRING_POOL_MAX=$held_pool \
            run_app "MPICH, held unexpected messages" "$tmp/mpich_hb.out" \
            mpiexec.mpich -n 2 "$tmp/hb_mpich" $held_args
    fi
else
    skipped+=("MPICH not installed")
fi

# mpi4py (Debian's python3-mpi4py is built against Open MPI)
if /usr/bin/python3 -c "import mpi4py" 2>/dev/null; then
    cat > "$tmp/pp.py" <<'EOF'
from mpi4py import MPI
import sys
comm = MPI.COMM_WORLD
rank, peer = comm.Get_rank(), 1 - comm.Get_rank()
errors = 0
for size in (0, 8, 4096, 65536, 1 << 20, 4 << 20):
    for it in range(5):
        data = bytes((rank * 7 + size + it + i) & 0xff for i in range(min(size, 256))) * (size // 256 or 1)
        data = data[:size]
        want = bytes((peer * 7 + size + it + i) & 0xff for i in range(min(size, 256))) * (size // 256 or 1)
        want = want[:size]
        buf = bytearray(size)
        if rank == 0:
            comm.Send(data, dest=peer, tag=it)
            comm.Recv(buf, source=peer, tag=it)
        else:
            comm.Recv(buf, source=peer, tag=it)
            comm.Send(data, dest=peer, tag=it)
        errors += bytes(buf) != want
total = comm.allreduce(errors)
s = comm.allreduce(rank + 1)
if rank == 0:
    print("mpi4py: %d errors, allreduce %d" % (total, s))
    print("PASS" if total == 0 and s == 3 else "FAIL")
sys.exit(1 if total else 0)
EOF
    run_app "mpi4py over Open MPI" "$tmp/py.out" \
        mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 \
            -x LD_PRELOAD -x UCX_TLS -x UCX_LOG_LEVEL -x UCX_LOG_FILE \
            --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
            --mca btl self /usr/bin/python3 "$tmp/pp.py"
else
    skipped+=("mpi4py: /usr/bin/python3 has no mpi4py (python3-mpi4py)")
fi

for s in "${skipped[@]}"; do
    echo "== skipped: $s"
done
[ $ran -gt 0 ] || skip "no MPI to run: ${skipped[*]}"
echo "PASS"
