#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The soft-RoCE test bed (contrib/vm) works: it sets itself up (cached
# after the first time) and boots Debian kernels under qemu with rxe0 on a
# virtio NIC, with the freshly built modules added to the guests.
#   odp     one guest on the trixie-backports 7.x kernel: ODP reported for
#           RC, ibv_rc_pingpong plain and --odp, UCX's ucx_perftest UCT
#           am_lat over rc_verbs on rxe0:1, ucx_info -d lists rxe0:1, the
#           modules load under LD_PRELOAD (test/scripts/vm/rxe_one.sh)
#   pair    two guests on a qemu socket network: ibv_rc_pingpong and
#           ib_write_bw between them, and an MPI hello, one rank on each,
#           launched without ssh, with MPICH and Open MPI where the host
#           has them (test/scripts/vm/rxe_pair.sh, test/apps/mpi_hello.c)
#   pinned  one guest on Debian 12's 6.1 kernel: rxe0 up, no ODP
# Skipped, with the reason, where the bed cannot be set up or qemu cannot
# boot. Each part is bounded (run.sh -t) well inside ctest's timeout.
# VM_RXE_PARTS (default "odp pair pinned") selects the parts.
#
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/vm_host.sh"
parts=${VM_RXE_PARTS:-odp pair pinned}

vm_setup

ucx_version=$("$REMAPRING_SRCDIR/config/ucx-version.sh")
[ -n "$ucx_version" ] || fail "cannot read the host's UCX version"
vm_modules

for p in $parts; do
    case $p in
    odp)
        part odp -t 180 -k odp "${modules[@]}" "$jobs/rxe_one.sh" odp \
            "$ucx_version" "$rdma_module" ;;
    pinned)
        part pinned -t 150 -k pinned "${modules[@]}" "$jobs/rxe_one.sh" pinned \
            "$ucx_version" "$rdma_module" ;;
    pair)
        # the hello, built here against the host's MPIs
        mpi=() adds=()
        if command -v mpicc.mpich >/dev/null; then
            mpicc.mpich -O2 -o "$tmp/hello_mpich" \
                "$REMAPRING_SRCDIR/test/apps/mpi_hello.c" || fail "mpicc.mpich"
            adds+=(-a "$tmp/hello_mpich") mpi+=(mpich:/payload/hello_mpich)
        else
            note "pair: no mpicc.mpich, MPICH left out"
        fi
        if command -v mpicc.openmpi >/dev/null; then
            mpicc.openmpi -O2 -o "$tmp/hello_ompi" \
                "$REMAPRING_SRCDIR/test/apps/mpi_hello.c" ||
                fail "mpicc.openmpi"
            adds+=(-a "$tmp/hello_ompi") mpi+=(ompi:/payload/hello_ompi)
        else
            note "pair: no mpicc.openmpi, Open MPI left out"
        fi
        part pair -t 240 -2 -M "${adds[@]}" "$jobs/rxe_pair.sh" "${mpi[@]}" ;;
    *)
        fail "VM_RXE_PARTS: unknown part $p" ;;
    esac
done

vm_times
echo "PASS"
