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
    # each rank's UCX endpoints must use tcp
    export UCX_TLS=tcp,self UCX_NET_DEVICES=eth0
    for m in "$@"; do
        vm_mpi_check "${m%%:*}" "${m#*:}" tcp/eth0 ||
            bad "MPI hello with ${m%%:*}"
    done
    unset UCX_TLS UCX_NET_DEVICES
fi

vm_barrier end || bad "the guests did not meet at the end"
[ $errors -eq 0 ] || vm_fail "$errors check(s) failed on guest $VM_ROLE"
echo "PASS: guest $VM_ROLE"
