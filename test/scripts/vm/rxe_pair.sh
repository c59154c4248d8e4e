#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Job for a pair of test bed guests (contrib/vm/run.sh -2), run by
# test_vm_rxe.sh: verbs traffic between two hosts on the virtual wire,
# ibv_rc_pingpong and ib_write_bw (RC RDMA WRITE) with a as the server and
# b as the client; then, from a, each MPI program given, two ranks, one on
# each guest, launched without ssh, over UCX_TLS=tcp,self.
#
# usage: rxe_pair.sh [mpich:PROGRAM] [ompi:PROGRAM]...
#
. /vm/lib.sh

errors=0
bad() { echo "   BAD: $1"; errors=$((errors + 1)); }

vm_note "guest $VM_ROLE ($VM_IP), peer $VM_PEER, $VM_KERNEL"
vm_pair rc_pingpong 18515 ibv_rc_pingpong -d rxe0 -g "$VM_GID_INDEX" \
    -n 100 -p 18515 || bad "ibv_rc_pingpong between the guests"
vm_pair write_bw 18520 ib_write_bw -d rxe0 -x "$VM_GID_INDEX" -s 65536 \
    -n 200 -p 18520 || bad "ib_write_bw between the guests"

if [ "$VM_ROLE" = a ]; then
    # each rank's UCX endpoint (ep_cfg, at UCX_LOG_LEVEL=info) must use tcp
    export UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 UCX_LOG_LEVEL=info
    for m in "$@"; do
        mpi=${m%%:*} prog=${m#*:} t=$SECONDS
        vm_note "MPI hello, $mpi, vm-a and vm-b, UCX_TLS=$UCX_TLS"
        case $mpi in
        mpich) VM_MPI_TIMEOUT=60 vm_mpich 2 "$prog" > /tmp/mpi.log 2>&1 ;;
        ompi)  vm_ompi 2 "$prog" > /tmp/mpi.log 2>&1 ;;
        *) vm_fail "unknown MPI $mpi" ;;
        esac
        st=$?
        grep -v 'UCX  INFO' /tmp/mpi.log | sed "s/^/   $mpi: /"
        echo "   $mpi: status $st ($((SECONDS - t)) s)"
        if [ "$mpi:$st" = mpich:124 ] && grep -q '^PASS' /tmp/mpi.log; then
            # The ranks are done, MPI_Finalize did not return: MPICH 4.0.2
            # waits for its UCX endpoints to close without progressing the
            # peer, which sometimes hangs over UCX tcp (test/apps/mpi_hello.c)
            echo "   $mpi: the ranks passed but MPI_Finalize hung (MPICH" \
                 "4.0.2 over UCX 1.13 tcp, about 1 run in 10 here);" \
                 "not counted"
        elif [ $st -ne 0 ] || ! grep -q '^PASS' /tmp/mpi.log; then
            bad "MPI hello with $mpi"
        fi
        for h in vm-a vm-b; do
            grep "\[$h:.*ep_cfg.*tcp/eth0" /tmp/mpi.log | head -1 |
                sed "s/.*INFO */   $mpi: $h: /" | grep . ||
                bad "$mpi: no UCX endpoint over tcp/eth0 on $h"
        done
    done
    unset UCX_TLS UCX_NET_DEVICES UCX_LOG_LEVEL
fi

vm_barrier end || bad "the guests did not meet at the end"
[ $errors -eq 0 ] || vm_fail "$errors check(s) failed on guest $VM_ROLE"
echo "PASS: guest $VM_ROLE"
